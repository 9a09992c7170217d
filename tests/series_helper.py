"""A series of one run, as the series stage pools it, for tests of the stages that read the
series (traffic, claims, manuscript) from a prefill or decode table they make up."""

from __future__ import annotations

import pandas as pd

from inferlab.evidence import artifacts
from inferlab.evidence.history import Version
from inferlab.measurement.pooling import RunLevel
from inferlab.stages.series import QUANTITIES, pooled

# the prior a first run carries (a made-up one here: 3 % run-level, 3 % process sd)
PRIOR = {k: RunLevel(0.03 ** 2, 100, "prior", ("a committed series",))
         for q in QUANTITIES for k in (q, f"process:{q}")}


def _table(stage: str, table) -> artifacts.Table:
    if isinstance(table, artifacts.Table):
        return table
    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
    cells = [{k: (None if pd.isna(v) else v) for k, v in r.items()}
             for r in frame.to_dict(orient="records")]
    return artifacts.decode(stage, artifacts.encode(stage, cells))


def series_rows(**tables) -> list[dict]:
    """``prefill=``/``decode=`` tables (Tables, DataFrames or row dicts; a list of them:
    several runs, oldest first) -> series rows."""
    rows = []
    for stage, runs in tables.items():
        runs = runs if isinstance(runs, list) and runs and not isinstance(runs[0], dict) \
            else [runs]
        versions = [Version({"version": i + 1, "sha256": f"{i:064x}",
                             "provenance": {"environment": {}}}, _table(stage, run))
                    for i, run in enumerate(runs)]
        rows += pooled(stage, versions, PRIOR if len(versions) == 1 else {})[0]
    return rows


def series_table(**tables) -> artifacts.Table:
    """The same as the series artifact reads back."""
    rows = series_rows(**tables)
    return artifacts.decode("series", artifacts.encode("series", [
        {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
        for r in rows]))
