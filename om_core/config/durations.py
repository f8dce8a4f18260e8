"""Parsing of idle durations (`activateAfterIdle` and its per-phase variants).

Users write durations the way they think of them ("5m", "1.5 h", "30 seconds") or as raw milliseconds;
the engine only ever compares integers of milliseconds, so everything is normalised here once, at config
load. `"auto"` cannot be resolved yet: it depends on the actor model of each call (§4.7), so it is passed
through as a marker.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from om_core.errors import OMConfigError
from om_core.tokens.rounding import round_half_up

DurationInput = int | float | str | bool | None
"""What a user may put in an `activateAfterIdle` option (`True` is accepted by the type but rejected)."""

AUTO: Literal["auto"] = "auto"

_MS_PER_UNIT: dict[str, int] = {
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1_000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3_600_000),
}

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$", re.IGNORECASE)

_ERROR_CODE = "ACTIVATE_AFTER_IDLE_INVALID"
_HINT = 'use milliseconds (300000), a duration such as "5m", "1hr", "30 seconds", "auto", or false'


def parse_duration_ms(value: object, field: str) -> int | Literal["auto"] | None:
    """Normalise an idle duration to whole milliseconds.

    `False`/`None` mean "off" and both come back as None; callers that need to tell "explicitly off" from
    "unset" (for inheritance) must look at the raw value before calling this.
    """
    if value is None or value is False:
        return None
    if value is True:
        raise OMConfigError(_ERROR_CODE, field, f"true is not a duration; {_HINT}", value)
    if isinstance(value, int | float):
        return _milliseconds_from_number(value, field)
    if isinstance(value, str):
        if value.strip().lower() == AUTO:
            return AUTO
        return _milliseconds_from_text(value, field)
    raise OMConfigError(_ERROR_CODE, field, f"unsupported type {type(value).__name__}; {_HINT}", value)


def _milliseconds_from_number(value: float, field: str) -> int:
    if not math.isfinite(value) or value < 0:
        raise OMConfigError(_ERROR_CODE, field, "milliseconds must be a finite number >= 0", value)
    return round_half_up(value)


def _milliseconds_from_text(value: str, field: str) -> int:
    match = _DURATION_RE.match(value)
    if match is None:
        raise OMConfigError(_ERROR_CODE, field, f"cannot parse duration; {_HINT}", value)
    amount, unit = match.group(1), match.group(2).lower()
    factor = _MS_PER_UNIT.get(unit)
    if factor is None:
        raise OMConfigError(
            _ERROR_CODE, field, f"unknown unit {unit!r}; use ms, s, m or h (or their long forms)", value
        )
    return round_half_up(float(amount) * factor)
