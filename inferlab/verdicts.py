"""The check interpreter: a typed claim (``inferlab.claims``) judged on one results key.

A claim's verdict is per machine (DESIGN.md, "Claims"):

- ``reproduced``: the value here meets the sentence;
- ``not reproduced``: it does not (the value here is given), or a value it rests on is
  NaN or infinite (the rows are named: a kernel that overflowed does not pass);
- ``not measurable here``: the stage did not run, the artifact is missing or unreadable,
  the machine lacks what the check needs (a CUDA device, fp16 rows, the sentence's
  lengths), or there is nothing to compare (one run only);
- ``not comparable on this device``: a device-specific absolute figure (µs, GB/s on the
  chapter's GPU) on another device class; the value here is shown beside it;
- ``not checkable``: a figure reported by others; nothing here can test it.

Which rows are judged is ``inferlab.selection``'s job; this module measures them
(``statistic``), judges the value (``judge``) and writes the claims.json entry.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from inferlab import layout
from inferlab.artifacts import Table
from inferlab.claims import UNITS, Check, Claim, Expect, Measure
from inferlab.evidence import Evidence, device_of
from inferlab.formats import display_unit, format_value, with_unit
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
FIGURES = {"probe": "backends", "correctness": "exactness", "prefill": "prefill-speedup",
           "decode": "decode", "traffic": "traffic", "model": "traffic"}


# ---------------------------------------------------------------- statistics


def loglog_slope(frame: pd.DataFrame, column: str, x: str) -> float:
    data = frame[[x, column]].dropna().astype(float)
    data = data[(data[x] > 0) & (data[column] > 0)]
    if data[x].nunique() < 2:
        raise NotMeasurable(f"a log-log slope needs at least two values of {x}")
    lx, ly = data[x].map(math.log), data[column].map(math.log)
    mx, my = lx.mean(), ly.mean()
    return float(((lx - mx) * (ly - my)).sum() / ((lx - mx) ** 2).sum())


def _one_stat(frame: pd.DataFrame, column: str, m: Measure) -> Any:
    """The statistic of ``frame[column]``: a number, or a list of judged values."""
    if m.stat == "loglog_slope":
        return loglog_slope(frame, column, m.x)
    values = frame[column].dropna()
    values = values.astype(bool) if str(values.dtype) == "boolean" else values.astype(float)
    if values.empty:
        raise NotMeasurable(f"every selected row has an empty {column}")
    if m.stat == "at":
        return [[plain(k), float(v)] for k, v in
                frame.dropna(subset=[column]).groupby(m.at)[column].median().items()]
    if m.stat == "range":
        return [plain(v) for v in values]
    if m.stat == "spread":
        return float(values.max() / values.min() - 1.0)
    return plain(getattr(values, m.stat)())


def statistic(frame: pd.DataFrame, column: str, m: Measure) -> Any:
    """``m.stat`` of ``frame[column]``, per ``m.by`` group if given (then a list)."""
    if frame.empty:
        raise NotMeasurable("no rows match the filter")
    if not m.by:
        return _one_stat(frame, column, m)
    results = [_one_stat(group, column, m) for _, group in frame.groupby(list(m.by),
                                                                          dropna=False)]
    return [v for r in results for v in (r if isinstance(r, list) else [r])]


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


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _holds(e: Expect, v: Any) -> bool:
    if e.kind == "equals":
        if isinstance(e.target, bool | str) or isinstance(v, bool | str):
            return type(v) is type(e.target) and v == e.target
        return _number(v) and v == e.target
    if not _number(v):
        return False
    if e.kind == "between":
        lo, hi = e.bounds
        return lo * (1 - e.tolerance) <= v <= hi * (1 + e.tolerance)
    if e.kind == "max":
        return v <= e.target * (1 + e.tolerance)
    if e.kind == "min":
        return v >= e.target * (1 - e.tolerance)
    if e.kind == "approx":
        return abs(v - e.target) <= (e.rel * abs(e.target) if e.rel is not None else e.abs)
    return v > 1 if e.target == ">1" else v < 1


def judge(e: Expect, value: Any) -> tuple[bool, str]:
    """Whether ``value`` meets ``e``, and what was checked (for the reason). An empty
    list of values is not measurable: nothing vacuous is ever "reproduced"."""
    if e.kind == "approx_at":
        return _judge_at(e, value)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise NotMeasurable("no value to judge")
    ok = all(_holds(e, v) for v in items)
    return ok, f"{'every value' if len(items) > 1 else 'the value'} {describe_expect(e)}"


def _judge_at(e: Expect, value: list) -> tuple[bool, str]:
    here = {str(k): v for k, v in value}
    present = [(k, x) for k, x in e.points if str(k) in here]
    absent = [describe(k) for k, _ in e.points if str(k) not in here]
    if not present:
        raise NotMeasurable(f"no rows at [{', '.join(describe(k) for k, _ in e.points)}]")
    ok = all(_number(here[str(k)]) and abs(here[str(k)] - x) <= e.rel * abs(x)
             for k, x in present)
    text = (f"within {e.rel:.0%} of {[x for _, x in present]} at "
            f"[{', '.join(describe(k) for k, _ in present)}]")
    if absent:
        text += f"; {', '.join(absent)} not measured here"
    return ok, text


def describe_expect(e: Expect) -> str:
    """The expectation in words, e.g. 'between 7.8 and 13.5 (±10%)'."""
    tol = f" (±{e.tolerance:.0%})" if e.tolerance else ""
    if e.kind == "between":
        return f"between {e.bounds[0]:g} and {e.bounds[1]:g}{tol}"
    if e.kind == "max":
        return f"at most {e.target:g}{tol}"
    if e.kind == "min":
        return f"at least {e.target:g}{tol}"
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


def _measure(check: Check, sel: Selection, nonfinite: pd.DataFrame) -> tuple[Any, pd.DataFrame]:
    """(value, deciding rows) of one selection."""
    m = check.measure
    if m.is_ratio:
        return _measure_ratio(check, sel, nonfinite)
    rows = with_nonfinite(sel.frame, nonfinite, [m.column, m.over])
    column = "value"
    rows = rows.assign(value=rows[m.column])  # a number column stays numeric, a boolean boolean
    if m.over:
        rows["value"] = rows["value"] / rows[m.over].astype(float)
    if m.invert:
        rows["value"] = 1 / rows["value"]
    if m.unit:
        rows["value"] = rows["value"] * UNITS[m.unit][1]
    rows = _judged(rows, m.column, sel.notes)
    return statistic(rows, column, m), rows


def _measure_ratio(check: Check, sel: Selection, nonfinite) -> tuple[Any, pd.DataFrame]:
    m, sides = check.measure, []
    for side, spec in (("numerator", m.numerator), ("denominator", m.denominator)):
        rows = keep_best(apply_where(sel.frame, spec.where), spec)
        if rows.empty:
            raise NotMeasurable(f"no {side} rows among the selected rows")
        sides.append(with_nonfinite(rows, nonfinite, [m.column]))
    merged = sides[0].merge(sides[1], on=list(m.join), suffixes=("_num", "_den"))
    if merged.empty:
        raise NotMeasurable(f"numerator and denominator rows share no values of {list(m.join)}")
    merged[NONFINITE] = merged[f"{NONFINITE}_num"] | merged[f"{NONFINITE}_den"]
    merged["value"] = merged[f"{m.column}_num"].astype(float) / \
        merged[f"{m.column}_den"].astype(float)
    merged = _judged(merged, f"{m.column} ratio", sel.notes)
    return statistic(merged, "value", m), pd.concat(sides)


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


def figure_of(check: Check) -> str:
    """The report figure that shows a check's evidence."""
    if check.stage == "prefill" and check.measure.column.endswith("_bytes"):
        return "prefill-memory"
    return FIGURES[check.stage]


