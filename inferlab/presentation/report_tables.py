"""The report's tables that every stage's view shares: an artifact's rows as formatted
cells (units in the headers, "—" where a column does not apply, nan/inf where a number
was computed so), the between-run spread of a timing stage (``compare``) and the
previous run's verdicts. A stage's own summaries are in its view (``inferlab.presentation.views``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts, compare
from inferlab.evidence.artifacts import Table
from inferlab.evidence.register import Register
from inferlab.judging.numtext import format_value
from inferlab.measurement.intervals import run_variance
from inferlab.presentation.formats import table_cell

# Raw tables: column -> header (units in the header), each stage's in its view
# (inferlab/presentation/views/); a column's format follows from its type and name (_cell_kind).
# Columns an artifact lacks are left out.


def _cell_kind(column: str, dtype) -> str:
    if column == "causal":
        return "mask"
    if column.endswith("_bytes"):
        return "mib"
    if column.startswith("frac_"):
        return "pct"
    return {"boolean": "yes", "Int64": "int", "float64": "num"}.get(str(dtype), "text")


def raw_table(table: Table, columns: dict[str, str], rows: pd.Series | None = None) -> dict:
    """Rows of ``table`` as formatted cells, in ``columns`` (those it has); noisy rows
    marked."""
    frame = table.frame if rows is None else table.frame[rows]
    spec = [(c, _cell_kind(c, frame[c].dtype)) for c in columns if c in frame.columns]
    nonfinite = table.nonfinite.loc[frame.index]
    body = []
    for i, record in zip(frame.index, frame.to_dict("records"), strict=True):
        cells = [table_cell(record[c], kind, c in nonfinite.columns and bool(nonfinite.at[i, c]))
                 for c, kind in spec]
        body.append({"cells": cells, "noisy": record.get("noisy") is True})
    return {"columns": [columns[c] for c, _ in spec], "rows": body}


def _unavailable(table: Table) -> tuple[pd.Series, list[str]]:
    """Rows that only say "unavailable", as one line per implementation and reason."""
    frame = table.frame
    mask = frame["status"].fillna("") == "unavailable"
    reasons = frame["reason"].fillna("") if "reason" in frame else pd.Series("", frame.index)
    notes = [f"{impl}: not run in {len(group)} rows: {reason or 'no reason given'}"
             for (impl, reason), group in frame[mask].assign(_why=reasons)
             .groupby(["impl", "_why"])]
    return ~mask, notes


def raw_block(key: str, stage: str, table: Table, spec) -> dict:
    """A key's raw rows of ``stage`` for a <details>: table, collapsed unavailable rows."""
    columns = table.frame.columns
    keep, notes = _unavailable(table) if {"impl", "status"} <= set(columns) else (None, [])
    return {"key": key, "artifact": STAGES[stage].artifact, "count": len(table),
            "table": raw_table(table, spec, keep), "notes": notes}


def previous_verdicts(root: Path, key: str) -> tuple[int | None, dict[str, str]]:
    """(version, {claim id: verdict}) of the claims.json made before the latest one with
    the same code, config and hardware (``compare``); (None, {}) when there is none."""
    register = Register(root, key)
    entry = compare.comparable(register, "claims")
    if entry is None:
        return None, {}
    try:  # a retained copy that cannot be read is verify's to report, not the page's
        data = artifacts.decode("claims", register.copy_path(entry["sha256"]).read_bytes())
    except (OSError, ValueError):
        return None, {}
    return entry["version"], {c["id"]: c["verdict"] for c in data["claims"]}


