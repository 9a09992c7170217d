"""The check interpreter: a typed claim (``inferlab.claims``) judged on one machine's
artifacts.

A claim's verdict is per machine (DESIGN.md, "Claims"):

- ``reproduced``: the value here meets the sentence;
- ``not reproduced``: it does not; the value here is given;
- ``not measurable here``: the stage did not run, the artifact is missing, the machine
  lacks what the check requires (CUDA, fp16 rows), or no rows match the filter;
- ``not checkable``: a figure reported by others; nothing here can test it.

A check selects rows (``where``; rows whose status is not ok are dropped unless a
filter names status), keeps the best row per group, computes one statistic of a column
(or of a ratio of two row sets joined on key columns) and compares it with what the
sentence requires.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from inferlab import artifacts, layout
from inferlab.artifacts import Table
from inferlab.claims import UNITS, Check, Claim, Condition, Expect, Measure, Rows
from inferlab.files import relative
from inferlab.formats import display_unit, format_value, with_unit
from inferlab.pipeline import STAGES

MAX_ROWS = 20  # rows kept per claim in claims.json: enough to see why, small enough to read
# columns that say which rows decided a value, in the chapter's order of importance
SUMMARY_COLUMNS = ("impl", "T", "cache_len", "batch", "dtype", "causal", "block_q", "splits",
                   "score_scale", "backend")


class NotMeasurable(Exception):
    """The check cannot be made on this machine; the message says why."""


@dataclass
class Evidence:
    """One stage's artifact on one results key, as a check sees it."""

    stage: str
    path: Path
    data: Table | dict | None   # None when the artifact is missing
    entry: dict | None          # the register's latest entry for this stage
    sha256_now: str | None
    error: str | None = None    # why the file could not be read (then data is None)

    @property
    def table(self) -> Table:
        """The rows a check reads (probe.json: its availability list)."""
        return artifacts.probe_availability(self.data) if self.stage == "probe" else self.data

    @property
    def provenance(self) -> dict:
        return (self.entry or {}).get("provenance") or {}

    def describe(self, root: Path) -> dict:
        entry = self.entry or {}
        return {"stage": self.stage, "path": relative(self.path, root),
                "version": entry.get("version"), "sha256": entry.get("sha256")}

    def hash_warning(self) -> str:
        if self.sha256_now is None:
            return ""
        if self.entry is None:
            return "WARNING: this artifact is not in the evidence register. "
        if self.sha256_now != self.entry.get("sha256"):
            return (f"WARNING: the results file's sha256 {self.sha256_now} no longer matches "
                    f"register version {self.entry.get('version')} "
                    f"({self.entry.get('sha256')}). ")
        return ""


def device_of(evidence: Evidence, key: str) -> str:
    """'cuda' or 'cpu': from the recorded environment, else from the key's prefix."""
    device = str((evidence.provenance.get("environment") or {}).get("device") or key)
    return "cuda" if device.startswith("cuda") else "cpu"


# ---------------------------------------------------------------- row selection


def _matches(series: pd.Series, values: tuple) -> pd.Series:
    """Rows of ``series`` equal to one of ``values`` (missing cells never match)."""
    return series.isin(list(values)).fillna(False).astype(bool)


def _mask(frame: pd.DataFrame, cond: Condition) -> pd.Series:
    series = frame[cond.column]
    if cond.rank is not None:
        top = series.max()
        return (series == top if cond.rank == "largest" else series != top).fillna(False)
    if cond.values is not None:
        return _matches(series, cond.values)
    numeric = pd.to_numeric(series, errors="coerce").astype(float)
    low = -math.inf if cond.low is None else cond.low
    high = math.inf if cond.high is None else cond.high
    return numeric.ge(low) & numeric.le(high)


def select_rows(frame: pd.DataFrame, where: tuple[Condition, ...]) -> pd.DataFrame:
    """Rows of ``frame`` meeting every condition; rank conditions apply last, and rows
    whose status is not ok are dropped unless ``where`` names status."""
    conditions = list(where)
    if "status" in frame.columns and "status" not in {c.column for c in conditions}:
        conditions.insert(0, Condition("status", values=("ok",)))
    for cond in [c for c in conditions if c.rank is None] + [c for c in conditions if c.rank]:
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
    values = frame[column].dropna()
    if m.stat == "loglog_slope":
        return loglog_slope(frame, column, m.x)
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


def _holds(e: Expect, v: Any) -> bool:
    if e.kind == "equals":
        return v == e.target
    if v is None or isinstance(v, bool | str):
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
    """Whether ``value`` meets ``e``, and what was checked (for the reason)."""
    if e.kind == "approx_at":
        return _judge_at(e, value)
    items = value if isinstance(value, list) else [value]
    ok = all(_holds(e, v) for v in items)
    return ok, f"{'every value' if len(items) > 1 else 'the value'} {describe_expect(e)}"


def _judge_at(e: Expect, value: list) -> tuple[bool, str]:
    here = {str(k): v for k, v in value}
    present = [(k, x) for k, x in e.points if str(k) in here]
    absent = [str(k) for k, _ in e.points if str(k) not in here]
    if not present:
        raise NotMeasurable(f"no rows at {[k for k, _ in e.points]}")
    ok = all(abs(here[str(k)] - x) <= e.rel * abs(x) for k, x in present)
    text = f"within {e.rel:.0%} of {[x for _, x in present]} at {[k for k, _ in present]}"
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


