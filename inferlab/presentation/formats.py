"""Numbers and text for people: a value with its unit and interval, table cells, and the
chapter's LaTeX as plain Unicode, built on ``judging.numtext`` so a number reads the same
everywhere."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from inferlab.judging.numtext import format_value

NOT_MEASURED = "not measured here"


def md_cell(text) -> str:
    """A Markdown table cell: its bars escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def with_unit(value: Any, unit: str | None) -> str:
    """'2.48–43.4×', '704–1,070 µs', '—' when there is no value."""
    if value is None:
        return "—"
    text = format_value(value)
    if not unit:
        return text
    return f"{text}{unit}" if unit == "×" else f"{text} {unit}"


def value_text(result: dict) -> str:
    """A claims.json value for people, with its unit and, where it has one, its 95 %
    interval: '1.89–2.57× (95 %: 1.85–2.61)'; '—' when there is none."""
    value, ci = result["value"], result.get("interval")
    text = with_unit(value, result["unit"])
    items = value if isinstance(value, list) else [value]
    nums = [v[-1] if isinstance(v, list) else v for v in items]
    nums = [v for v in nums if isinstance(v, int | float) and not isinstance(v, bool)]
    if not ci or not nums or ci == [min(nums), max(nums)]:
        return text  # no interval, or no noise: the value says it all
    return f"{text} (95 %: {with_unit(ci, result['unit'])})"


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
