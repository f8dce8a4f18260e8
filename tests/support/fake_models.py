"""A fake model at the engine's model boundary for tests that need exact, traceable output.

The Observer reply holds one line per transcript line with the line's first words, so every test can see
which messages an observation covers. The Reflector reply keeps every other observation line, so
reflections are smaller than their input. No network, no litellm: the real model path is tested with the
offline local model through litellm elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TRANSCRIPT_HEADING = "## New Message History to Observe"
REFLECT_HEADING = "## Observations to Reflect On"


@dataclass(frozen=True)
class FakeCompletion:
    text: str
    input_tokens: int
    output_tokens: int
    cost: float | None
    model: str
    finish_reason: str | None = "stop"


@dataclass
class FakeModels:
    """`calls` holds (role, user message text) per call and `models` the model each call named.
    `thread_title` is proposed by every Observer reply when set; `vision` is what `accepts_images`
    answers for every model."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    models: list[Any] = field(default_factory=list)
    fail_next: int = 0
    thread_title: str | None = None
    vision: bool | None = None

    def complete(self, model: Any, *, system: str, user: Any, **_: Any) -> FakeCompletion:
        text_in = user_text(user)
        self.calls.append(("observer" if TRANSCRIPT_HEADING in text_in else "reflector", text_in))
        self.models.append(model)
        if self.fail_next > 0:
            self.fail_next -= 1
            raise ConnectionError("connection reset by fake provider")
        if TRANSCRIPT_HEADING in text_in:
            text = observe(text_in)
            if self.thread_title is not None:
                text += f"\n<thread-title>{self.thread_title}</thread-title>"
        else:
            text = reflect(text_in)
        return FakeCompletion(text, len(text_in) // 4, len(text) // 4, 0.0, str(model))

    def accepts_images(self, model: str) -> bool | None:
        return self.vision


def user_text(user: Any) -> str:
    """The text of a user message given as a string or as content parts (attachments skipped)."""
    if isinstance(user, str):
        return user
    return "".join(part["text"] for part in user if part.get("type") == "text")


def _section(user: str, heading: str) -> str:
    body = user.split(heading, 1)[1]
    return body.split("\n## ", 1)[0]


_THREAD_BLOCK = re.compile(r'<thread id="([^"]+)">\n(.*?)\n</thread>', re.DOTALL)


def observe(user: str) -> str:
    """One observation line per transcript line; per `<thread id>` block for a multi-thread prompt."""
    history = _section(user, TRANSCRIPT_HEADING)
    blocks = _THREAD_BLOCK.findall(history)
    if not blocks:
        return _observe_one(history)
    inner = "\n".join(
        f'<thread id="{thread}">\nDate: Mar 3, 2026\n{_lines(body)}\n</thread>' for thread, body in blocks
    )
    return f"<observations>\n{inner}\n</observations>"


def _observe_one(history: str) -> str:
    body = _lines(history)
    return (
        f"<observations>\nDate: Mar 3, 2026\n{body}\n</observations>\n\n<current-task>\nchat\n</current-task>"
    )


def _lines(history: str) -> str:
    lines = []
    for raw in history.splitlines():
        match = re.match(r"^(User|Assistant)(?: \(([^)]*)\))?: (.*)$", raw.strip())
        if match:
            words = " ".join(match.group(3).split()[:8])
            lines.append(f"* 🔴 (09:00) {match.group(1)} said: {words}")
    return "\n".join(lines)


def reflect(user: str) -> str:
    lines = [line for line in _section(user, REFLECT_HEADING).splitlines() if line.startswith("* ")]
    kept = lines[::2] or lines[:1]
    return "<observations>\nDate: Mar 3, 2026\n" + "\n".join(kept) + "\n</observations>"