def _frame(check: Check, found: Evidence, root: Path, key: str) -> tuple[Table, dict | None]:
    """The rows a check reads, and for a between-run check the version compared with."""
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
    """value, rows, ok and the words of the reason, over every dtype judged."""
    values, kept, oks, parts = [], [], [], []
    for sel in select(check, table.frame, device, stand_in):
        try:
            value, rows = _measure(check, sel, table.nonfinite)
        except NonFinite as bad:
            return {"ok": False, "value": None, "rows": sel.frame,
                    "text": f"{bad}; a computation that overflowed does not pass",
                    "judged_on": _rows_summary(sel.frame)}
        if check.measure.valid_max is not None and any(
                _number(v) and v > check.measure.valid_max
                for v in (value if isinstance(value, list) else [value])):
            raise NotMeasurable(f"value {format_value(value)} is above "
                                f"{check.measure.valid_max:g}, which is not physical: the "
                                "ceiling it is a fraction of is too low (a probe error)")
        ok, checked = judge(check.expect, value)
        label = f"{sel.dtype}: " if check.dtype == "each" else ""
        parts.append(f"{label}value {format_value(value)} over {len(rows)} row(s) "
                     f"({_rows_summary(rows)}){'; ' if sel.notes else ''}"
                     f"{'; '.join(sel.notes)}; needs {checked}")
        values += value if isinstance(value, list) and check.measure.stat != "at" else [value]
        kept.append(rows)
        oks.append(ok)
    value = values[0] if len(values) == 1 else values
    rows = pd.concat(kept)
    return {"ok": all(oks), "value": value, "rows": rows, "text": " | ".join(parts),
            "judged_on": _rows_summary(rows)}


