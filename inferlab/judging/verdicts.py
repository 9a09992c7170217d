"""The check interpreter: a typed claim (``inferlab.judging.claims``) judged on one results key.

A claim's verdict is per machine, one of ``VERDICTS``; claims.yaml's header says what each
means. Premises are decided first (``premises_hold``), so a sentence about another device
shows no value computed under one that fails; "not measurable here" carries its ``cause``
as data (``inferlab.judging.causes``).

The accepted range and the intervals are ``inferlab.judging.rule``'s; which rows are
judged is ``inferlab.judging.selection``'s. This module writes the claims.json entry:
values, enums and references only. Every text people read is rendered by
``inferlab.presentation.claim_text``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.artifacts import Table
from inferlab.evidence.loading import device_of, gpu_of
from inferlab.evidence.register import Evidence
from inferlab.judging.causes import READINGS, NotMeasurable, primary
from inferlab.judging.claims import (
    ELEMENT_BYTES,
    MAP_DERIVED,
    TENSORS,
    UNITS,
    Check,
    Claim,
    columns_named,
    map_derived,
)
from inferlab.judging.numtext import display_unit
from inferlab.judging.rule import (
    ANSWERED,
    INSIDE,
    OUTSIDE,
    STRADDLES,
    Estimate,
    absent_points,
    divided,
    interval,
    interval_of,
    is_numeric_column,
    judge,
    plain,
    statistic,
    value_of,
    worst,
)
from inferlab.judging.selection import (
    NONFINITE,
    Selection,
    Upstream,
    apply_where,
    keep_best,
    plain_values,
    select,
    with_nonfinite,
)
from inferlab.judging.series_view import is_number

# the columns that say which length a row is at: where a reading not taken is named
LENGTHS = ("T", "cache_len")
MAX_ROWS = 20  # rows kept per claim in claims.json: enough to see why, small enough to read
SCHEMA_VERSION = 3  # of claims.json (schemas/claims_result.schema.json)
# columns that say which rows decided a value, in the chapter's order of importance
SUMMARY_COLUMNS = ("impl", "quantity", "T", "cache_len", "batch", "dtype", "causal", "block_q",
                   "splits", "score_scale", "backend", "check")
# columns of a probe list that name a row (probe.json has no key columns of its own)
PROBE_KEYS = ("backend", "case", "dtype", "causal", "T", "d")
# the verdicts of a sentence that is not about this machine's evidence
NOT_COMPARABLE, AUTHOR_CODE = "not comparable on this device", "about the author's code"
NOT_MEASURABLE, NOT_CHECKABLE = "not measurable here", "not checkable"
# every verdict claims.json may hold (its schema's enum is generated from this)
VERDICTS = (INSIDE, OUTSIDE, STRADDLES, ANSWERED, NOT_MEASURABLE, NOT_COMPARABLE, AUTHOR_CODE,
            NOT_CHECKABLE)
ANSWERS = {INSIDE: "yes", OUTSIDE: "no", STRADDLES: "undecided", ANSWERED: "value"}


# ---------------------------------------------------------------- measuring


class NonFinite(Exception):
    """A value the check rests on is NaN or infinite in ``rows`` rows of ``column``."""

    def __init__(self, column: str, rows: pd.DataFrame):
        super().__init__(f"{column} is NaN or infinite in {len(rows)} row(s)")
        self.column, self.rows = column, rows


def not_taken(rows: pd.DataFrame, reading: str, scope: list[str]) -> list[dict]:
    """``missing`` entries for ok rows whose ``reading`` (causes.READINGS) is empty: the
    stage takes its readings after its timings and stops taking them at its limit
    (inferlab.measurement.workers), so such a row was timed and then not read. One entry per
    value of the sentence's first scope column (else of the row's length), with the rows."""
    column = next((c for c in [*scope, *LENGTHS] if c in rows), None)
    if column is None:
        return [{"kind": "stopped_at_limit", "reading": reading, "rows": len(rows)}]
    return [{"column": column, "value": value, "kind": "stopped_at_limit", "reading": reading,
             "rows": int((rows[column] == value).sum())}
            for value in plain_values(rows[column])]


def _judged(frame: pd.DataFrame, name: str, sel: Selection, upstream,
            column: str | None = None) -> pd.DataFrame:
    """The rows with a judged value: a computed non-finite one fails the check; an empty
    cell is left out, counted or explained (upstream, ``not_taken``)."""
    bad = frame[frame[NONFINITE]]
    if not bad.empty:
        raise NonFinite(name, bad)
    empty = frame["value"].isna()
    if empty.any():
        explained = upstream.empty(frame[empty])
        left = int(empty.sum()) - sum(m["rows"] for m in explained)
        if column in READINGS and left:
            explained += not_taken(frame[empty], column, upstream.columns)
        else:
            sel.not_applicable += left
        sel.missing += explained
    if empty.all():
        if sel.missing:
            raise NotMeasurable(primary(m["kind"] for m in sel.missing), missing=sel.missing)
        raise NotMeasurable("not_applicable", column=name, rows=int(empty.sum()))
    return frame[~empty]


def tensor_bytes(rows: pd.DataFrame, per: str) -> pd.Series:
    """Bytes of one tensor ``per`` (claims.TENSORS) of each row's shape and dtype."""
    count = pd.Series(1.0, index=rows.index)
    for column in TENSORS[per]:
        count = count * rows[column].astype(float)
    size = rows["dtype"].map(ELEMENT_BYTES)
    if size.isna().any():
        raise NotMeasurable("not_applicable", column="dtype",
                            values=plain_values(rows["dtype"][size.isna()]),
                            known=sorted(ELEMENT_BYTES))
    return count * size.astype(float)


