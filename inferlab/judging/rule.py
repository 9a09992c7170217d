"""The interval rule: every value a check uses with its 95 % interval (``interval_of``), the
statistics over such values with the interval each takes when every value may sit anywhere
in its own (``statistic``), and where an interval sits against the range a sentence
accepts (``judge``). The region is the sentence's bounds exactly; a bound the chapter
printed stands for what rounds to it (``claims.printed_rounding``), and nothing else widens
it. The rule is written once for people in claims.yaml's header.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from inferlab.judging.causes import NotMeasurable
from inferlab.judging.claims import Expect, Measure, printed_rounding
from inferlab.judging.series_view import is_number

# ---------------------------------------------------------------- intervals

# the 95 % interval columns the stages write beside a measured column
INTERVALS = {"median_ms": ("ci_low_ms", "ci_high_ms"), "ratio": ("ratio_ci_low", "ratio_ci_high"),
             "causal_over_full": ("causal_over_full_ci_low", "causal_over_full_ci_high"),
             "measured_ratio": ("measured_ratio_ci_low", "measured_ratio_ci_high"),
             "value": ("ci_low", "ci_high")}  # model.csv: a measured row's interval
# rates a stage computes as work / median_ms: their interval is the time's, inverted
PER_TIME = ("achieved_gbs", "frac_copy_ceiling", "achieved_gflops", "frac_matmul_ceiling")


def interval_of(rows: pd.DataFrame, column: str) -> tuple[pd.Series, pd.Series]:
    """(low, high) of the 95 % interval of ``rows[column]``, as claims.yaml's header says; a
    row whose interval cells are empty keeps [v, v] (the reason says it is missing)."""
    value = pd.to_numeric(rows[column], errors="coerce").astype(float)
    low, high = value.copy(), value.copy()
    if column in INTERVALS and all(c in rows for c in INTERVALS[column]):
        low = pd.to_numeric(rows[INTERVALS[column][0]], errors="coerce").astype(float)
        high = pd.to_numeric(rows[INTERVALS[column][1]], errors="coerce").astype(float)
    elif column in PER_TIME and all(c in rows for c in INTERVALS["median_ms"]):
        time = rows["median_ms"].astype(float)
        low = value * time / rows["ci_high_ms"].astype(float)
        high = value * time / rows["ci_low_ms"].astype(float)
    return low.fillna(value), high.fillna(value)


def divided(a, b) -> tuple:
    """(value, low, high) of a / b from (value, low, high) of each (positive quantities)."""
    return a[0] / b[0], a[1] / b[2], a[2] / b[1]


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Estimate:
    """One judged value with its 95 % interval [low, high] (None for a boolean or text);
    ``at`` is the abscissa of a stat ``at``."""

    value: Any
    low: Any = None
    high: Any = None
    at: Any = None


def is_numeric_column(series: pd.Series) -> bool:
    """A column of numbers (not booleans, not text): one that has an interval."""
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _slope_weights(x: pd.Series) -> pd.Series:
    lx = x.map(math.log)
    return (lx - lx.mean()) / ((lx - lx.mean()) ** 2).sum()


def loglog_slope(frame: pd.DataFrame, column: str, x: str) -> Estimate:
    """The least-squares slope of log ``column`` against log ``x``, with the range it takes
    when each point moves within its interval (the slope is linear in the log values:
    each point at the end of its interval that lowers, or raises, it)."""
    cols = [x, column] + [c for c in ("ci_low", "ci_high") if c in frame]
    data = frame[cols].dropna(subset=[x, column]).astype(float)
    data = data[(data[x] > 0) & (data[column] > 0)]
    if data[x].nunique() < 2:
        raise NotMeasurable("not_in_grid", column=x, needs_values=2,
                            grid=sorted({float(v) for v in data[x]}))
    w = _slope_weights(data[x])
    ly = data[column].map(math.log)
    slope = float((w * ly).sum())
    if "ci_low" not in data or (data["ci_low"] <= 0).any():
        return Estimate(slope, slope, slope)
    low_y, high_y = data["ci_low"].map(math.log), data["ci_high"].map(math.log)
    lowest = float((w * low_y.where(w > 0, high_y)).sum())
    highest = float((w * high_y.where(w > 0, low_y)).sum())
    return Estimate(slope, lowest, highest)


def _numbers(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    data = frame.dropna(subset=[column])
    if data.empty:
        raise NotMeasurable("not_applicable", column=column, rows=len(frame))
    return data


def _one_stat(frame: pd.DataFrame, column: str, m: Measure) -> list[Estimate]:
    """The statistic of ``frame[column]`` (intervals in ``ci_low``/``ci_high``): one
    Estimate, or one per row (range) or per value of ``at``."""
    if m.stat == "loglog_slope":
        return [loglog_slope(frame, column, m.x)]
    data = _numbers(frame, column)
    if not is_numeric_column(data[column]):
        values = data[column]
        return [Estimate(plain(v)) for v in values] if m.stat == "range" else \
            [Estimate(plain(getattr(values, m.stat)()))]
    v, lo, hi = (data[c].astype(float) for c in (column, "ci_low", "ci_high"))
    if m.stat == "at":
        return [Estimate(plain(g[column].median()), plain(g["ci_low"].median()),
                         plain(g["ci_high"].median()), at=plain(k))
                for k, g in data.groupby(m.at)]
    if m.stat == "range":
        return [Estimate(plain(a), plain(b), plain(c)) for a, b, c in zip(v, lo, hi,
                                                                          strict=True)]
    if m.stat == "spread":
        # the spread max/min - 1 when each value may sit anywhere in its interval
        return [Estimate(float(v.max() / v.min() - 1.0), max(0.0, lo.max() / hi.min() - 1.0),
                         float(hi.max() / lo.min() - 1.0))]
    return [Estimate(*(plain(getattr(s, m.stat)()) for s in (v, lo, hi)))]


def statistic(frame: pd.DataFrame, column: str, m: Measure) -> list[Estimate]:
    """``m.stat`` of ``frame[column]``, per ``m.by`` group if given, with intervals."""
    if frame.empty:
        raise NotMeasurable("not_applicable", column=column, rows=0)
    if "ci_low" not in frame:
        frame = frame.assign(ci_low=frame[column], ci_high=frame[column])
    if not m.by:
        return _one_stat(frame, column, m)
    return [e for _, group in frame.groupby(list(m.by), dropna=False)
            for e in _one_stat(group, column, m)]


def value_of(estimates: list[Estimate], m: Measure) -> Any:
    """The value claims.json records for the judged estimates: [[at, v], ...] for stat
    at, a list for a range or groups (then [min, max]), else the one number."""
    if m.stat == "at":
        return [[e.at, e.value] for e in estimates]
    if m.stat == "range" or m.by or len(estimates) > 1:
        return reported_value([e.value for e in estimates])
    return estimates[0].value


def interval(estimates: list[Estimate]) -> list | None:
    """[lowest low, highest high] over the judged estimates; None without numbers."""
    lows = [e.low for e in estimates if is_number(e.low)]
    highs = [e.high for e in estimates if is_number(e.high)]
    return [min(lows), max(highs)] if lows and highs else None


def plain(value: Any) -> Any:
    """A JSON-ready Python scalar (numpy types unwrapped, NaN and NA -> None)."""
    if value is pd.NA or value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else value
    return value


# ---------------------------------------------------------------- judging

INSIDE, OUTSIDE, STRADDLES = "reproduced", "not reproduced", "within noise here"
ANSWERED = "answered here"  # an open question (kind question): never "reproduced"
WORST = (OUTSIDE, STRADDLES, INSIDE, ANSWERED)  # several values: the worst of theirs


def region(e: Expect, target: float | None = None) -> tuple[float, float, bool, bool]:
    """(low, high, low_open, high_open): the values the sentence accepts. A printed bound
    reaches as far as the numbers that round to it, a logical one is exact."""
    def widen(x, printed, sign):  # rounded back to the printed figure's own digits
        return round(x + sign * printed_rounding(x), 12) if printed else x
    if e.kind == "between":
        (lo, hi), (p_lo, p_hi) = e.bounds, e.printed
        return widen(lo, p_lo, -1), widen(hi, p_hi, +1), False, False
    if e.kind == "max":
        return -math.inf, widen(e.target, e.printed[1], +1), False, False
    if e.kind == "min":
        return widen(e.target, e.printed[0], -1), math.inf, False, False
    if e.kind in ("approx", "approx_at"):  # the printed figure: its rounding is the width
        x = e.target if target is None else target
        d = printed_rounding(x)
        return round(x - d, 12), round(x + d, 12), False, False
    if e.kind == "equals":
        return e.target, e.target, False, False
    if e.kind == "finite":  # any finite number; a NaN or an infinity fails in judge_one
        return -math.inf, math.inf, True, True
    if e.target == ">0":  # 'any': above zero, however little
        return 0.0, math.inf, True, False
    return (1.0, math.inf, True, False) if e.target == ">1" else (-math.inf, 1.0, False, True)


def position(bounds: tuple[float, float, bool, bool], low: float, high: float) -> str:
    """Where the interval [low, high] sits against the accepted region: wholly inside
    (reproduced), wholly outside (not reproduced), or across an edge (within noise)."""
    b_lo, b_hi, lo_open, hi_open = bounds
    above = low > b_lo if lo_open else low >= b_lo
    below = high < b_hi if hi_open else high <= b_hi
    if above and below:
        return INSIDE
    under = high <= b_lo if lo_open else high < b_lo
    over = low >= b_hi if hi_open else low > b_hi
    return OUTSIDE if under or over else STRADDLES


def _equals(target: Any, v: Any) -> bool:
    if isinstance(target, bool | str) or isinstance(v, bool | str):
        return type(v) is type(target) and v == target
    return is_number(v) and v == target


def judge_one(e: Expect, est: Estimate, target: float | None = None) -> str:
    """The verdict of one estimate: a NaN, an infinity or a text meets no number."""
    if e.kind == "equals" and not (is_number(est.value) and is_number(e.target)):
        return INSIDE if _equals(e.target, est.value) else OUTSIDE
    if not all(is_number(x) for x in (est.value, est.low, est.high)):
        return OUTSIDE
    low, high = min(est.low, est.value), max(est.high, est.value)
    return position(region(e, target), low, high)


def _as_estimate(v: Any) -> Estimate:
    return v if isinstance(v, Estimate) else Estimate(v, v, v)


def worst(verdicts: list[str]) -> str:
    return next(v for v in WORST if v in verdicts)


def judge(e: Expect, value: Any) -> str:
    """The verdict of ``value`` (an Estimate, a number or a list of them) against ``e``. An
    empty list is not measurable: nothing vacuous is ever "reproduced"."""
    items = [_as_estimate(v) for v in (value if isinstance(value, list) else [value])]
    if e.kind == "approx_at":
        return _judge_at(e, items)
    if not items:
        raise NotMeasurable("not_applicable", rows=0)
    return worst([judge_one(e, est) for est in items])


def absent_points(e: Expect, items: list[Estimate]) -> list:
    """The abscissae of ``approx_at`` that have no estimate here."""
    here = {str(est.at) for est in items}
    return [k for k, _ in e.points if str(k) not in here]


def _judge_at(e: Expect, items: list[Estimate]) -> str:
    here = {str(est.at): est for est in items}
    present = [(k, x) for k, x in e.points if str(k) in here]
    if not present:
        raise NotMeasurable("not_in_grid", values=[k for k, _ in e.points],
                            grid=[est.at for est in items])
    return worst([judge_one(e, here[str(k)], x) for k, x in present])


def reported_value(value: Any) -> Any:
    """What claims.json records: a judged list of numbers becomes [min, max] (one number
    when they are equal); others (the pairs of ``at``, booleans) as they are."""
    if isinstance(value, list):
        nums = [v for v in value if is_number(v)]
        if nums and len(nums) == len(value):
            return [min(nums), max(nums)] if min(nums) != max(nums) else nums[0]
    return value
