"""The recall tool's parameters (behaviour §9.3), validated once into `RecallParams`.

A model writes these, so a bad value is answered with a message naming the parameter and the fix
(`RecallInvalid`), never a stack of validator output. Ranges: `page` in [-50, 50]; `limit` in [1, 20] for
messages and search, clamped to [1, 50] in threads mode (listing threads is cheap, and the spec clamps
there rather than refusing); `partIndex` and `charOffset` at least 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime, time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from om_core.recall.errors import RecallInvalid
from om_core.tenancy.scoped_ids import PublicId

__all__ = [
    "MAX_LIMIT",
    "MAX_PAGE",
    "MAX_THREADS_LIMIT",
    "PART_TYPES",
    "Mode",
    "PartType",
    "RecallParams",
    "parse_params",
]

Mode = Literal["messages", "threads", "search"]
PartType = Literal["text", "tool-call", "tool-result", "reasoning", "image", "file"]
PART_TYPES: tuple[str, ...] = ("text", "tool-call", "tool-result", "reasoning", "image", "file")

MAX_PAGE = 50
MAX_LIMIT = 20
MAX_THREADS_LIMIT = 50
DEFAULT_LIMIT = 20
DEFAULT_SEARCH_LIMIT = 10
#: Thread ids as the API accepts them (`om_api.schemas.ID_PATTERN`): a `/` can never reach a stored id.
_THREAD_ID = re.compile(r"^[A-Za-z0-9._:@+=~-]{1,255}$")


def _moment(value: Any) -> datetime | None:
    """An ISO-8601 date (midnight UTC) or datetime (UTC when it names no zone)."""
    if value is None or isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime.combine(value, time(), UTC)
    elif isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"{value!r} is not an ISO-8601 date or datetime; write e.g. 2026-03-15 or "
                "2026-03-10T00:00:00Z"
            ) from None
    else:
        raise ValueError("give an ISO-8601 date or datetime as a string, e.g. 2026-03-15")
    if parsed is None:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class RecallParams(BaseModel):
    """One recall call. Field names are the tool's camelCase names (`threadId`, `partIndex`, ...)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)

    mode: Mode = "messages"
    query: str | None = Field(default=None, max_length=4000)
    cursor: str | None = Field(default=None, min_length=1, max_length=2000)
    thread_id: PublicId | None = None
    anchor: Literal["start", "end"] = "start"
    page: int | None = Field(default=None, ge=-MAX_PAGE, le=MAX_PAGE)
    limit: int | None = None
    detail: Literal["low", "high"] = "low"
    part_type: PartType | None = None
    tool_name: str | None = Field(default=None, min_length=1, max_length=255)
    part_index: int | None = Field(default=None, ge=0)
    char_offset: int = Field(default=0, ge=0)
    before: datetime | None = None
    after: datetime | None = None

    @field_validator("before", "after", mode="before")
    @classmethod
    def _iso(cls, value: Any) -> datetime | None:
        return _moment(value)

    @field_validator("thread_id")
    @classmethod
    def _thread_id(cls, value: str | None) -> str | None:
        if value is None or value == "current" or _THREAD_ID.match(value):
            return value
        raise ValueError(
            'is not a thread id: pass an id listed by mode "threads", or "current" for this thread'
        )

    @model_validator(mode="after")
    def _fits_the_mode(self) -> RecallParams:
        if self.mode == "search" and not (self.query and self.query.strip()):
            raise _invalid("query", 'is required in mode "search": give the words or question to look for')
        if self.mode != "threads" and self.limit is not None and not 1 <= self.limit <= MAX_LIMIT:
            raise _invalid(
                "limit",
                f"must be between 1 and {MAX_LIMIT} (got {self.limit}); read further with the next page",
            )
        if self.part_index is not None and self.cursor is None:
            raise _invalid(
                "partIndex", "needs a cursor: pass the id of the message that holds the part as cursor"
            )
        if self.char_offset and self.part_index is None:
            raise _invalid("charOffset", "applies to one part: pass it together with cursor and partIndex")
        return self

    @property
    def page_number(self) -> int:
        """Messages: the signed page, 0 read as 1. Threads: the 0-based page (negative read as 0)."""
        if self.mode == "threads":
            return max(self.page or 0, 0)
        return self.page or 1

    @property
    def page_limit(self) -> int:
        if self.mode == "threads":
            return min(max(self.limit if self.limit is not None else DEFAULT_LIMIT, 1), MAX_THREADS_LIMIT)
        if self.mode == "search":
            return self.limit if self.limit is not None else DEFAULT_SEARCH_LIMIT
        return self.limit if self.limit is not None else DEFAULT_LIMIT


class _Invalid(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _invalid(field: str, message: str) -> _Invalid:
    return _Invalid(field, message)


def parse_params(params: Mapping[str, Any] | RecallParams) -> RecallParams:
    """Validate a call's parameters; `RecallInvalid` names the first parameter to fix. A parameter given
    as null counts as left out (models in strict tool mode send every parameter, unused ones as null)."""
    if isinstance(params, RecallParams):
        return params
    try:
        return RecallParams.model_validate({k: v for k, v in params.items() if v is not None})
    except ValidationError as exc:
        raise _first_problem(exc) from None


def _first_problem(exc: ValidationError) -> RecallInvalid:
    error = exc.errors()[0]
    context = error.get("ctx") or {}
    cause = context.get("error")
    if isinstance(cause, _Invalid):
        return RecallInvalid(cause.field, str(cause))
    loc = [str(part) for part in error.get("loc", ())]
    field = loc[0] if loc else ""
    field = to_camel(field) if "_" in field else field
    message = str(error.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        known = ", ".join(to_camel(name) for name in RecallParams.model_fields)
        message = f"is not a recall parameter; use only: {known}"
    elif error.get("type") == "literal_error":
        message = f"{message} (got {error.get('input')!r})"
    return RecallInvalid(field, message)
