"""The check interpreter: a typed claim (``inferlab.claims``) judged on one results key.

A claim's verdict is per machine (DESIGN.md, "Claims"):

- ``reproduced``: the 95 % interval of every judged value lies inside the range the
  sentence accepts (on the claimed side of a bound);
- ``not reproduced``: the interval of some value lies wholly outside it (the value here
  is given), or a value it rests on is NaN or infinite (the rows are named: a kernel that
  overflowed does not pass);
- ``within noise here``: no interval is wholly outside, but one straddles an edge: this
  machine's run-to-run noise cannot decide;
- ``answered here``: an open question of the chapter (kind ``question``), answered with
  its evidence (yes, no or undecided), never "reproduced";
- ``not measurable here``: the stage did not run, the artifact is missing or unreadable,
  the machine lacks what the check needs (a CUDA device, fp16 rows, the sentence's
  lengths), or there is nothing to compare (one run only);
- ``not comparable on this device``: a device-specific absolute figure (µs, GB/s on the
  chapter's GPU) on another device class; the value here is shown beside it;
- ``not checkable``: a figure reported by others; nothing here can test it.

The accepted range is the sentence's bounds exactly; a bound the chapter printed stands
for every number that rounds to it (0.58: 0.575-0.585, ``claims.printed_rounding``) and
nothing else widens it. Intervals (``interval_of``) are the stages' own 95 % intervals
(times, paired ratios), carried through every derivation (1/x: [1/hi, 1/lo]; a rate over
the time: the time's inverted); a value without sampling noise has [v, v]; a statistic of
several values takes each at either end of its interval (max: [max low, max high]).

Which rows are judged is ``inferlab.selection``'s job; this module measures them
(``statistic``), judges the value (``judge``) and writes the claims.json entry. Text for
people (the value with its unit, figure links) is the report's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from inferlab import artifacts, layout
from inferlab.artifacts import Table
from inferlab.claims import (
    ELEMENT_BYTES,
    TENSORS,
    UNITS,
    Check,
    Claim,
    Expect,
    Measure,
    printed_rounding,
)
from inferlab.evidence import Evidence, device_of
from inferlab.formats import display_unit, format_value
from inferlab.selection import (
    NONFINITE,
    SUMMARY_COLUMNS,
    NotMeasurable,
    Selection,
    apply_where,
    describe,
    keep_best,
    row_names,
    select,
    with_nonfinite,
)

MAX_ROWS = 20  # rows kept per claim in claims.json: enough to see why, small enough to read
SCHEMA_VERSION = 2  # of claims.json (schemas/claims_result.schema.json)


# ---------------------------------------------------------------- intervals

# the 95 % interval columns the stages write beside a measured column
INTERVALS = {"median_ms": ("ci_low_ms", "ci_high_ms"), "ratio": ("ratio_ci_low", "ratio_ci_high"),
             "causal_over_full": ("causal_over_full_ci_low", "causal_over_full_ci_high"),
             "measured_ratio": ("measured_ratio_ci_low", "measured_ratio_ci_high"),
             "value": ("ci_low", "ci_high")}  # model.csv: a measured row's interval
# rates a stage computes as work / median_ms: their interval is the time's, inverted
PER_TIME = ("achieved_gbs", "frac_copy_ceiling", "achieved_gflops", "frac_matmul_ceiling")


def interval_of(rows: pd.DataFrame, column: str) -> tuple[pd.Series, pd.Series]:
    """(low, high) of the 95 % interval of ``rows[column]``. A timed column has the
    stage's own interval; a rate over the time has the time's interval inverted; a value
    without sampling noise (a count, bytes, an error against float64, a model number, a
    difference between two runs, which is the noise itself) has [v, v]. A row whose
    interval cells are empty keeps [v, v] too (the reason says the interval is missing)."""
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


def _numeric(series: pd.Series) -> bool:
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
        raise NotMeasurable(f"a log-log slope needs at least two values of {x}")
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
        raise NotMeasurable(f"every selected row has an empty {column}")
    return data


def _one_stat(frame: pd.DataFrame, column: str, m: Measure) -> list[Estimate]:
    """The statistic of ``frame[column]`` (intervals in ``ci_low``/``ci_high``): one
    Estimate, or one per row (range) or per value of ``at``."""
    if m.stat == "loglog_slope":
        return [loglog_slope(frame, column, m.x)]
    data = _numbers(frame, column)
    if not _numeric(data[column]):
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
        raise NotMeasurable("no rows match the filter")
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
    lows = [e.low for e in estimates if _number(e.low)]
    highs = [e.high for e in estimates if _number(e.high)]
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


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


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
    if e.kind in ("approx", "approx_at"):
        x = e.target if target is None else target
        d = e.rel * abs(x) if e.rel is not None else e.abs
        return x - d, x + d, False, False
    if e.kind == "equals":
        return e.target, e.target, False, False
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
    return _number(v) and v == target


def judge_one(e: Expect, est: Estimate, target: float | None = None) -> str:
    """The verdict of one estimate: a NaN, an infinity or a text meets no number."""
    if e.kind == "equals" and not (_number(est.value) and _number(e.target)):
        return INSIDE if _equals(e.target, est.value) else OUTSIDE
    if not all(_number(x) for x in (est.value, est.low, est.high)):
        return OUTSIDE
    low, high = min(est.low, est.value), max(est.high, est.value)
    return position(region(e, target), low, high)


def _as_estimate(v: Any) -> Estimate:
    return v if isinstance(v, Estimate) else Estimate(v, v, v)


def worst(verdicts: list[str]) -> str:
    return next(v for v in WORST if v in verdicts)


def judge(e: Expect, value: Any) -> tuple[str, str]:
    """The verdict of ``value`` (an Estimate, a number or a list of them) against ``e``,
    and what was checked (for the reason). An empty list is not measurable: nothing
    vacuous is ever "reproduced"."""
    items = [_as_estimate(v) for v in (value if isinstance(value, list) else [value])]
    if e.kind == "approx_at":
        return _judge_at(e, items)
    if not items:
        raise NotMeasurable("no value to judge")
    verdict = worst([judge_one(e, est) for est in items])
    return verdict, f"{'every value' if len(items) > 1 else 'the value'} {describe_expect(e)}"


def _judge_at(e: Expect, items: list[Estimate]) -> tuple[str, str]:
    here = {str(est.at): est for est in items}
    present = [(k, x) for k, x in e.points if str(k) in here]
    absent = [describe(k) for k, _ in e.points if str(k) not in here]
    if not present:
        raise NotMeasurable(f"no rows at [{', '.join(describe(k) for k, _ in e.points)}]")
    verdict = worst([judge_one(e, here[str(k)], x) for k, x in present])
    text = (f"within {e.rel:.0%} of {[x for _, x in present]} at "
            f"[{', '.join(describe(k) for k, _ in present)}]")
    if absent:
        text += f"; {', '.join(absent)} not measured here"
    return verdict, text


def describe_expect(e: Expect) -> str:
    """The expectation in words, e.g. 'between 7.8 and 13.5 (printed: 7.75-13.55)'."""
    lo, hi, _, _ = region(e)
    if e.kind == "between":
        widened = f" (as printed: {lo:g} to {hi:g})" if any(e.printed) else ""
        return f"between {e.bounds[0]:g} and {e.bounds[1]:g}{widened}"
    if e.kind == "max":
        return f"at most {e.target:g}" + (f" (as printed: {hi:g})" if e.printed[1] else "")
    if e.kind == "min":
        return f"at least {e.target:g}" + (f" (as printed: {lo:g})" if e.printed[0] else "")
    if e.kind == "approx":
        spread = f"{e.rel:.0%}" if e.rel is not None else f"{e.abs:g}"
        return f"within {spread} of {e.target:g}"
    if e.kind == "equals":
        return f"equal to {e.target!r}"
    return f"{e.target}"


def reported_value(value: Any) -> Any:
    """What claims.json records: a judged list of numbers becomes [min, max] (one number
    when they are equal); others (the pairs of ``at``, booleans) as they are."""
    if isinstance(value, list):
        nums = [v for v in value if _number(v)]
        if nums and len(nums) == len(value):
            return [min(nums), max(nums)] if min(nums) != max(nums) else nums[0]
    return value


# ---------------------------------------------------------------- measuring


class NonFinite(Exception):
    """A value the check rests on is NaN or infinite; the message names the rows."""


def _judged(frame: pd.DataFrame, name: str, notes: list[str]) -> pd.DataFrame:
    """Rows whose judged value (column "value", from ``name``) is computed non-finite fail
    the check; rows where it does not apply (an empty cell) are counted and left out."""
    bad = frame[frame[NONFINITE]]
    if not bad.empty:
        raise NonFinite(f"{name} is NaN or infinite in {len(bad)} row(s): {row_names(bad)}")
    empty = frame["value"].isna()
    if empty.any():
        notes.append(f"{int(empty.sum())} row(s) have no {name} (not applicable)")
    return frame[~empty]


def tensor_bytes(rows: pd.DataFrame, per: str) -> pd.Series:
    """Bytes of one tensor ``per`` (claims.TENSORS) of each row's shape and dtype."""
    count = pd.Series(1.0, index=rows.index)
    for column in TENSORS[per]:
        count = count * rows[column].astype(float)
    size = rows["dtype"].map(ELEMENT_BYTES)
    if size.isna().any():
        raise NotMeasurable(f"per={per!r} needs a dtype of {sorted(ELEMENT_BYTES)}; rows have "
                            f"{sorted(set(rows['dtype'][size.isna()].astype(str)))}")
    return count * size.astype(float)