def _measure(check: Check, sel: Selection, nonfinite: pd.DataFrame, upstream
             ) -> tuple[list[Estimate], pd.DataFrame]:
    """(estimates, deciding rows with value, ci_low, ci_high) of one selection, each in
    the claim's quantity (naive ÷ fused for an inverted ratio, ...)."""
    m = check.measure
    if m.is_ratio:
        return _measure_ratio(check, sel, nonfinite, upstream)
    rows = with_nonfinite(sel.frame, nonfinite, [m.column, m.over])
    if not is_numeric_column(rows[m.column]):
        # a boolean or a text stays as it is: it has no interval
        rows = rows.assign(value=rows[m.column], ci_low=None, ci_high=None)
        rows = _judged(rows, m.column, sel, upstream, m.column)
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
    rows = _judged(rows, m.column, sel, upstream, m.column)
    return statistic(rows, "value", m), rows


def _measure_ratio(check: Check, sel: Selection, nonfinite, upstream
                   ) -> tuple[list[Estimate], pd.DataFrame]:
    """Numerator rows ÷ denominator rows joined on ``join``; the rows kept are the
    numerator's, with the quotient and its interval and the denominator's column."""
    m, sides = check.measure, []
    for side, spec in (("numerator", m.numerator), ("denominator", m.denominator)):
        rows = keep_best(apply_where(sel.frame, spec.where), spec)
        if rows.empty:
            raise NotMeasurable("not_in_grid", side=side)
        low, high = interval_of(rows, m.column)
        sides.append(with_nonfinite(rows, nonfinite, [m.column]).assign(ci_low=low,
                                                                        ci_high=high))
    merged = sides[0].merge(sides[1], on=list(m.join), suffixes=("", "_den"))
    if merged.empty:
        raise NotMeasurable("not_in_grid", join=list(m.join))
    merged[NONFINITE] = merged[NONFINITE] | merged[f"{NONFINITE}_den"]
    value, low, high = divided(
        tuple(merged[c].astype(float) for c in (m.column, "ci_low", "ci_high")),
        tuple(merged[c + "_den"].astype(float) for c in (m.column, "ci_low", "ci_high")))
    merged = merged.assign(value=value, ci_low=low, ci_high=high).rename(
        columns={f"{m.column}_den": f"denominator_{m.column}"})
    merged = merged.drop(columns=[c for c in merged.columns if c.endswith("_den")])
    merged = _judged(merged, f"{m.column} ratio", sel, upstream, m.column)
    return statistic(merged, "value", m), merged


# ---------------------------------------------------------------- what the rows were


def judged_on(rows: pd.DataFrame) -> dict:
    """{column: [values]} of the columns that say which rows decided the value."""
    return {c: plain_values(rows[c]) for c in SUMMARY_COLUMNS
            if c in rows.columns and rows[c].notna().any()}


def _kept_columns(check: Check, rows: pd.DataFrame) -> list[str]:
    """A deciding row's references and numbers: its key, the columns the check names, its
    status and the claim's value (never a column of prose such as a note or a method)."""
    keys = STAGES[check.stage].key_columns or PROBE_KEYS
    wanted = [*keys, *sorted(columns_named(check)), "status", "cause",
              *(c for c in rows.columns if c.startswith("denominator_")),
              "value", "ci_low", "ci_high"]
    return [c for c in dict.fromkeys(wanted) if c in rows.columns]


def _records(check: Check, rows: pd.DataFrame) -> list[dict]:
    """The deciding rows for claims.json. JSON has no infinity: a computed one is written as
    the CSV writes it ("inf", "-inf"); NaN, which a frame also uses for an empty cell, is
    null here."""
    records = rows[_kept_columns(check, rows)].head(MAX_ROWS)
    return [{str(k): ("inf" if v > 0 else "-inf") if isinstance(v, float) and math.isinf(v)
             else plain(v) for k, v in r.items()} for r in records.to_dict(orient="records")]


