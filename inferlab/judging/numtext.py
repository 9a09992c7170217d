"""A number as text, where the text is evidence: three significant figures, a judged
list as its range, and the unit a check's value is printed in.

The unit stored in claims.json is this module's (``display_unit``, an enum-like symbol),
so it is computing code of the claims stage, below the report; ``formats`` and
``claim_text`` build the text people read on ``format_value``, so a number reads the same
everywhere.
"""

from __future__ import annotations

import math
from typing import Any

from inferlab.judging.claims import Check


def format_value(value: Any) -> str:
    """A value for people: 3 significant figures; a judged list as its range."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value)
    if isinstance(value, list):
        nums = [v for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(nums) == len(value) and nums:
            lo, hi = min(nums), max(nums)
            return format_value(lo) if lo == hi else f"{format_value(lo)}–{format_value(hi)}"
        return ", ".join(map(format_value, value))
    if isinstance(value, float):
        return _three_figures(value)
    return "—" if value is None else str(value)


def _three_figures(x: float) -> str:
    """3 significant figures without an exponent between 0.001 and 10^6 (2080, not 2.08e+03)."""
    if not 1e-3 <= abs(x) < 1e6:  # 0, NaN and the infinities too
        return f"{x:.3g}"
    if x.is_integer():
        return str(int(x))
    return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}"


_SUFFIX_UNITS = (("_ms", "ms"), ("_gbs", "GB/s"), ("_gflops", "GFLOP/s"), ("_bytes", "B"))
_DISPLAY_UNITS = {"MiB": "MiB", "us": "µs", "s": "s"}


def display_unit(check: Check) -> str:
    """The unit a check's value is printed in: × for ratios, the converted unit, or the
    column's own (ms, GB/s, ...); empty for a pure number (a fraction, slope, error)."""
    m = check.measure
    if m.per:
        return {"score_matrix": "score matrices", "output": "outputs"}[m.per]
    if m.unit:
        return _DISPLAY_UNITS[m.unit]
    if m.stat in ("loglog_slope", "spread"):
        return ""
    if m.is_ratio or m.over or m.column == "ratio" or m.column.endswith(("_ratio", "_over_full")):
        return "×"
    return next((unit for suffix, unit in _SUFFIX_UNITS if m.column.endswith(suffix)), "")
