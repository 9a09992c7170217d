"""A row's status as data: an enum, the cause of anything but ``ok``, and the external
text that came with it, never our prose (the report and the CLI say it in words).

Causes: oom ``memory``; unavailable ``backend_refused`` (``reason``: PyTorch's words, if
any), ``no_cuda_build``, ``no_cuda_device``, ``not_on_cuda`` (a CUDA-only kernel),
``no_triton`` or ``triton_driver`` (``reason``: Triton's exception's first line); error
``exception`` (``reason``: its first line) or ``inexact`` (our kernel's ``max_error``
against float64 over ``error_bound``, ``exactness.inexact``); dropped ``budget``
(``budget_left_s``), ``slow_path`` (the probe found the dtype's matmul on a slow path) or
``killed`` (the out-of-memory killer, mostly); stopped ``step_limit`` (the stage's limit
or SIGTERM came first).

Torch-free: the artifact reader uses it to read an older table, whose status was one
string ("dropped: 0.0 s of the stage budget left for this worker").
"""

from __future__ import annotations

import re

STATUSES = ("ok", "oom", "unavailable", "error", "dropped", "stopped")
CAUSES = {"oom": ("memory",),
          "unavailable": ("backend_refused", "no_cuda_build", "no_cuda_device", "not_on_cuda",
                          "no_triton", "triton_driver"),
          "error": ("exception", "inexact"),
          "dropped": ("budget", "slow_path", "killed"), "stopped": ("step_limit",)}
# the columns a status may carry beside status and cause
FIELDS = ("reason", "budget_left_s", "max_error", "error_bound")


def status_fields(status: str | dict) -> dict:
    """The harness's status string ("ok", "oom", "unavailable: <PyTorch's words>", "error:
    <exception's first line>") as the artifact's columns, the one place that splits it;
    or a status already as columns (a backend's refusal, an inexact kernel), checked."""
    if isinstance(status, dict):
        causes = CAUSES.get(status.get("status"), ())
        if status.get("cause") not in causes or set(status) - {"status", "cause", *FIELDS}:
            raise ValueError(f"status={status!r} is not a status with one of its causes "
                             f"{causes} and fields of {FIELDS}")
        return dict(status)
    kind, _, said = status.partition(": ")
    if kind == "unavailable":
        return {"status": "unavailable", "cause": "backend_refused", "reason": said}
    if kind == "error":
        return {"status": "error", "cause": "exception", "reason": said}
    if kind == "oom":
        return {"status": "oom", "cause": "memory"}
    if kind != "ok":
        raise ValueError(f"status={status!r} is not a case's status (ok, oom, "
                         "'unavailable: <why>', 'error: <message>')")
    return {"status": "ok"}


_LEFT = re.compile(r"(\d+(?:\.\d+)?) s of the stage budget left")


def from_legacy(status: str) -> dict:
    """A status written before it was data (schema versions 1-3) as today's columns."""
    kind, _, said = status.partition(": ")
    if kind != "dropped":
        return status_fields(status)
    if "slow path" in said:
        return {"status": "dropped", "cause": "slow_path"}
    if "killed" in said:
        return {"status": "dropped", "cause": "killed"}
    left = _LEFT.search(said)
    return {"status": "dropped", "cause": "budget",
            "budget_left_s": float(left.group(1)) if left else None}
