"""Is a kernel's output exact? The one check of our Triton kernels' outputs at a stage's
sizes (``inexact``), before they are timed: flash-attention's rule, against float64."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inferlab.algorithms.attention import naive_attention

# an error this many units in the last place of the output's largest value is accepted
# even where naive attention happens to be exact (one key: out = v)
ULP_FLOOR = 2


def inexact(out: Tensor, q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
            scale: float | None = None) -> dict | None:
    """None when ``out``, our kernel's output for q, k, v, is as exact as attention can be
    in q's dtype; else the row's status as data: error, cause ``inexact``, ``max_error``
    (infinite for a non-finite output) and the ``error_bound`` it is over.

    Checked once per configuration at the stage's own sizes before it is timed: the
    interpreter tests small sizes, and on NVIDIA fp32 ``tl.exp`` and ``/`` compile to
    approximate instructions. The rule is flash-attention's: the largest error against
    float64 attention at most twice that of ``naive_attention`` in q's dtype, with a floor
    of ``ULP_FLOOR`` units in the last place of the reference's largest value; a
    non-finite output fails. q, out: (B, H, T_q, D).
    """
    ref = naive_attention(q.double(), k.double(), v.double(), causal=causal, scale=scale)
    if not torch.isfinite(out).all():
        return {"status": "error", "cause": "inexact", "max_error": math.inf,
                "error_bound": None}
    err = (out.double() - ref).abs().max().item()
    naive_err = (naive_attention(q, k, v, causal=causal, scale=scale).double() - ref).abs()
    naive_err = naive_err.max().item()
    floor = ULP_FLOOR * torch.finfo(q.dtype).eps * ref.abs().max().item()
    bound = max(2 * naive_err, floor)
    if err <= bound:
        return None
    return {"status": "error", "cause": "inexact", "max_error": err, "error_bound": bound}