def _frame(check: Check, found: Evidence) -> Table:
    """The rows a check reads: its artifact's table, or the probe list it names."""
    if check.stage == "probe" and check.table != "availability":
        if not found.data.get(check.table):
            raise NotMeasurable("not_in_grid", stage="probe", column=check.table)
        row_schema = artifacts.schema("probe")["properties"][check.table]["items"]
        kinds = {c: artifacts.column_type("probe", c, row_schema) for c in row_schema["required"]}
        records = found.data[check.table]
        if check.table == "backend_map":  # with the columns computed from the map itself
            records, kinds = map_derived(records), {**kinds, **MAP_DERIVED}
        return artifacts.frame_of(records, kinds)
    if check.between_runs and not (found.table.frame.get("median_ms_spread", pd.Series(
            dtype=float)).notna().any()):
        # the series' spread between its runs (a table of one run has none): the series
        # needs two runs made alike
        raise NotMeasurable("too_few_runs", stage=check.stage, rows=len(found.table))
    return found.table


def _judge_selections(check: Check, table: Table, device: str, stand_in: dict,
                      upstream) -> dict:
    """verdict, estimates, rows and one record per dtype judged (its verdict, value,
    interval and what was left out)."""
    estimates, kept, verdicts, parts = [], [], [], []
    for sel in select(check, table.frame, device, stand_in, upstream):
        try:
            found, rows = _measure(check, sel, table.nonfinite, upstream)
        except NonFinite as bad:
            return {"verdict": OUTSIDE, "estimates": [], "rows": bad.rows,
                    "judged": [{"dtype": sel.dtype, "verdict": OUTSIDE, "value": None,
                                "interval": None, "rows": len(bad.rows),
                                "judged_on": judged_on(bad.rows),
                                "nonfinite": {"column": bad.column, "rows": len(bad.rows)},
                                "missing": sel.missing, "left_out": sel.left_out,
                                "not_applicable": sel.not_applicable}],
                    "judged_on": judged_on(bad.rows)}
        if check.measure.valid_max is not None and any(
                is_number(e.value) and e.value > check.measure.valid_max for e in found):
            raise NotMeasurable("not_physical", value=value_of(found, check.measure),
                                valid_max=check.measure.valid_max)
        verdict = judge(check.expect, found) if check.expect is not None else ANSWERED
        part = {"dtype": sel.dtype, "verdict": verdict,
                "value": value_of(found, check.measure), "interval": interval(found),
                "rows": len(rows), "judged_on": judged_on(rows), "missing": sel.missing,
                "left_out": sel.left_out, "not_applicable": sel.not_applicable}
        if check.expect is not None and check.expect.kind == "approx_at":
            part["absent"] = absent_points(check.expect, found)
        parts.append(part)
        estimates += found
        kept.append(rows)
        verdicts.append(verdict)
    rows = pd.concat(kept)
    return {"verdict": worst(verdicts), "estimates": estimates, "rows": rows,
            "judged": parts, "judged_on": judged_on(rows)}


def integrity_of(found: Evidence) -> dict | None:
    """None when the artifact read is the register's latest version; else what is wrong."""
    if found.sha256_now is None:
        return None
    if found.entry is None:
        return {"state": "not_registered", "sha256_now": found.sha256_now}
    if found.sha256_now != found.entry.get("sha256"):
        return {"state": "changed", "sha256_now": found.sha256_now,
                "version": found.entry.get("version"), "sha256": found.entry.get("sha256")}
    return None


def premises_hold(check: Check, evidence: dict[str, Evidence], key: str, device: str,
                  stand_in: dict) -> None:
    """Raise NotMeasurable at the first premise of ``check`` not shown to hold on ``key``
    (a premise whose own check cannot be made here: for that check's cause). A premise
    holds only where something shows it: never assumed where it was not refuted."""
    machine = layout.split_key(key)[0]
    for premise in check.premises:
        if machine in premise.refuted_on:
            raise NotMeasurable("premise_fails", premise=premise.name, machine=machine)
        if premise.check is None:
            raise NotMeasurable("premise_unmeasured", premise=premise.name)
        found = evidence[premise.check.stage]
        if found.data is None:
            raise NotMeasurable("upstream_failed", stage=premise.check.stage,
                                state="unreadable" if found.error else "missing",
                                **({"error": found.error} if found.error else {}))
        judged = _judge_selections(premise.check, _frame(premise.check, found), device, stand_in,
                                   Upstream(premise.check, evidence))
        if judged["verdict"] != INSIDE:
            raise NotMeasurable("premise_fails", premise=premise.name,
                                verdict=judged["verdict"],
                                value=value_of(judged["estimates"], premise.check.measure)
                                if judged["estimates"] else None,
                                interval=interval(judged["estimates"]))