def _measure(check: Check, sel: Selection, nonfinite: pd.DataFrame
             ) -> tuple[list[Estimate], pd.DataFrame]:
    """(estimates, deciding rows with value, ci_low, ci_high) of one selection, each in
    the claim's quantity (naive ÷ fused for an inverted ratio, ...)."""
    m = check.measure
    if m.is_ratio:
        return _measure_ratio(check, sel, nonfinite)
    rows = with_nonfinite(sel.frame, nonfinite, [m.column, m.over])
    if not _numeric(rows[m.column]):
        # a boolean or a text stays as it is: it has no interval
        rows = rows.assign(value=rows[m.column], ci_low=None, ci_high=None)
        rows = _judged(rows, m.column, sel.notes)
        return statistic(rows, "value", m), rows
    low, high = interval_of(rows, m.column)
    v = (rows[m.column].astype(float), low, high)
    if m.over:
        v = divided(v, (rows[m.over].astype(float), *interval_of(rows, m.over)))
    if m.invert:
        v = (1 / v[0], 1 / v[2], 1 / v[1])
    scale = UNITS[m.unit][1] if m.unit else 1.0
    if m.per:
        scale = 1 / tensor_bytes(rows, m.per)
    rows = rows.assign(value=v[0] * scale, ci_low=v[1] * scale, ci_high=v[2] * scale)
    rows = _judged(rows, m.column, sel.notes)
    return statistic(rows, "value", m), rows


