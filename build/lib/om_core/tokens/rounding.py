"""Rounding for token totals.

Thresholds are compared against whole-token totals, and the reference rounds with JavaScript's
`Math.round`. Python's `round` rounds ties to even (`round(14.5) == 14`), which would shift thresholds
by one token on exact halves, so every total goes through this helper instead.
"""

from __future__ import annotations

import math


def round_half_up(x: float) -> int:
    """Round to the nearest integer, ties away from zero (14.5 -> 15, -14.5 -> -15)."""
    magnitude = abs(x)
    whole = math.floor(magnitude)
    # `magnitude - whole` is exact for floats, so no 0.49999999999999994 + 0.5 == 1.0 surprise.
    rounded = whole + 1 if magnitude - whole >= 0.5 else whole
    return int(rounded) if x >= 0 else -int(rounded)