def pair_summary(diffs: pd.DataFrame) -> dict:
    """The paired ratios (ratio != 1 in both runs) of two versions (``compare.differences``):
    how many points, at how many each run lies inside the other's 95 % interval (of those
    with both intervals), the median and largest |relative difference|, and the median
    relative half-width of both runs' intervals (None where no row has one)."""
    if "ratio_diff" not in diffs:
        return {"points": 0, "judged": 0, "inside": 0, "median_diff": None, "max_diff": None,
                "median_halfwidth": None}
    paired = diffs[(diffs["ratio_old"] != 1) & (diffs["ratio_new"] != 1)]
    agree = (paired["ratio_agree"] if "ratio_agree" in paired
             else pd.Series([], dtype="boolean")).dropna()
    moved = paired["ratio_diff"].abs().dropna()
    halves = []
    for which in ("old", "new"):
        low, high = (paired.get(f"{b}_{which}") for b in compare.INTERVALS["ratio"])
        if low is not None and high is not None:
            half = ((high - low) / 2 / paired[f"ratio_{which}"]).astype(float)
            halves += [h for h in half if pd.notna(h) and h != float("inf")]
    return {"points": len(paired), "judged": len(agree), "inside": int(agree.sum()),
            "median_diff": float(moved.median()) if len(moved) else None,
            "max_diff": float(moved.max()) if len(moved) else None,
            "median_halfwidth": float(pd.Series(halves).median()) if halves else None}


def run_level(stage: str, old: Table, new: Table) -> dict:
    """How much of the between-run variance of two versions' paired ratios their processes
    sample (``compare.pair_points``: per point d = ln(new / old) and the variance v both
    runs' processes allot it): ``sampled`` = Σv / Σd² (at 1 or more they allow for every
    observed move); ``run_sd``, the run-level sd beyond it (``intervals.run_variance``):
    what a whole run shares (the other tenant, what of a cache stays in L3) and no process
    inside a run samples; ``included``, the run-level sd the newer version's intervals
    carry (its rows' ``ratio_run_sd``; None before they did). None where no point has
    intervals over processes in both."""
    points = compare.pair_points(stage, old, new)
    carried = new.frame["ratio_run_sd"].dropna() if "ratio_run_sd" in new.frame else ()
    included = float(pd.Series(carried).median()) if len(carried) else None
    if not points:
        return {"points": 0, "sampled": None, "run_sd": None, "included": included}
    observed = sum(d2 for d2, _ in points)
    return {"points": len(points),
            "sampled": sum(v for _, v in points) / observed if observed else math.inf,
            "run_sd": math.sqrt(run_variance(points)), "included": included}


def track_record(root: Path, key: str, stage: str) -> list[dict]:
    """Every version of a timing stage that has an earlier one made with the same code,
    config and hardware (``compare.comparable``), oldest first: {"old", "new"} versions,
    their ``pair_summary`` and ``run_level``. How often the intervals held on the next
    run, each time the register can tell, and how much of the between-run variance they
    sample; a pair whose retained copy cannot be read is left out (``inferlab verify``
    names it)."""
    register = Register(root, key)
    found = []
    for entry in register.history(stage):
        previous = compare.comparable(register, stage, entry)
        if previous is None:
            continue
        try:
            old, new = (compare.table_of(register, stage, e) for e in (previous, entry))
        except (OSError, ValueError):
            continue
        level = run_level(stage, old, new)
        found.append({"old": previous["version"], "new": entry["version"],
                      **pair_summary(compare.differences(stage, old, new)),
                      "sampled": level["sampled"], "run_sd": level["run_sd"],
                      "included": level["included"]})
    return found


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{format_value(x * 100)} %"


def record_table(record: list[dict]) -> dict:
    """``track_record`` as the report's (and ``inferlab history --record``'s) table."""
    rows = []
    for r in record:
        inside = (f"{r['inside']} of {r['judged']} ({r['inside'] / r['judged']:.0%})"
                  if r["judged"] else "—")
        rows.append({"noisy": False, "cells": [
            f"{r['old']} → {r['new']}", str(r["points"]), inside, _pct(r["median_diff"]),
            _pct(r["max_diff"]), _pct(r["median_halfwidth"]), _share(r.get("sampled")),
            _pct(r.get("run_sd")), _pct(r.get("included"))]})
    return {"columns": ["versions", "paired ratios", "each inside the other's 95 % interval",
                        "median |difference|", "largest", "median half-width",
                        "between-run variance their processes sample",
                        "run-level sd beyond it", "run-level sd in the newer intervals"],
            "rows": rows}


def _share(x: float | None) -> str:
    """A ``run_level`` share: "all" at 1 or more (the intervals allow for every move)."""
    return "—" if x is None else "all" if x >= 1 else f"{x:.0%}"