def evaluate(claim: Claim, evidence: dict[str, Evidence], key: str, root: Path,
             hardware: str = "", stand_in: dict | None = None) -> dict:
    """One claim's verdict on ``key``: the claims.json entry for it. ``evidence`` maps a
    stage to its artifact on that key; ``stand_in`` the dtype for fp16 per device."""
    result = {"id": claim.id, "kind": claim.kind, "verdict": "not checkable", "value": None,
              "unit": None, "value_text": "—", "chapter_value": claim.chapter_value,
              "judged_on": "", "reason": "", "note": claim.note, "figure": None, "rows": [],
              "artifact": None, "compared_with": None}
    if claim.check is None:
        result["reason"] = f"reported by {claim.source}; this pipeline's data cannot test it"
        return result
    check = claim.check
    found = evidence[check.stage]
    result.update(artifact=found.describe(root), figure=figure_of(check))
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
        unit = display_unit(check)
        value = reported_value(judged["value"])
        verdict = "reproduced" if judged["ok"] else "not reproduced"
        where = f"judged on {key}" + (f"; the chapter measured on {hardware}"
                                      if claim.kind == "measured" and hardware else "")
        if elsewhere:
            verdict = "not comparable on this device"
            where = (f"the sentence is about a {check.device.upper()} device and {key} ran "
                     f"on {device}: the value here is shown beside it, not judged")
        result.update(verdict=verdict, value=value, unit=unit, value_text=with_unit(value, unit),
                      rows=_records(judged["rows"]), judged_on=judged["judged_on"],
                      reason=f"{judged['text']}; {where}")
    except NotMeasurable as why:
        result.update(verdict="not measurable here", reason=str(why))  # value stays None
    result["reason"] = found.hash_warning() + result["reason"]
    return result


def evaluate_all(claims, evidence: dict[str, Evidence], key: str, root: Path,
                 hardware: str = "", stand_in: dict | None = None) -> dict:
    """Every claim's verdict on ``key``: the content of results/{key}/claims.json."""
    machine, grid = layout.split_key(key)
    return {"machine": machine, "grid": grid,
            "claims": [evaluate(c, evidence, key, root, hardware, stand_in) for c in claims]}
