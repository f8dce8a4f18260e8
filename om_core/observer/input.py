"""The Observer's user message with the attachments it may see (behaviour §5.3, §5.5).

The transcript shows every image and file as a numbered placeholder (`om_core.observer.transcript`). The model
sees the attachment itself only when it travels next to the text, so when `observeAttachments` lets any
through, the user message becomes a list of content parts: the text up to the end of a message's lines,
then that message's attachments (images as `image_url` parts, other files as litellm `file` parts), then
the text that follows. With nothing to forward it stays the plain string it has always been, so prompts,
prompt caches and anything reading the message as text see no change.

The message around the history (previous observations, priors, the task) is built by the caller: once
per call for one thread, with one `<thread>` block per thread for a resource batch. `observer_user_content`
takes that builder and the rendered histories, so the splicing of attachments into the message is written
once for both.
"""

from __future__ import annotations

import base64
import mimetypes
import re
from collections.abc import Callable, Sequence
from typing import Any

from om_core.messages import Message
from om_core.observer.transcript import (
    AttachmentCounter,
    AttachmentRef,
    Transcript,
    filter_attachments,
    render_transcript,
)

__all__ = [
    "AttachmentSetting",
    "ContentPart",
    "UserContent",
    "attachment_content",
    "forwarding_rule",
    "observer_user_content",
    "render_histories",
]

ContentPart = dict[str, Any]
#: What the Observer's user message is: plain text, or content parts when attachments travel with it.
UserContent = str | list[ContentPart]
#: `observation.observeAttachments` as configured: a bool, "auto", or mime patterns.
AttachmentSetting = bool | str | Sequence[str]

#: Stands for history `i` while the caller's builder lays out the message. NUL never occurs in what the
#: builder is given otherwise (stored text and model replies holding NUL are refused), so a marker cannot
#: be confused with content; the last occurrence is taken anyway, since only text before the history
#: (previous observations, priors) comes from outside.
_MARKER = "\x00om-history-{}\x00"
_MARKER_RE = re.compile("\x00om-history-(\\d+)\x00")
_URL_PREFIXES = ("http://", "https://")
_IMAGE_DETAILS = frozenset({"low", "high", "auto"})


def render_histories(
    sections: Sequence[Sequence[Message]],
    tz: str,
    *,
    counter: Callable[[str], int] | None = None,
    part_char_cap: int | None = None,
) -> list[Transcript]:
    """One transcript per section (one thread's messages each), numbering attachments across all of them:
    placeholders are numbered per Observer call, not per thread (§5.5)."""
    numbers = AttachmentCounter()
    return [
        render_transcript(
            messages, tz, counter=counter, part_char_cap=part_char_cap, attachment_counter=numbers
        )
        for messages in sections
    ]


def forwarding_rule(
    setting: AttachmentSetting, accepts_images: Callable[[], bool | None]
) -> bool | Sequence[str]:
    """The filter `filter_attachments` applies for `setting`. "auto" asks `accepts_images` (the Observer
    model's capability data) only then: all attachments when the model takes images or nothing is known
    about it, none when it is known not to (§5.5)."""
    if isinstance(setting, str):
        if setting != "auto":
            raise ValueError(
                f"observeAttachments must be a bool, 'auto' or a list of mime patterns, got {setting!r}"
            )
        return accepts_images() is not False
    return setting


