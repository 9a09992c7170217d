"""Which rows a check judges, and what it records about the rest.

A check's rows are chosen in a fixed order (claims.yaml's header says what each field
means), and nothing left out is left out silently: the dtype, the ``where`` filters, the
sentence's ``scope`` (each value without an ok row is recorded in ``Selection.missing``
with its cause; with none of them, not measurable here), the rows whose status is not ok
(counted by status and cause in ``Selection.left_out``), then the best row per group.

What is recorded is data; the words are the report's. The selected rows carry
``__nonfinite__``: True where a column the check judges holds a computed NaN or infinity
(``artifacts.Table.nonfinite``), which the verdict must not drop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from inferlab.core.pipeline import STAGES
from inferlab.judging import series_view
from inferlab.judging.causes import NotMeasurable, primary, row_cause
from inferlab.judging.claims import Check, Condition, Rows

NONFINITE = "__nonfinite__"


@dataclass
class Selection:
    """One dtype's rows, with what was left out: ``missing`` (a scope value without an ok
    row: {column, value, kind, rows, ...}), ``left_out`` (rows not ok, by status and
    cause: {status, cause, kind, rows, impl}) and ``not_applicable`` (rows with no value
    of the judged column)."""

    dtype: str | None
    frame: pd.DataFrame
    missing: list[dict] = field(default_factory=list)
    left_out: list[dict] = field(default_factory=list)
    not_applicable: int = 0


def describe(value) -> str:
    """A cell for people: 8192, not 8192.0; True/False as they are."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def plain_values(series: pd.Series) -> list:
    """The distinct values of a column, in order, as JSON scalars (8192, not 8192.0)."""
    values = []
    for v in series.dropna():
        v = v.item() if hasattr(v, "item") else v
        v = int(v) if isinstance(v, float) and v.is_integer() else v
        if v not in values:
            values.append(v)
    return sorted(values, key=lambda v: (isinstance(v, str), v if not isinstance(v, str)
                                         else 0, str(v)))


def _mask(frame: pd.DataFrame, cond: Condition) -> pd.Series:
    series = frame[cond.column]
    if cond.values is not None:
        return series.isin(list(cond.values)).fillna(False).astype(bool)
    numeric = pd.to_numeric(series, errors="coerce").astype(float)
    low = -math.inf if cond.low is None else cond.low
    high = math.inf if cond.high is None else cond.high
    return numeric.ge(low) & numeric.le(high)


def apply_where(frame: pd.DataFrame, where: tuple[Condition, ...]) -> pd.DataFrame:
    for cond in where:
        frame = frame[_mask(frame, cond)]
    return frame


def keep_best(frame: pd.DataFrame, rows: Rows) -> pd.DataFrame:
    """One row per ``best.by`` group: the one with the lowest ``best.lowest``."""
    best = rows.best
    if best is None or frame.empty:
        return frame
    frame = frame.dropna(subset=[best.lowest])
    if frame.empty:
        return frame
    return frame.loc[frame.groupby(list(best.by), dropna=False)[best.lowest].idxmin()]


def _ok(frame: pd.DataFrame) -> pd.Series:
    if "status" not in frame:
        return pd.Series(True, index=frame.index)
    return (frame["status"] == "ok").fillna(False).astype(bool)


def failed_statuses(rows: pd.DataFrame) -> list[dict]:
    """Rows that are not ok, counted by (status, cause), with the kind of cause each is
    for a claim and the implementations it hit."""
    cause = rows["cause"] if "cause" in rows else pd.Series(None, index=rows.index)
    out = []
    for (status, why), group in rows.assign(_cause=cause.astype(object)).groupby(
            ["status", "_cause"], dropna=False, sort=True):
        why = None if series_view.missing(why) else str(why)
        entry = {"status": str(status), "cause": why, "kind": row_cause(str(status), why),
                 "rows": len(group)}
        if "impl" in group:
            entry["impl"] = plain_values(group["impl"])
        if "budget_left_s" in group and group["budget_left_s"].notna().any():
            entry["budget_left_s"] = float(group["budget_left_s"].max())
        out.append(entry)
    return out


def apply_scope(frame: pd.DataFrame, scope, missing: list[dict],
                upstream: Upstream | None = None) -> pd.DataFrame:
    """Rows at the sentence's own values; each value without an ok row goes to
    ``missing`` with its cause (a value this stage lacks, explained by ``upstream`` where
    it can be); with none of them, not measurable here."""
    ok = _ok(frame)
    for column, wanted in scope:
        present, lacking = [], []
        for value in wanted:
            here = (frame[column] == value).fillna(False).astype(bool)
            if not here.any():
                lacking.append({"column": column, "value": value, "kind": "not_in_grid"})
            elif not (here & ok).any():
                statuses = failed_statuses(frame[here])
                lacking.append({"column": column, "value": value,
                                "kind": primary(s["kind"] for s in statuses),
                                "statuses": statuses})
            else:
                present.append(value)
        if upstream is not None:
            lacking = [upstream.absent(m) for m in lacking]
        if not present:
            raise NotMeasurable(primary(m["kind"] for m in lacking), column=column,
                                missing=lacking, grid=plain_values(frame[column]))
        missing += lacking
        frame = frame[frame[column].isin(present).fillna(False)]
    return frame


