"""Rendering messages as the plain-text transcript the Observer reads (§5.3, §5.5).

The Observer sees conversation history as dated, timed lines (`User (2:30 PM): …`) rather than as chat
messages, so that it observes the conversation instead of continuing it, and so that every observation
can be anchored to when something was said. Attachments cannot travel inside text: each one becomes a
numbered placeholder (`[Image #1: photo.png]`) and is returned separately so the caller can forward the
binary right after the lines of its message, subject to the `observeAttachments` filter. When several people
share a thread, a message's speaker follows the role (`User Alice (2:30 PM): …`). om's own memory messages,
posted back by a backend as conversation, are left out (`om_core.context.own_messages`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, Literal
from urllib.parse import unquote, urlparse
from zoneinfo import ZoneInfo

from om_core.context.own_messages import is_own_memory_message
from om_core.messages import TOOL_KIND, Message, Part
from om_core.observations.degenerate import safe_cut_index

AttachmentKind = Literal["image", "file"]

TEMPORAL_MARKER_PREFIX = "__temporal_"
#: Tool results above this many tokens are cut; the Observer needs the gist, not a 200k-token page dump.
TOOL_RESULT_TOKEN_CAP = 10_000
#: Interpolation probes in a row that fail to halve the search bracket before one bisection step.
_SLOW_STEPS_BEFORE_BISECTING = 3
#: `encryptedContent` strings longer than this are opaque provider state, useless to the Observer.
ENCRYPTED_CONTENT_MAX_CHARS = 256
IMAGE_EXTENSIONS = frozenset(
    {"png", "jpg", "jpeg", "webp", "gif", "bmp", "tiff", "tif", "heic", "heif", "avif"}
)
#: Content-block types inside tool results that carry an attachment.
RESULT_ATTACHMENT_TYPES = frozenset({"image-data", "image-url", "media", "file-data", "file-url"})

_TERMINAL_STATES = frozenset({"result", "output-error", "output-denied"})
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_REMINDER_RE = re.compile(r"^\s*<system-reminder\b[^>]*>(?P<body>.*?)</system-reminder>\s*$", re.DOTALL)


@dataclass(frozen=True)
class AttachmentRef:
    """One attachment shown as a placeholder in the transcript, with what is needed to forward it.

    `text_offset` is the position in `Transcript.text` right after the lines of the attachment's message:
    where the binary belongs when the caller interleaves it with the text. Exactly one of `part` (an
    `image`/`file` part) or `block` (a content block inside a tool result) is set.
    """

    kind: AttachmentKind
    number: int
    placeholder: str
    label: str | None
    mime_type: str | None
    data: Any
    url: str | None
    filename: str | None
    message_id: str
    text_offset: int
    part: Part | None = None
    block: dict[str, Any] | None = None
    tool_call_id: str | None = None

    @property
    def filter_mime_type(self) -> str:
        """The lower-cased mime type the `observeAttachments` patterns are matched against."""
        if self.mime_type:
            return self.mime_type.lower()
        return "image/*" if self.kind == "image" else "application/octet-stream"


@dataclass
class AttachmentCounter:
    """Placeholder numbers, shared by every transcript rendered for one Observer call."""

    images: int = 0
    files: int = 0

    def next(self, kind: AttachmentKind) -> int:
        if kind == "image":
            self.images += 1
            return self.images
        self.files += 1
        return self.files


@dataclass(frozen=True)
class Transcript:
    text: str
    attachments: list[AttachmentRef] = field(default_factory=list)


def render_transcript(
    messages: Sequence[Message],
    tz: str,
    *,
    part_char_cap: int | None = None,
    counter: Callable[[str], int] | None = None,
    attachment_counter: AttachmentCounter | None = None,
) -> Transcript:
    """Render `messages` in order as transcript lines in the time zone `tz` (an IANA name).

    `part_char_cap` cuts each part's text (used for the other-conversations block); `counter` counts
    tokens for the tool-result cap (default: `ceil(len / 4)`); `attachment_counter` continues placeholder
    numbering across several transcripts of one Observer call (multi-thread batches).
    """
    renderer = _Renderer(
        zone=ZoneInfo(tz),
        part_char_cap=part_char_cap,
        counter=counter or _quarter_length,
        numbers=attachment_counter or AttachmentCounter(),
    )
    for message in messages:
        renderer.render_message(message)
    return renderer.result()


def filter_attachments(
    attachments: Sequence[AttachmentRef], observe_attachments: bool | str | Sequence[str]
) -> list[AttachmentRef]:
    """The attachments `observeAttachments` allows to be forwarded to the Observer model (§5.5).

    `True` and `"auto"` forward everything (the caller resolves `"auto"` against the provider capability
    registry beforehand and passes a bool when it knows better); `False` or an empty list forward nothing;
    a list forwards attachments whose mime type matches a pattern (`application/pdf`, `image/*`, `*`,
    `*/*`), case-insensitively. Placeholders stay in the transcript either way.
    """
    if observe_attachments is True or observe_attachments == "auto":
        return list(attachments)
    if observe_attachments is False:
        return []
    if isinstance(observe_attachments, str):
        raise ValueError(
            "observeAttachments must be a bool, 'auto' or a list of mime patterns, "
            f"got {observe_attachments!r}"
        )
    patterns = [pattern.strip().lower() for pattern in observe_attachments]
    return [ref for ref in attachments if any(_mime_matches(ref.filter_mime_type, p) for p in patterns)]


def _mime_matches(mime: str, pattern: str) -> bool:
    if pattern in ("*", "*/*"):
        return True
    if pattern.endswith("/*"):
        return mime.split("/", 1)[0] == pattern[:-2]
    return mime == pattern


def is_image_like(mime_type: str | None, data: Any, url: str | None, filename: str | None) -> bool:
    """Whether a file should be treated (numbered and forwarded) as an image."""
    if mime_type and mime_type.lower().startswith("image/"):
        return True
    if isinstance(data, str) and data[:11].lower() == "data:image/":
        return True
    paths = [urlparse(candidate).path for candidate in (url, _url_in(data)) if candidate]
    if filename:
        paths.append(filename)
    return any(path.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS for path in paths if "." in path)


def attachment_label(filename: str | None, url: str | None, mime_type: str | None) -> str | None:
    """Filename, else the decoded last segment of an http(s) URL, else the mime type, else nothing."""
    if filename:
        return filename
    if url and url.lower().startswith(("http://", "https://")):
        segment = unquote(urlparse(url).path.rsplit("/", 1)[-1])
        if segment:
            return segment
    return mime_type or None


def _url_in(data: Any) -> str | None:
    if isinstance(data, str) and data[:8].lower().startswith(("http://", "https://")):
        return data
    return None


def _data_uri_mime(data: Any) -> str | None:
    if isinstance(data, str) and data[:5].lower() == "data:":
        mime = data[5:].split(";", 1)[0].split(",", 1)[0].strip()
        return mime or None
    return None


def _quarter_length(text: str) -> int:
    return math.ceil(len(text) / 4)


def _time_label(moment: datetime) -> str:
    hour = moment.hour % 12 or 12
    return f"{hour}:{moment.minute:02d} {'AM' if moment.hour < 12 else 'PM'}"


def _date_line(day: date) -> str:
    return f"{_MONTHS[day.month - 1]} {day.day} {day.year}:"


class _Renderer:
    """Walks the messages once, keeping the state the line rules depend on."""

    def __init__(
        self,
        *,
        zone: ZoneInfo,
        part_char_cap: int | None,
        counter: Callable[[str], int],
        numbers: AttachmentCounter,
    ) -> None:
        self.zone = zone
        self.part_char_cap = part_char_cap
        self.counter = counter
        self.numbers = numbers
        self.blocks: list[str] = []
        self.text_length = 0
        self.attachments: list[AttachmentRef] = []
        self.previous_day: date | None = None
        self.previous_time: str | None = None
        self.called: set[str] = set()
        self.finished: set[str] = set()
        # Per-message scratch state.
        self.lines: list[str] = []
        self.pending: list[AttachmentRef] = []
        self.message: Message | None = None
        self.unavailable: frozenset[str] = frozenset()

    def result(self) -> Transcript:
        return Transcript(text="\n\n".join(self.blocks), attachments=self.attachments)

    # --- messages -------------------------------------------------------------------------------------

    def render_message(self, message: Message) -> None:
        self.lines, self.pending, self.message = [], [], message
        self.unavailable = _unavailable_urls(message)
        if message.id.startswith(TEMPORAL_MARKER_PREFIX):
            self.emit("", _gap_text(message), message.created_at, always_time=True)
        else:
            title = _message_title(message)
            for part in message.parts:
                self.render_part(message, part, title)
        if not self.lines:
            return
        block = "\n".join(self.lines)
        self.text_length += len(block) + (2 if self.blocks else 0)
        self.blocks.append(block)
        self.attachments.extend(replace(ref, text_offset=self.text_length) for ref in self.pending)

    def render_part(self, message: Message, part: Part, title: str) -> None:
        when = message.part_time(part)
        if part.type == "text":
            text = part.text or ""
            if is_own_memory_message(text):
                return  # our own memory posted back by a backend: never observed as conversation
            if _REMINDER_RE.match(text):
                title, text = "system-reminder", _reminder_body(text)
            if text.strip():
                self.emit(title, self.capped(text), when)
        elif part.type == "reasoning":
            if part.text and part.text.strip():
                self.emit("Reasoning", self.capped(part.text), when)
        elif part.type == TOOL_KIND:
            self.render_tool(part, when)
        elif part.type in ("image", "file"):
            self.render_attachment_part(part, when)
        # data-*, step-start and source parts carry nothing for the Observer.

    # --- lines ----------------------------------------------------------------------------------------

    def emit(self, title: str, body: str, when: datetime, *, always_time: bool = False) -> None:
        local = when.astimezone(self.zone)
        if local.date() != self.previous_day:
            self.lines.append(_date_line(local.date()))
            self.previous_day = local.date()
            self.previous_time = None
        label = _time_label(local)
        show_time = always_time or label != self.previous_time
        self.previous_time = label
        head = f"{title} ({label})".strip() if show_time else title
        self.lines.append(f"{head}: {body}")

    def capped(self, text: str) -> str:
        cap = self.part_char_cap
        if cap is None or len(text) <= cap:
            return text
        cut = safe_cut_index(text, cap)
        return f"{text[:cut]}\n... [truncated {len(text) - cut} characters]"

    # --- tools ----------------------------------------------------------------------------------------

    def render_tool(self, part: Part, when: datetime) -> None:
        call_id = part.tool_call_id
        name = part.tool_name or "unknown"
        if call_id is None or call_id not in self.called:
            if call_id is not None:
                self.called.add(call_id)
            args = "[arguments unavailable]" if part.args is None else _serialise(_strip_encrypted(part.args))
            self.emit(f"Tool Call {name}", self.capped(args), when, always_time=True)
        state = part.state or ("result" if part.result is not None else "call")
        if state not in _TERMINAL_STATES or (call_id is not None and call_id in self.finished):
            return
        if call_id is not None:
            self.finished.add(call_id)
        if state == "output-error":
            error = part.error_text or "Tool execution failed"
            self.emit(f"Tool Error {name}", self.capped(error), when, always_time=True)
        elif state == "output-denied":
            reason = part.approval_reason or "Tool call was not approved by the user"
            self.emit(f"Tool Denied {name}", self.capped(reason), when, always_time=True)
        else:
            self.emit(f"Tool Result {name}", self.capped(self.format_result(part)), when, always_time=True)

    def format_result(self, part: Part) -> str:
        result = part.result
        if result is None or (isinstance(result, str | list | dict) and not result):
            return "[empty result]"
        result = _strip_encrypted(self.replace_result_attachments(result, part.tool_call_id))
        return self.truncate_tokens(_serialise(result))

    def replace_result_attachments(self, value: Any, tool_call_id: str | None) -> Any:
        if isinstance(value, list):
            return [self.replace_result_attachments(item, tool_call_id) for item in value]
        if not isinstance(value, dict):
            return value
        block_type = value.get("type")
        if isinstance(block_type, str) and block_type in RESULT_ATTACHMENT_TYPES:
            placeholder = self.register_block(value, block_type, tool_call_id)
            return {"type": block_type, "attachment": placeholder}
        return {key: self.replace_result_attachments(item, tool_call_id) for key, item in value.items()}

    def truncate_tokens(self, text: str) -> str:
        total = self.counter(text)
        if total <= TOOL_RESULT_TOKEN_CAP:
            return text
        keep, kept_tokens = self.longest_prefix_within(text, total)
        removed = max(total - kept_tokens, 1)
        return f"{text[:keep]}\n... [truncated ~{removed} tokens]"

    def longest_prefix_within(self, text: str, total: int) -> tuple[int, int]:
        """(index, tokens before it): a safe cut whose prefix has at most TOOL_RESULT_TOKEN_CAP tokens and
        one more character would not (the largest such index while counts grow with the prefix, as they do
        on real text).

        Each probe tokenises a ~10k-token prefix, so the search interpolates where the cap falls between
        the bracket's ends (token density is nearly even) instead of bisecting: 2-7 probes on prose, JSON,
        CJK and digit runs instead of ~17. Bisection steps in when interpolation stops closing the bracket."""
        cap = TOOL_RESULT_TOKEN_CAP
        low, low_tokens = 0, 0  # invariant: count(text[:low]) <= cap < count(text[:high])
        high, high_tokens = len(text), total
        slow_steps = 0
        while high - low > 1:
            if slow_steps < _SLOW_STEPS_BEFORE_BISECTING:
                estimate = low + (cap + 0.5 - low_tokens) * (high - low) / (high_tokens - low_tokens)
                probe = min(max(round(estimate), low + 1), high - 1)
            else:
                probe, slow_steps = (low + high) // 2, 0
            width = high - low
            tokens = self.counter(text[:probe])
            if tokens <= cap:
                low, low_tokens = probe, tokens
            else:
                high, high_tokens = probe, tokens
            slow_steps = slow_steps + 1 if 2 * (high - low) > width else 0
        cut = safe_cut_index(text, low)
        return cut, low_tokens if cut == low else self.counter(text[:cut])

    # --- attachments ----------------------------------------------------------------------------------

    def render_attachment_part(self, part: Part, when: datetime) -> None:
        url = part.url or _url_in(part.data)
        mime = part.mime_type or _data_uri_mime(part.data)
        image = part.type == "image" or is_image_like(mime, part.data, url, part.filename)
        kind: AttachmentKind = "image" if image else "file"
        placeholder = self.register(
            kind=kind, mime=mime, data=part.data, url=url, filename=part.filename, part=part
        )
        self.emit("Image" if image else "File", placeholder, when)

    def register_block(self, block: dict[str, Any], block_type: str, tool_call_id: str | None) -> str:
        data = block.get("data")
        url = block.get("url") if isinstance(block.get("url"), str) else _url_in(data)
        mime = block.get("mediaType") or block.get("mimeType") or _data_uri_mime(data)
        mime = mime if isinstance(mime, str) else None
        filename = block.get("filename") if isinstance(block.get("filename"), str) else None
        image = block_type.startswith("image-") or is_image_like(mime, data, url, filename)
        return self.register(
            kind="image" if image else "file",
            mime=mime,
            data=data,
            url=url,
            filename=filename,
            block=block,
            tool_call_id=tool_call_id,
        )

    def register(
        self,
        *,
        kind: AttachmentKind,
        mime: str | None,
        data: Any,
        url: str | None,
        filename: str | None,
        part: Part | None = None,
        block: dict[str, Any] | None = None,
        tool_call_id: str | None = None,
    ) -> str:
        number = self.numbers.next(kind)
        label = attachment_label(filename, url, mime)
        noun = "Image" if kind == "image" else "File"
        placeholder = f"[{noun} #{number}: {label}]" if label else f"[{noun} #{number}]"
        if self.message is not None and (url is None or url not in self.unavailable):
            self.pending.append(
                AttachmentRef(
                    kind=kind,
                    number=number,
                    placeholder=placeholder,
                    label=label,
                    mime_type=mime,
                    data=data,
                    url=url,
                    filename=filename,
                    message_id=self.message.id,
                    text_offset=0,
                    part=part,
                    block=block,
                    tool_call_id=tool_call_id,
                )
            )
        return placeholder


def _serialise(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _strip_encrypted(value: Any) -> Any:
    if isinstance(value, list):
        return [_strip_encrypted(item) for item in value]
    if not isinstance(value, dict):
        return value
    stripped: dict[str, Any] = {}
    for key, item in value.items():
        if key == "encryptedContent" and isinstance(item, str) and len(item) > ENCRYPTED_CONTENT_MAX_CHARS:
            stripped[key] = f"[stripped encryptedContent: {len(item)} characters]"
        else:
            stripped[key] = _strip_encrypted(item)
    return stripped


def _message_title(message: Message) -> str:
    """Who a line is attributed to (the role, then the speaker's name when the message has one); runtime
    instructions are never labelled as the user."""
    signal = message.metadata.get("signal")
    if isinstance(signal, dict):
        name = signal.get("tagName") or signal.get("tag") or signal.get("type")
        if isinstance(name, str) and name:
            return "User" if name == "user" else name
    if isinstance(signal, str) and signal:
        return "User" if signal == "user" else signal
    if "systemReminder" in message.metadata or "reminderType" in message.metadata:
        return "system-reminder"
    role = message.role.capitalize()
    # Several people in one thread: the speaker's name after the role ("User Alice"), so the Observer can
    # tell who said what. `Message.speaker` only yields names that cannot forge a line or a tag.
    speaker = message.speaker if message.role in ("user", "assistant") else None
    return f"{role} {speaker}" if speaker else role


def _reminder_body(text: str) -> str:
    match = _REMINDER_RE.match(text)
    return match.group("body").strip() if match else text


def _gap_text(message: Message) -> str:
    metadata = message.metadata
    reminder = metadata.get("systemReminder")
    nested = reminder.get("gapText") if isinstance(reminder, dict) else None
    for candidate in (metadata.get("gapText"), nested):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    text = " ".join(part.text or "" for part in message.parts if part.type == "text")
    return _reminder_body(text).split(" — ", 1)[0].strip()


def _unavailable_urls(message: Message) -> frozenset[str]:
    """URLs the actor already failed to download (never forwarded; the placeholder still shows)."""
    mastra = message.metadata.get("mastra")
    entries = mastra.get("unavailableAttachments") if isinstance(mastra, dict) else None
    if not isinstance(entries, list):
        return frozenset()
    urls = [entry.get("url") if isinstance(entry, dict) else entry for entry in entries]
    return frozenset(url for url in urls if isinstance(url, str) and url)
