"""What a recall call can fail with, each with a message the model (or the developer) can act on.

The tool is called by a model: an error's text is what the model reads next, so every message says what
to do instead. The API maps each kind to one status (`om_api/routes/recall.py`); the proxy's tool loop
hands the message back to the model as the tool's answer.
"""

from __future__ import annotations

from typing import Any

from om_core.errors import OMError
from om_core.tenancy.scoped_ids import PublicId

__all__ = ["RecallError", "RecallInvalid", "RecallNotFound", "RetrievalDisabled"]


class RecallError(OMError):
    """Base of every recall failure; `str(error)` is the message to show."""


class RecallInvalid(RecallError, ValueError):
    """A parameter is out of range or does not fit the mode; `field` names it (the tool's own name)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.detail = message
        super().__init__("RECALL_INVALID", f"{field}: {message}" if field else message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecallInvalid, (self.field, self.detail))


class RecallNotFound(RecallError, LookupError):
    """A cursor or thread that is not readable from the active thread (missing, another resource, or
    outside thread scope): one answer for all, so nothing about other users' data leaks."""

    def __init__(self, message: str) -> None:
        super().__init__("RECALL_NOT_FOUND", message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecallNotFound, (str(self),))


class RetrievalDisabled(RecallError, ValueError):
    """Recall on a thread whose effective config leaves `retrieval` off: there is no tool to call."""

    def __init__(self, thread_id: PublicId) -> None:
        self.thread_id = thread_id
        super().__init__(
            "RETRIEVAL_DISABLED",
            f"recall is off for thread {thread_id!r}: set retrieval: true (or an object such as "
            '{"scope": "thread"}) in its config to enable it',
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (RetrievalDisabled, (self.thread_id,))