def drop_failed(frame: pd.DataFrame, left_out: list[dict], named_status: bool) -> pd.DataFrame:
    """Rows whose status is not ok, counted by status and cause, then left out; when
    nothing is left, not measurable with their cause."""
    if named_status or "status" not in frame:
        return frame
    ok = _ok(frame)
    if not ok.all():
        left_out += failed_statuses(frame[~ok])
    if not ok.any():
        raise NotMeasurable(primary(s["kind"] for s in left_out), left_out=left_out)
    return frame[ok]


def _wanted(cond: Condition):
    if cond.values is not None:
        return list(cond.values)
    return {k: v for k, v in (("min", cond.low), ("max", cond.high)) if v is not None}


def dtypes_for(check: Check, frame: pd.DataFrame, device: str,
               stand_in: dict[str, str]) -> list[str | None]:
    """The dtypes judged, each separately (None: no dtype filter)."""
    if check.dtype == "any" or "dtype" not in frame.columns:
        return [None]
    if check.dtype == "each":
        return sorted({str(d) for d in frame["dtype"].dropna()}) or [None]
    if check.dtype == "16-bit":  # the rounding of a 16-bit output: fp16, else bf16's
        return ["float16" if (frame["dtype"] == "float16").any() else "bfloat16"]
    return [stand_in[device] if check.dtype == "fp16" else check.dtype]


def select(check: Check, frame: pd.DataFrame, device: str,
           stand_in: dict[str, str], upstream: Upstream | None = None) -> list[Selection]:
    """The rows a check judges, one Selection per dtype judged."""
    named_status = any(c.column == "status" for c in check.rows.where)
    out = []
    for dtype in dtypes_for(check, frame, device, stand_in):
        rows = frame if dtype is None else frame[frame["dtype"] == dtype]
        if rows.empty:
            raise NotMeasurable("not_in_grid", column="dtype", values=[dtype],
                                grid=plain_values(frame["dtype"]),
                                stand_in=check.dtype == "fp16")
        rows = apply_where(rows, check.rows.where)
        if rows.empty:
            raise NotMeasurable("not_in_grid", dtype=dtype,
                                where={c.column: _wanted(c) for c in check.rows.where})
        sel = Selection(dtype, rows)
        rows = apply_scope(rows, check.scope, sel.missing, upstream)
        rows = drop_failed(rows, sel.left_out, named_status)
        sel.frame = keep_best(rows, check.rows)
        out.append(sel)
    return out


def with_nonfinite(frame: pd.DataFrame, nonfinite: pd.DataFrame, columns) -> pd.DataFrame:
    """``frame`` with ``__nonfinite__``: any of ``columns`` computed NaN or infinite."""
    flags = pd.Series(False, index=frame.index)
    for column in columns:
        if column in nonfinite:
            flags |= nonfinite[column].reindex(frame.index, fill_value=False)
    return frame.assign(**{NONFINITE: flags})


class Upstream:
    """The rows of the timed stage a derived stage is computed from (traffic from prefill),
    to say why a point is absent or empty there: the upstream rows at the same value of
    the sentence's column (and the same dtype, mask and head dimension) that are not ok
    give the cause (a point prefill dropped is "dropped_by_budget" in traffic too)."""

    SHARED = ("dtype", "causal", "d")

    def __init__(self, check: Check, evidence: dict | None = None):
        self.columns = columns = [c for c, _ in check.scope]
        self.tables = []
        for stage in STAGES[check.stage].reads if evidence else ():
            for up in (stage, *STAGES[stage].reads):
                found = evidence.get(up)
                if found is None or found.data is None or not STAGES[up].table:
                    continue
                frame = found.table.frame
                if "status" in frame and columns and all(c in frame for c in columns):
                    self.tables.append((up, frame))
        self.where = [c for c in check.rows.where if c.column in self.SHARED]

    def explain(self, column: str, value, at: pd.DataFrame | None = None) -> dict | None:
        """A ``missing`` entry for ``column`` = ``value`` with the upstream cause, or None."""
        for up, frame in self.tables:
            hit = apply_where(frame[(frame[column] == value).fillna(False)],
                              tuple(c for c in self.where if c.column in frame))
            for c in self.SHARED:
                if at is not None and c in at and c in hit:
                    hit = hit[hit[c].isin(plain_values(at[c]))]
            failed = hit[(hit["status"] != "ok").fillna(False)]
            if not failed.empty:
                statuses = failed_statuses(failed)
                return {"column": column, "value": value, "stage": up,
                        "kind": primary(s["kind"] for s in statuses), "statuses": statuses,
                        **({"rows": len(at)} if at is not None else {})}
        return None

    def absent(self, entry: dict) -> dict:
        """A scope value this stage has no row for, explained upstream where it can be."""
        if entry["kind"] != "not_in_grid":
            return entry
        return self.explain(entry["column"], entry["value"]) or entry

    def empty(self, rows: pd.DataFrame) -> list[dict]:
        """The rows whose value is empty, explained upstream per value of the scope."""
        out = []
        for column in self.columns:
            if column not in rows:
                continue
            for value in plain_values(rows[column]):
                at = rows[(rows[column] == value).fillna(False)]
                found = self.explain(column, value, at)
                if found is not None:
                    out.append(found)
        return out