def _measure_ratio(check: Check, sel: Selection, nonfinite
                   ) -> tuple[list[Estimate], pd.DataFrame]:
    """Numerator rows ÷ denominator rows joined on ``join``; the rows kept are the
    numerator's, with the quotient and its interval and the denominator's column."""
    m, sides = check.measure, []
    for side, spec in (("numerator", m.numerator), ("denominator", m.denominator)):
        rows = keep_best(apply_where(sel.frame, spec.where), spec)
        if rows.empty:
            raise NotMeasurable(f"no {side} rows among the selected rows")
        low, high = interval_of(rows, m.column)
        sides.append(with_nonfinite(rows, nonfinite, [m.column]).assign(ci_low=low,
                                                                        ci_high=high))
    merged = sides[0].merge(sides[1], on=list(m.join), suffixes=("", "_den"))
    if merged.empty:
        raise NotMeasurable(f"numerator and denominator rows share no values of {list(m.join)}")
    merged[NONFINITE] = merged[NONFINITE] | merged[f"{NONFINITE}_den"]
    value, low, high = divided(
        tuple(merged[c].astype(float) for c in (m.column, "ci_low", "ci_high")),
        tuple(merged[c + "_den"].astype(float) for c in (m.column, "ci_low", "ci_high")))
    merged = merged.assign(value=value, ci_low=low, ci_high=high).rename(
        columns={f"{m.column}_den": f"denominator_{m.column}"})
    merged = merged.drop(columns=[c for c in merged.columns if c.endswith("_den")])
    merged = _judged(merged, f"{m.column} ratio", sel.notes)
    return statistic(merged, "value", m), merged