def _shown_elsewhere(claim: Claim, device: str, gpu: dict | None = None) -> str | None:
    """The verdict of a sentence that is not about this machine's evidence: another
    device's figure (another device class, or a GPU other than the chapter's: ``gpu`` says
    both), or the author's own code; None when it is judged here."""
    if claim.kind == "author-code":
        return AUTHOR_CODE
    check = claim.check
    if claim.kind == "device-specific" and device != check.device:
        return NOT_COMPARABLE
    if claim.kind == "device-specific" and gpu is not None and check.gpu == "chapter" \
            and gpu["multiprocessors"] != gpu["chapter_multiprocessors"]:
        return NOT_COMPARABLE
    if check.device is not None and device != check.device:
        raise NotMeasurable("device_cannot", needs=check.device, device=device)
    return None


def _gpu(evidence: dict[str, Evidence], device: str, chapter_gpu: dict | None) -> dict | None:
    """This key's GPU beside the chapter's, when both are known and it is a CUDA key."""
    found = gpu_of(evidence) if device == "cuda" and chapter_gpu else None
    return None if found is None else {**found, "chapter_multiprocessors":
                                       chapter_gpu.get("multiprocessors")}


def evaluate(claim: Claim, evidence: dict[str, Evidence], key: str, root: Path,
             stand_in: dict | None = None, chapter_gpu: dict | None = None) -> dict:
    """One claim's claims.json entry on ``key`` (``evidence``: stage -> its artifact there;
    ``stand_in``: device -> the dtype for fp16)."""
    result = {"id": claim.id, "kind": claim.kind, "verdict": NOT_CHECKABLE, "value": None,
              "interval": None, "unit": None, "answer": None, "device": None,
              "judged_on": {}, "judged": [], "cause": None, "integrity": None, "rows": [],
              "artifact": None, "compared_with": None}
    if claim.check is None:
        return result
    check = claim.check
    found = evidence[check.stage]
    result.update(artifact=found.describe(root), integrity=integrity_of(found))
    shown = None
    try:
        if found.error is not None:
            raise NotMeasurable("upstream_failed", stage=check.stage, state="unreadable",
                                error=found.error)
        if found.data is None:
            raise NotMeasurable("upstream_failed", stage=check.stage, state="missing")
        device = result["device"] = device_of(found, key)
        stand_in = stand_in or {"cpu": "float32", "cuda": "float16"}
        # before what the sentence is about: a premise that fails here leaves no value to
        # show beside another device's figure either
        premises_hold(check, evidence, key, device, stand_in)
        gpu = _gpu(evidence, device, chapter_gpu)
        shown = _shown_elsewhere(claim, device, gpu)
        if shown == AUTHOR_CODE and check.device is not None and device != check.device:
            # the author's figure stays shown; this device cannot make the value beside it
            raise NotMeasurable("device_cannot", needs=check.device, device=device)
        if shown and gpu is not None and device == check.device:
            result["gpu"] = gpu  # why a CUDA key shows a CUDA figure: another GPU
        judged = _judge_selections(check, _frame(check, found), device, stand_in,
                                   Upstream(check, evidence))
        verdict = judged["verdict"]
        if claim.kind == "question":
            result["answer"], verdict = ANSWERS[verdict], ANSWERED
        result.update(verdict=shown or verdict,
                      value=value_of(judged["estimates"], check.measure)
                      if judged["estimates"] else None,
                      interval=interval(judged["estimates"]), unit=display_unit(check),
                      rows=_records(check, judged["rows"]), judged_on=judged["judged_on"],
                      judged=judged["judged"])
    except NotMeasurable as why:
        if why.cause["kind"] == "premise_fails" and why.cause["premise"] == check.asks:
            # the question is whether this premise holds: where it fails, that is the answer
            # (no; undecided where its own check is within noise)
            result.update(verdict=ANSWERED, answer=ANSWERS[why.cause.get("verdict", OUTSIDE)],
                          cause=why.cause)
            return result
        # a sentence about another device or the author's code stays so without a value
        result.update(verdict=shown or NOT_MEASURABLE, cause=why.cause)
    return result


def evaluate_all(claims, evidence: dict[str, Evidence], key: str, root: Path,
                 stand_in: dict | None = None, chapter_gpu: dict | None = None) -> dict:
    """Every claim's verdict on ``key``: the content of results/{key}/claims.json."""
    machine, grid = layout.split_key(key)
    return {"schema_version": SCHEMA_VERSION, "machine": machine, "grid": grid,
            "claims": [evaluate(c, evidence, key, root, stand_in, chapter_gpu)
                       for c in claims]}