def reported_value(value: Any, stat: str) -> Any:
    """What claims.json records: a judged list becomes [min, max]; others as they are."""
    if isinstance(value, list) and stat != "at":
        nums = [v for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
        if nums and len(nums) == len(value):
            return [min(nums), max(nums)]
    return value


# ---------------------------------------------------------------- evaluation


def _measure(check: Check, frame: pd.DataFrame) -> tuple[Any, pd.DataFrame]:
    """(value, deciding rows) of a check over already-filtered rows."""
    name, m = STAGES[check.stage].artifact, check.measure
    if frame.empty:
        raise NotMeasurable(f"no rows of {name} match the filter")
    if m.is_ratio:
        return _measure_ratio(m, frame, name)
    rows = keep_best(frame, check.rows).copy()
    column = m.column
    if m.over:
        rows["value_over"] = rows[column].astype(float) / rows[m.over].astype(float)
        column = "value_over"
    if m.unit:
        rows[column] = rows[column].astype(float) * UNITS[m.unit][1]
    return statistic(rows, column, m), rows


def _measure_ratio(m: Measure, frame: pd.DataFrame, name: str) -> tuple[Any, pd.DataFrame]:
    sides = []
    for side, spec in (("numerator", m.numerator), ("denominator", m.denominator)):
        rows = keep_best(select_rows(frame, spec.where), spec)
        if rows.empty:
            raise NotMeasurable(f"no {side} rows among the selected rows of {name}")
        sides.append(rows)
    merged = sides[0].merge(sides[1], on=list(m.join), suffixes=("_num", "_den"))
    merged["ratio"] = (merged[f"{m.column}_num"].astype(float)
                       / merged[f"{m.column}_den"].astype(float))
    merged = merged.dropna(subset=["ratio"])
    if merged.empty:
        raise NotMeasurable(f"numerator and denominator rows share no values of {list(m.join)}")
    return statistic(merged, "ratio", m), pd.concat(sides)


def _required_rows(check: Check, evidence: Evidence, key: str) -> pd.DataFrame:
    if check.device and device_of(evidence, key) != check.device:
        raise NotMeasurable(f"needs a {check.device.upper()} device; {key} ran on "
                            f"{device_of(evidence, key)}")
    frame = evidence.table.frame
    for column, want in check.requires:
        frame = frame[_matches(frame[column], (want,))]
        if frame.empty:
            raise NotMeasurable(f"no {column}={want} rows in {evidence.path.name} on {key}: "
                                f"this machine did not run {want} (no substitute is used)")
    return select_rows(frame, check.rows.where)


def _rows_summary(rows: pd.DataFrame) -> str:
    parts = []
    for column in SUMMARY_COLUMNS:
        if column in rows.columns:
            values = sorted({format_value(plain(v)) for v in rows[column].dropna()})
            if values:
                parts.append(f"{column}={','.join(values)}")
    noun = "row" if len(rows) == 1 else "rows"
    return f" over {len(rows)} {noun} ({'; '.join(parts)})" if parts else ""


def _records(rows: pd.DataFrame) -> list[dict]:
    records = rows.head(MAX_ROWS).to_dict(orient="records")
    return [{str(k): plain(v) for k, v in r.items()} for r in records]


def judged_on(rows: pd.DataFrame) -> str:
    """What a verdict rests on, in words: 'dtype=float32; T=1024,2048; causal=True'."""
    return _rows_summary(rows).partition("(")[2].rstrip(")")


FIGURES = {"probe": "backends", "correctness": "exactness", "prefill": "prefill-speedup",
           "decode": "decode", "traffic": "traffic"}


def figure_of(check: Check) -> str:
    """The report figure that shows a check's evidence."""
    if check.stage == "prefill" and check.measure.column.endswith("_bytes"):
        return "prefill-memory"
    return FIGURES[check.stage]


def evaluate(claim: Claim, evidence: dict[str, Evidence], key: str, root: Path,
             hardware: str = "") -> dict:
    """One claim's verdict on ``key``: the claims.json entry for it. ``evidence`` maps a
    stage to its artifact on that key."""
    result = {"id": claim.id, "kind": claim.kind, "verdict": "not checkable", "value": None,
              "unit": None, "value_text": "—", "chapter_value": claim.chapter_value,
              "judged_on": "", "reason": "", "note": None, "figure": None, "rows": [],
              "artifact": None, "compared_with": None}
    if claim.check is None:
        result["reason"] = f"reported by {claim.source}; this pipeline's data cannot test it"
        return result
    check = claim.check
    found = evidence[check.stage]
    result.update(artifact=found.describe(root), note=check.note, figure=figure_of(check))
    try:
        if found.error is not None:
            raise NotMeasurable(f"{result['artifact']['path']} cannot be read: {found.error}")
        if found.data is None:
            raise NotMeasurable(f"stage {check.stage} has not run on {key}: "
                                f"{result['artifact']['path']} is missing")
        value, rows = _measure(check, _required_rows(check, found, key))
        ok, checked = judge(check.expect, value)
        where = f"on {key}" + (f"; the chapter measured on {hardware}"
                               if claim.kind == "measured" and hardware else "")
        unit = display_unit(check)
        reported = reported_value(value, check.measure.stat)
        result.update(verdict="reproduced" if ok else "not reproduced", value=reported,
                      unit=unit, value_text=with_unit(reported, unit), rows=_records(rows),
                      judged_on=judged_on(rows),
                      reason=(f"value here {format_value(value)}{_rows_summary(rows)}; "
                              f"the sentence needs {checked}; judged {where}"))
    except NotMeasurable as why:
        result.update(verdict="not measurable here", value=None, reason=str(why))
    result["reason"] = found.hash_warning() + result["reason"]
    return result


def evaluate_all(claims, evidence: dict[str, Evidence], key: str, root: Path,
                 hardware: str = "") -> dict:
    """Every claim's verdict on ``key``: the content of results/{key}/claims.json."""
    machine, grid = layout.split_key(key)
    return {"machine": machine, "grid": grid,
            "claims": [evaluate(c, evidence, key, root, hardware) for c in claims]}