# ---------------------------------------------------------------- evaluation


def _rows_summary(rows: pd.DataFrame) -> str:
    parts = []
    for column in SUMMARY_COLUMNS:
        if column in rows.columns:
            values = sorted({describe(plain(v)) for v in rows[column].dropna()}, key=_order)
            if values:
                parts.append(f"{column}={','.join(values)}")
    return "; ".join(parts)


def _order(text: str):
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def _records(rows: pd.DataFrame) -> list[dict]:
    """The deciding rows for claims.json. JSON has no infinity: a computed one is written as
    the CSV writes it ("inf", "-inf"); NaN, which a frame also uses for an empty cell, is
    null here, and the claim's reason names the rows where it was computed."""
    records = rows.drop(columns=[NONFINITE], errors="ignore").head(MAX_ROWS)
    return [{str(k): ("inf" if v > 0 else "-inf") if isinstance(v, float) and math.isinf(v)
             else plain(v) for k, v in r.items()} for r in records.to_dict(orient="records")]


def _frame(check: Check, found: Evidence, root: Path, key: str) -> tuple[Table, dict | None]:
    """The rows a check reads, and for a between-run check the version compared with."""
    if check.stage == "probe" and check.table != "availability":
        if not found.data.get(check.table):
            raise NotMeasurable(f"{found.path.name} has no {check.table}: not probed")
        row_schema = artifacts.schema("probe")["properties"][check.table]["items"]
        kinds = {c: artifacts.column_type("probe", c, row_schema) for c in row_schema["required"]}
        return artifacts.frame_of(found.data[check.table], kinds), None
    if not check.between_runs:
        return found.table, None
    from inferlab import compare  # the register's history: only between-run checks need it
    from inferlab.register import Register

    register = Register(root, key)
    previous = compare.comparable(register, check.stage, found.entry)
    if previous is None:
        raise NotMeasurable(f"needs two runs of {check.stage} made with the same code, "
                            f"config and hardware; {key} has no earlier one")
    diffs = compare.differences(check.stage, compare.table_of(register, check.stage,
                                                              previous), found.table)
    return Table(diffs, pd.DataFrame(index=diffs.index)), {
        "stage": check.stage, "path": previous["path"], "version": previous["version"],
        "sha256": previous["sha256"]}


def _judge_selections(check: Check, table: Table, device: str, stand_in: dict) -> dict:
    """verdict, estimates, rows and the words of the reason, over every dtype judged."""
    estimates, kept, verdicts, parts = [], [], [], []
    for sel in select(check, table.frame, device, stand_in):
        try:
            found, rows = _measure(check, sel, table.nonfinite)
        except NonFinite as bad:
            return {"verdict": OUTSIDE, "estimates": [], "rows": sel.frame,
                    "text": f"{bad}; a computation that overflowed does not pass",
                    "judged_on": _rows_summary(sel.frame)}
        if check.measure.valid_max is not None and any(
                _number(e.value) and e.value > check.measure.valid_max for e in found):
            raise NotMeasurable(f"value {format_value([e.value for e in found])} is above "
                                f"{check.measure.valid_max:g}, which is not physical: the "
                                "ceiling it is a fraction of is too low (a probe error)")
        verdict, checked = judge(check.expect, found) if check.expect is not None else \
            (ANSWERED, "no test: the value is the answer")
        label = f"{sel.dtype}: " if check.dtype == "each" else ""
        ci = interval(found)
        ci_text = f" (95 % interval {format_value(ci)})" if ci and ci[0] != ci[1] else ""
        parts.append(f"{label}value {format_value(value_of(found, check.measure))}{ci_text} "
                     f"over {len(rows)} row(s) ({_rows_summary(rows)})"
                     f"{'; ' if sel.notes else ''}{'; '.join(sel.notes)}; needs {checked}")
        estimates += found
        kept.append(rows)
        verdicts.append(verdict)
    rows = pd.concat(kept)
    return {"verdict": worst(verdicts), "estimates": estimates, "rows": rows,
            "text": " | ".join(parts), "judged_on": _rows_summary(rows)}


