"""Error types shared by configuration, model selection and the engine.

They live in their own module so that `config`, `durations` and `models.selection` can all raise them
without importing each other. Every error carries a stable `code` so callers (API layer, tests) can
branch on the kind of failure without parsing message text. `public_text` decides what of any error a
tenant may read.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

_NO_VALUE: Any = object()


class OMError(Exception):
    """Base of every error OM raises on purpose; `code` is the stable machine-readable kind."""

    code: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> str | tuple[Any, ...]:
        # Errors cross process boundaries (Celery results); a subclass with its own __init__ signature
        # defines its own __reduce__.
        if type(self).__init__ is OMError.__init__:
            return (type(self), (self.code, str(self)))
        return super().__reduce__()


class OMConfigError(OMError, ValueError):
    """A configuration value breaks a rule.

    `field` is the dotted path of the offending option as the user would write it in camelCase
    (`observation.bufferTokens`, `reflection.activateAfterIdle`); the message always names that path and
    the offending value so a user can fix the config without reading code. Subclassing ValueError keeps
    it catchable by generic "bad value" handlers.
    """

    field: str
    value: Any
    detail: str

    def __init__(self, code: str, field: str, detail: str, value: Any = _NO_VALUE) -> None:
        self.field = field
        self.value = None if value is _NO_VALUE else value
        self.detail = detail
        self._has_value = value is not _NO_VALUE
        shown = f"{field or '<config>'}={value!r}" if self._has_value else (field or "<config>")
        super().__init__(code, f"[{code}] {shown}: {detail}")

    def at(self, prefix: str) -> OMConfigError:
        """The same error re-anchored under `prefix` (used when a nested validator only knew a relative
        path and the full path is discovered by the caller)."""
        if not prefix:
            return self
        if not self.field:
            field = prefix
        elif self.field.startswith("["):
            field = f"{prefix}{self.field}"
        else:
            field = f"{prefix}.{self.field}"
        value = self.value if self._has_value else _NO_VALUE
        return OMConfigError(self.code, field, self.detail, value)

    def __reduce__(self) -> tuple[Any, ...]:
        if self._has_value:
            return (OMConfigError, (self.code, self.field, self.detail, self.value))
        return (OMConfigError, (self.code, self.field, self.detail))


class OperationFailed(OMError, RuntimeError):
    """A blocking observation or reflection failed, and the failure is already recorded (a `*-failed`
    event, flags cleared, nothing committed).

    Raised, with the original error's message and the original chained, so the turn waiting on the work
    reports itself degraded. Workers declare it an expected outcome (Celery `throws`): it is logged
    without a traceback, while any other exception escaping a task is still reported as a crash.
    """

    def __init__(self, message: str) -> None:
        super().__init__("OPERATION_FAILED", message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (OperationFailed, (str(self),))


class OMModelTierExceeded(OMError, RuntimeError):
    """`ModelByInputTokens.resolve(n)` got more input tokens than its largest tier allows.

    A runtime error, not a config error: the config was valid, this one call is too big. The engine turns
    it into a tripwire that aborts the actor turn (§11.1).
    """

    input_tokens: int
    largest_threshold: int

    def __init__(self, input_tokens: int, largest_threshold: int) -> None:
        self.input_tokens = input_tokens
        self.largest_threshold = largest_threshold
        super().__init__(
            "MODEL_TIER_EXCEEDED",
            f"[MODEL_TIER_EXCEEDED] {input_tokens} input tokens exceed the largest ModelByInputTokens "
            f"threshold ({largest_threshold}); add a larger tier to upTo",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (OMModelTierExceeded, (self.input_tokens, self.largest_threshold))


class ModelCallRefused(OMError, RuntimeError):
    """A memory-model call the server refused before it reached a provider: the thread's stored config
    breaks the operator's policy (`CONFIG_REFUSED`) or its tenant's spend budget is spent
    (`SPEND_BUDGET_EXCEEDED`). Handled like any failed call: the failure policy applies, nothing leaves
    the actor's context, and the failed event carries the reason."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(code, f"[{code}] {reason}")


#: Most characters of an error text a tenant reads (events, extraction failures, API errors).
PUBLIC_TEXT_CHARS = 500


def public_text(error: BaseException, *, context: str = "") -> str:
    """What a tenant may read of `error`: om's own words, never a provider's or a library's.

    A failed model call's exception carries the provider's answer (its error body, the URL it called,
    sometimes headers); a tenant who could choose the endpoint read an internal service's reply back this
    way. So:

    - an `OMError` keeps its message: om wrote it (the model client turns every foreign model error into
      one, `ModelCallFailed`, which names only the model, the error class and the HTTP status);
    - a builtin exception other than `OSError` keeps its message: om's own code raises those with its own
      words (`RuntimeError("commit refused: ...")`, an extractor callback's `ValueError`);
    - anything else (a library's exception, an `OSError` naming a path or an address) is its class name
      and HTTP status when it has one.

    When the public text leaves anything out, the full text is logged here (`context` says where the
    error happened), so the operator still reads what the provider said.
    """
    full = str(error) or type(error).__name__
    if isinstance(error, OMError) or (
        type(error).__module__ == "builtins" and not isinstance(error, OSError)
    ):
        text = full
    else:
        text = error_summary(error)
    if len(text) > PUBLIC_TEXT_CHARS:
        text = text[: PUBLIC_TEXT_CHARS - 1] + "…"
    if text != full:
        log.warning("%s: %s: %s", context or "error shown to a tenant", type(error).__name__, full)
    return text


def error_summary(error: BaseException) -> str:
    """`error`'s class name, with its HTTP status when it has one (`InternalServerError (HTTP 500)`):
    what can be said of a foreign error without its text."""
    status = http_status(error)
    return f"{type(error).__name__} (HTTP {status})" if status is not None else type(error).__name__


def http_status(error: BaseException) -> int | None:
    """The HTTP status a provider answered with, as litellm, the OpenAI SDK or httpx report it (on the
    error or on its `response`); None when it has none."""
    response = _attribute(error, "response")
    for candidate in (_attribute(error, "status_code"), _attribute(response, "status_code")):
        if isinstance(candidate, int) and not isinstance(candidate, bool) and 100 <= candidate <= 599:
            return candidate
    return None


def _attribute(holder: object, name: str) -> object:
    """`holder.name`, or None; a library's property may raise (a response that was never received)."""
    try:
        return getattr(holder, name, None)
    except Exception:
        return None
