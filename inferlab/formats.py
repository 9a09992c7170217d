"""Numbers and text for people: three significant figures, ranges, units, table cells,
and the chapter's LaTeX as plain Unicode.

Every value a reader sees (the report, the audit, the reasons in claims.json) is
formatted here, so a number reads the same everywhere.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from inferlab.claims import Check


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


def with_unit(value: Any, unit: str | None) -> str:
    """'2.48–43.4×', '704–1,070 µs', '—' when there is no value."""
    if value is None:
        return "—"
    text = format_value(value)
    if not unit:
        return text
    return f"{text}{unit}" if unit == "×" else f"{text} {unit}"


_SUPERSCRIPT = dict(zip("0123456789-+()n", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺⁽⁾ⁿ", strict=True))
_SYMBOLS = {"times": "×", "cdot": "·", "approx": "≈", "le": "≤", "ge": "≥", "sim": "∼",
            "ldots": "…", "infty": "∞", "to": "→"}


def _superscript(text: str) -> str:
    if all(ch in _SUPERSCRIPT for ch in text):
        return "".join(_SUPERSCRIPT[ch] for ch in text)
    return "^" + (text if text.startswith("(") and text.endswith(")") else f"({text})")


def plain_text(text: str) -> str:
    r"""A sentence's LaTeX as plain Unicode: ``\(O(S^2)\)`` -> O(S²), ``\(4.7 \times
    10^{-5}\)`` -> 4.7 × 10⁻⁵, ``\(1\times S\)`` -> 1×S, ``->`` -> →."""
    text = text.replace(r"\(", "").replace(r"\)", "").replace(r"\,", " ").replace(" -> ", " → ")
    text = re.sub(r"(\s?)\\([a-zA-Z]+)\s*",
                  lambda m: m.group(1) + _SYMBOLS.get(m.group(2), m.group(2)) + m.group(1), text)
    text = re.sub(r"\^\{([^{}]*)\}", lambda m: _superscript(m.group(1)), text)
    return re.sub(r"\^(\w)", lambda m: _superscript(m.group(1)), text)


# How a raw-table cell reads, by kind (units are in the column's header).
_FORMATS = {"int": lambda v: f"{int(v):,}", "mask": lambda v: "causal" if v else "full",
            "yes": lambda v: "yes" if v else "no", "num": lambda v: format_value(float(v)),
            "mib": lambda v: format_value(float(v) / 2**20),
            "pct": lambda v: f"{format_value(float(v) * 100)} %"}


def table_cell(value, kind: str, nonfinite: bool = False) -> str:
    """One cell for people: 3 significant figures, "—" where the column does not apply,
    nan/inf where a number was computed and is not finite."""
    if nonfinite:
        return str(value)
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "—"
    return _FORMATS.get(kind, str)(value)
