"""Which rows a check judges, and what it says about the rest.

A check's rows are chosen in a fixed order, and nothing left out is left out silently:

1. the dtype: ``fp16`` is the device's stand-in for the chapter's fp16 (claims.yaml
   ``fp16_stand_in``), ``16-bit`` is float16 where present, else bfloat16, a dtype name
   is exactly that dtype (no substitute), ``each`` judges every dtype present separately,
   ``any`` does not filter (model rows);
2. the ``where`` filters;
3. the sentence's ``scope``: each value it speaks of that the rows lack is named
   ("8192: not in this grid", "4096: oom"); with none of them, not measurable here;
4. rows whose status is not ok are counted and named, then left out;
5. the best row per group.

The selected rows carry ``__nonfinite__``: True where a column the check judges holds a
computed NaN or infinity (``artifacts.Table.nonfinite``), which the verdict must not drop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from inferlab.judging.claims import Check, Condition, Rows

NONFINITE = "__nonfinite__"
# columns that say which rows decided a value, in the chapter's order of importance
SUMMARY_COLUMNS = ("impl", "quantity", "T", "cache_len", "batch", "dtype", "causal", "block_q",
                   "splits", "score_scale", "backend", "check")


class NotMeasurable(Exception):
    """The check cannot be made on this machine; the message says why."""


@dataclass
class Selection:
    dtype: str | None
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def describe(value) -> str:
    """A cell for people: 8192, not 8192.0; True/False as they are."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def row_names(frame: pd.DataFrame, limit: int = 6) -> str:
    """'impl=naive T=4096 causal=True, ...': the rows by their distinguishing columns."""
    cols = [c for c in SUMMARY_COLUMNS if c in frame.columns and frame[c].nunique() > 1] \
        or [c for c in SUMMARY_COLUMNS if c in frame.columns][:2]
    names = [" ".join(f"{c}={describe(r[c])}" for c in cols)
             for _, r in frame.head(limit).iterrows()]
    more = f" and {len(frame) - limit} more" if len(frame) > limit else ""
    return ", ".join(names) + more


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


def _status_of(rows: pd.DataFrame) -> str:
    """The statuses of ``rows``, each cut to its first words ('unavailable: ...')."""
    if "status" not in rows:
        return "no row"
    cut = {s if len(s) <= 60 else s[:57] + "..." for s in map(str, rows["status"])}
    return "; ".join(sorted(cut))


def apply_scope(frame: pd.DataFrame, scope, notes: list[str]) -> pd.DataFrame:
    """Rows at the sentence's own values; each value missing, or never ok, is named."""
    ok = frame["status"] == "ok" if "status" in frame else pd.Series(True, index=frame.index)
    for column, wanted in scope:
        present, missing = [], []
        for value in wanted:
            here = frame[column] == value
            if not here.fillna(False).any():
                missing.append(f"{describe(value)}: not in this grid")
            elif not (here.fillna(False) & ok).any():
                missing.append(f"{describe(value)}: {_status_of(frame[here.fillna(False)])}")
            else:
                present.append(value)
        if not present:
            have = sorted({describe(v) for v in frame[column].dropna()})
            raise NotMeasurable(f"needs {column} = {', '.join(map(describe, wanted))} "
                                f"({'; '.join(missing)}; this grid has "
                                f"{', '.join(have) or 'none'})")
        if missing:
            notes.append(f"judged on {len(present)} of {len(wanted)} values of {column}; "
                         + "; ".join(missing))
        frame = frame[frame[column].isin(present).fillna(False)]
    return frame


def drop_failed(frame: pd.DataFrame, notes: list[str], named_status: bool) -> pd.DataFrame:
    """Rows whose status is not ok, counted and named, then left out."""
    if named_status or "status" not in frame:
        return frame
    failed = frame[frame["status"] != "ok"]
    if not failed.empty:
        notes.append(f"{len(failed)} row(s) left out by status ({row_names(failed)}: "
                     f"{_status_of(failed)})")
    return frame[frame["status"] == "ok"]


def _wanted(cond: Condition) -> str:
    if cond.values is not None:
        return "|".join(describe(v) for v in cond.values)
    return f"[{'' if cond.low is None else describe(cond.low)}, " \
           f"{'' if cond.high is None else describe(cond.high)}]"


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
           stand_in: dict[str, str]) -> list[Selection]:
    """The rows a check judges, one Selection per dtype judged."""
    named_status = any(c.column == "status" for c in check.rows.where)
    out = []
    for dtype in dtypes_for(check, frame, device, stand_in):
        rows = frame if dtype is None else frame[frame["dtype"] == dtype]
        if rows.empty:
            substitute = " (the fp16 stand-in here)" if check.dtype == "fp16" else ""
            raise NotMeasurable(f"no {dtype} rows{substitute}: this machine did not run "
                                f"{dtype}; no other dtype is used in its place")
        notes: list[str] = []
        rows = apply_where(rows, check.rows.where)
        if rows.empty:
            wanted = ", ".join(f"{c.column}={_wanted(c)}" for c in check.rows.where)
            raise NotMeasurable(f"no {dtype + ' ' if dtype else ''}rows with {wanted}")
        rows = apply_scope(rows, check.scope, notes)
        rows = drop_failed(rows, notes, named_status)
        out.append(Selection(dtype, keep_best(rows, check.rows), notes))
    return out


def with_nonfinite(frame: pd.DataFrame, nonfinite: pd.DataFrame, columns) -> pd.DataFrame:
    """``frame`` with ``__nonfinite__``: any of ``columns`` computed NaN or infinite."""
    flags = pd.Series(False, index=frame.index)
    for column in columns:
        if column in nonfinite:
            flags |= nonfinite[column].reindex(frame.index, fill_value=False)
    return frame.assign(**{NONFINITE: flags})
