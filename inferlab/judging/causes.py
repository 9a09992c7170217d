"""Why a claim is not measurable here, as data: one kind of ``CAUSES`` and the fields that
say where (the column, the values missing, the stage, the seconds of budget left).
claims.json stores the cause; the words are ``inferlab.presentation.claim_text``'s.

A row that is not ``ok`` (``inferlab.measurement.status``) leaves a sentence's value
unmeasured for the kind its status and cause make (``ROW_CAUSES``); a value may also be
not in the grid, have too few runs (a between-run check with one run), be above its
physical limit (a probe error) or not apply (every selected row has no value of it).

``premise_fails`` and ``premise_unmeasured`` are not about a row: the rows may be all
there. They say that the quantity the check computes stands for the sentence only under
a premise that this machine's evidence (or a measurement made on it) contradicts, or that
nothing here measures, so no verdict is given: a premise counts as holding only where
something shows it.
"""

from __future__ import annotations

# the columns a timing row gets from its readings (inferlab.measurement.workers: memory and
# the kernel under the profiler, after the timings); empty in an ok row: not taken
READINGS = ("peak_extra_bytes", "memory_method", "kernel")
CAUSES = ("not_in_grid", "dropped_by_budget", "stopped_at_limit", "device_cannot",
          "upstream_failed", "too_few_runs", "not_physical", "not_applicable",
          "premise_fails", "premise_unmeasured")
# several values missing for different causes: the one named first is the most useful to
# the reader (a point a rerun with more budget would measure before one no grid has); a
# premise is no row's cause, so it is never among them
PRIORITY = ("dropped_by_budget", "stopped_at_limit", "upstream_failed", "device_cannot",
            "not_in_grid", "not_applicable", "too_few_runs", "not_physical")
# a row's status (and the cause column beside it) -> the kind of cause it is for a claim
ROW_CAUSES = {("dropped", "budget"): "dropped_by_budget",
              ("dropped", "slow_path"): "device_cannot",
              ("dropped", "killed"): "upstream_failed",
              ("stopped", None): "stopped_at_limit",
              ("unavailable", None): "device_cannot",
              ("oom", None): "device_cannot",
              ("error", "inexact"): "device_cannot",
              ("error", None): "upstream_failed"}


class NotMeasurable(Exception):
    """The check cannot be made here; ``cause`` is {"kind": one of CAUSES, ...fields}."""

    def __init__(self, kind: str, **fields):
        if kind not in CAUSES:
            raise ValueError(f"cause kind={kind!r} is not one of {CAUSES}")
        self.cause = {"kind": kind, **fields}
        super().__init__(f"{kind}: {fields}")


def row_cause(status: str | None, cause: str | None) -> str:
    """The kind a non-ok row's status and cause column make (``ROW_CAUSES``)."""
    return ROW_CAUSES.get((status, cause)) or ROW_CAUSES.get((status, None)) or "upstream_failed"


def primary(kinds) -> str:
    """The kind to name first among ``kinds`` (``PRIORITY``)."""
    found = set(kinds)
    return next(k for k in PRIORITY if k in found)