def _answer(verdict: str) -> str:
    """A question's answer in words, from where the interval sits against its test."""
    return {INSIDE: "yes", OUTSIDE: "no", STRADDLES: "undecided (within noise)",
            ANSWERED: "the value here"}[verdict]


def evaluate(claim: Claim, evidence: dict[str, Evidence], key: str, root: Path,
             stand_in: dict | None = None) -> dict:
    """One claim's verdict on ``key``: the claims.json entry for it (values, intervals,
    units and verdicts; the report makes the text people read). ``evidence`` maps a
    stage to its artifact on that key; ``stand_in`` the dtype for fp16 per device."""
    result = {"id": claim.id, "kind": claim.kind, "verdict": "not checkable", "value": None,
              "interval": None, "unit": None, "chapter_value": claim.chapter_value,
              "judged_on": "", "reason": "", "note": claim.note, "rows": [],
              "artifact": None, "compared_with": None}
    if claim.check is None:
        result["reason"] = f"reported by {claim.source}; this pipeline's data cannot test it"
        return result
    check = claim.check
    found = evidence[check.stage]
    result.update(artifact=found.describe(root))
    try:
        if found.error is not None:
            raise NotMeasurable(f"{result['artifact']['path']} cannot be read: {found.error}")
        if found.data is None:
            raise NotMeasurable(f"stage {check.stage} has not run on {key}: "
                                f"{result['artifact']['path']} is missing")
        device = device_of(found, key)
        elsewhere = check.device is not None and device != check.device
        if elsewhere and claim.kind != "device-specific":
            raise NotMeasurable(f"needs a {check.device.upper()} device; {key} ran on {device}")
        table, result["compared_with"] = _frame(check, found, root, key)
        judged = _judge_selections(check, table, device, stand_in or {"cpu": "float32",
                                                                         "cuda": "float16"})
        verdict, where = judged["verdict"], f"judged on {key}"
        if claim.kind == "question":
            where = f"answered here: {_answer(verdict)}; {where}"
            verdict = ANSWERED
        if elsewhere:
            verdict = "not comparable on this device"
            where = (f"the sentence is about a {check.device.upper()} device and {key} ran "
                     f"on {device}: the value here is shown beside it, not judged")
        result.update(verdict=verdict, value=value_of(judged["estimates"], check.measure)
                      if judged["estimates"] else None,
                      interval=interval(judged["estimates"]), unit=display_unit(check),
                      rows=_records(judged["rows"]), judged_on=judged["judged_on"],
                      reason=f"{judged['text']}; {where}")
    except NotMeasurable as why:
        result.update(verdict="not measurable here", reason=str(why))  # value stays None
    result["reason"] = found.hash_warning() + result["reason"]
    return result


def evaluate_all(claims, evidence: dict[str, Evidence], key: str, root: Path,
                 stand_in: dict | None = None) -> dict:
    """Every claim's verdict on ``key``: the content of results/{key}/claims.json."""
    machine, grid = layout.split_key(key)
    return {"schema_version": SCHEMA_VERSION, "machine": machine, "grid": grid,
            "claims": [evaluate(c, evidence, key, root, stand_in) for c in claims]}
