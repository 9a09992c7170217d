"""Why a claim is not measurable here, as data: one kind of a fixed vocabulary and the
fields that say where (the column, the values missing, the stage, the seconds of budget
left). claims.json stores the cause; the words are the presentation's
(``inferlab.presentation.claim_text``).

A row that is not ``ok`` (``inferlab.measurement.status``: its status and cause columns)
leaves a sentence's value unmeasured for one of these reasons:

==================  ==============================================================
kind                when
==================  ==============================================================
not_in_grid         the grid has no row at the sentence's value (a length, a dtype,
                    a backend map the probe did not make)
dropped_by_budget   the point was dropped: the stage's time budget was spent
stopped_at_limit    the stage was stopped at its limit (or by SIGTERM) before it, or
                    before it took the row's readings (memory, the kernel: READINGS)
device_cannot       this device cannot run it: a CUDA-only check, a backend PyTorch
                    refuses here, out of memory, a dtype on a slow path, our kernel
                    inexact here
upstream_failed     the stage (or the stage it reads) did not run, cannot be read, or
                    its row failed (an exception, a killed worker)
too_few_runs        a between-run check with one run
not_physical        a value above its physical limit (a probe error)
not_applicable      every selected row has no value of the column (e.g. a refusal
                    kind where the backend ran)
premise_fails       a premise the check rests on (claims.yaml's ``premises``) does not
                    hold here: its own check is not reproduced here (its verdict,
                    value and interval), or a measurement refuted it on this machine
premise_unmeasured  a premise the check rests on has no check and no measurement
                    decided it on this machine: nothing here shows that it holds
==================  ==============================================================

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
