"""The series as the judged tables: prefill's and decode's points as the series stage
pools them (``results/{key}/series.csv``, its ``pooled`` rows), shaped as the stage's own
table, so that a check reads the pooled value and its confidence interval where it would
read one run's (traffic, claims, manuscript and the audit judge these)."""

from __future__ import annotations

import math
from dataclasses import replace

from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.artifacts import Table

SERIES = "series"
# the timing stages whose tables the series pools: the ones it reads
TIMED = STAGES[SERIES].reads


def missing(x) -> bool:
    """An empty cell as pandas reads it: None, NaN or pandas' NA."""
    try:
        return x is None or (isinstance(x, float) and math.isnan(x)) or str(x) == "<NA>"
    except (TypeError, ValueError):
        return False


def is_number(v) -> bool:
    """A finite int or float (not a bool): a value a rule or a pooling can compute with."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


# the columns a judged table gains from the series, beside the stage's own
VIEW_EXTRAS = ("runs", "processes", "ratio_runs", "pi_low_ms", "pi_high_ms", "ratio_pi_low",
               "ratio_pi_high",
               "causal_over_full_pi_low", "causal_over_full_pi_high", "run_sd", "ratio_run_sd",
               "run_sd_origin", "median_ms_spread", "ratio_spread", "median_ms_new",
               "in_latest", "version")


def view(series: Table, stage: str) -> Table:
    """``stage``'s points as the series pools them, in ``stage``'s own columns and types
    (``VIEW_EXTRAS`` beside them): what is judged instead of the latest run."""
    frame = series.frame
    pooled = frame[(frame["stage"] == stage) & (frame["kind"] == "pooled")]
    own = artifacts.columns(stage)
    kinds = {c: artifacts.column_type(stage, c) for c in own}
    kinds.update({c: artifacts.column_type("series", c) for c in VIEW_EXTRAS})
    records = [{c: (None if missing(r.get(c)) else r.get(c)) for c in kinds}
               for r in pooled.to_dict(orient="records")]
    return artifacts.frame_of(records, kinds)


def judged(evidence: dict) -> dict:
    """A stage's inputs with each timed stage's table replaced by the series' pooled view
    of it, referenced as the series artifact (its path, version and sha256): what traffic,
    claims and manuscript judge. Without a series (an older checkout's key) as they are."""
    found = evidence.get(SERIES)
    if found is None or found.data is None:
        return evidence
    return {**evidence, **{s: replace(found, data=view(found.data, s)) for s in TIMED}}
