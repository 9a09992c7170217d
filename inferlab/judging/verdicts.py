"""The check interpreter: a typed claim (``inferlab.judging.claims``) judged on one results key.

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

Which rows are judged is ``inferlab.judging.selection``'s job; this module measures them
(``statistic``), judges the value (``judge``) and writes the claims.json entry. Text for
people (the value with its unit, figure links) is the report's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.artifacts import Table
from inferlab.evidence.loading import Evidence, device_of
from inferlab.judging.claims import ELEMENT_BYTES, TENSORS, UNITS, Check, Claim
from inferlab.judging.numtext import display_unit, format_value
from inferlab.judging.rule import (
    ANSWERED,
    INSIDE,
    OUTSIDE,
    STRADDLES,
    Estimate,
    divided,
    interval,
    interval_of,
    is_number,
    is_numeric_column,
    judge,
    plain,
    statistic,
    value_of,
    worst,
)
from inferlab.judging.selection import (
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
    if not is_numeric_column(rows[m.column]):
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
    from inferlab.evidence import compare
    from inferlab.evidence.register import Register

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
                is_number(e.value) and e.value > check.measure.valid_max for e in found):
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
