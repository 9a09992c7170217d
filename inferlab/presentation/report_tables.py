"""The report's tables that every stage's view shares: an artifact's rows as formatted
cells (units in the headers, "—" where a column does not apply, nan/inf where a number
was computed so). A stage's own summaries are in its view (``inferlab.presentation.views``).
"""

from __future__ import annotations

import pandas as pd

from inferlab.core.pipeline import STAGES
from inferlab.evidence.artifacts import Table
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