def observer_user_content(
    histories: Sequence[Transcript],
    compose: Callable[[Sequence[str]], str],
    forward: bool | Sequence[str],
) -> UserContent:
    """The user message `compose` builds from the histories' texts, with the attachments `forward`
    allows placed right after the lines of their message.

    `compose` gets one string per history and must place each exactly once, unchanged apart from
    stripping (`build_observer_user_message`, `render_thread_blocks` do). Without an attachment to
    forward the result is `compose` of the texts, a plain string.
    """
    texts = [history.text.strip() for history in histories]
    forwarded = [_forwarded(history, forward) for history in histories]
    if not any(forwarded):
        return compose(texts)
    layout = _layout(compose, len(histories))
    builder = _PartsBuilder()
    for piece in layout:
        if isinstance(piece, str):
            builder.text(piece)
            continue
        cursor = 0
        text, lead = texts[piece], len(histories[piece].text) - len(histories[piece].text.lstrip())
        for offset, part in forwarded[piece]:
            offset = min(max(offset - lead, cursor), len(text))
            builder.text(text[cursor:offset])
            builder.attachment(part)
            cursor = offset
        builder.text(text[cursor:])
    return builder.parts()


def attachment_content(ref: AttachmentRef) -> ContentPart | None:
    """The content part litellm sends for one attachment; None when it carries neither data nor a URL."""
    source = _source(ref)
    if source is None:
        return None
    if ref.kind == "image":
        image: dict[str, Any] = {"url": source}
        detail = ref.part.detail if ref.part is not None else None
        if detail in _IMAGE_DETAILS:
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    file: dict[str, Any]
    if source.lower().startswith(_URL_PREFIXES):
        file = {"file_id": source}  # litellm's way of passing a file by URL
    else:
        file = {"file_data": source}
        if ref.filename:
            file["filename"] = ref.filename
    if ref.mime_type:
        file["format"] = ref.mime_type.lower()
    return {"type": "file", "file": file}


def _forwarded(history: Transcript, forward: bool | Sequence[str]) -> list[tuple[int, ContentPart]]:
    """(offset in the history's text, content part) of each attachment to forward, in text order."""
    out: list[tuple[int, ContentPart]] = []
    for ref in filter_attachments(history.attachments, forward):
        part = attachment_content(ref)
        if part is not None:
            out.append((ref.text_offset, part))
    return out


def _layout(compose: Callable[[Sequence[str]], str], count: int) -> list[str | int]:
    """The composed message as literal text and history indexes, in order."""
    frame = compose([_MARKER.format(i) for i in range(count)])
    pieces: list[str | int] = []
    seen: set[int] = set()
    for position, piece in enumerate(_MARKER_RE.split(frame)):
        if position % 2 == 0:
            pieces.append(piece)
            continue
        index = int(piece)
        if index in seen or index >= count:
            raise ValueError(f"the Observer message builder placed history {index} twice or out of range")
        seen.add(index)
        pieces.append(index)
    if len(seen) != count:
        raise ValueError("the Observer message builder left out a history")
    return pieces


class _PartsBuilder:
    """Content parts with adjacent text merged: one text part between two attachments."""

    def __init__(self) -> None:
        self._parts: list[ContentPart] = []
        self._text: list[str] = []

    def text(self, text: str) -> None:
        if text:
            self._text.append(text)

    def attachment(self, part: ContentPart) -> None:
        self._flush()
        self._parts.append(part)

    def parts(self) -> list[ContentPart]:
        self._flush()
        return self._parts

    def _flush(self) -> None:
        if self._text:
            self._parts.append({"type": "text", "text": "".join(self._text)})
            self._text = []


def _source(ref: AttachmentRef) -> str | None:
    """A URL or a data URI for the attachment's bytes."""
    if ref.url:
        return ref.url
    data = ref.data
    if isinstance(data, bytes | bytearray):
        data = base64.b64encode(bytes(data)).decode("ascii")
    if not isinstance(data, str) or not data.strip():
        return None
    data = data.strip()
    if data[:5].lower() == "data:" or data.lower().startswith(_URL_PREFIXES):
        return data
    return f"data:{_mime_type(ref)};base64,{data}"


def _mime_type(ref: AttachmentRef) -> str:
    if ref.mime_type:
        return ref.mime_type.lower()
    guessed = mimetypes.guess_type(ref.filename)[0] if ref.filename else None
    if guessed:
        return guessed
    return "image/png" if ref.kind == "image" else "application/octet-stream"
