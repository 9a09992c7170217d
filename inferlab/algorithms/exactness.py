"""Is a kernel's output exact? The one check of our Triton kernels' outputs at a stage's
sizes (``inexact``), before they are timed: flash-attention's rule, against float64."""

from __future__ import annotations

import torch
from torch import Tensor

from inferlab.algorithms.attention import naive_attention

# an error this many units in the last place of the output's largest value is accepted
# even where naive attention happens to be exact (one key: out = v)
ULP_FLOOR = 2


def inexact(out: Tensor, q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
            scale: float | None = None) -> str | None:
    """None when ``out``, our kernel's output for q, k, v, is as exact as attention can be
    in q's dtype; else a row status ``"error: inexact ..."`` with the errors.

    Every configuration a stage times is checked once, at the stage's own sizes, before
    it is timed: the interpreter tests small sizes, and on NVIDIA fp32 ``tl.exp`` and
    ``/`` compile to approximate instructions the interpreter does not have. The rule is
    flash-attention's: the largest error against float64 attention at most twice that of
    ``naive_attention`` in q's dtype (on q's device), with an absolute floor of
    ``ULP_FLOOR`` units in the last place of the reference's largest value. A non-finite
    output always fails. q: (B, H, T_q, D); out: (B, H, T_q, D).
    """
    ref = naive_attention(q.double(), k.double(), v.double(), causal=causal, scale=scale)
    if not torch.isfinite(out).all():
        return "error: inexact on this device: non-finite output"
    err = (out.double() - ref).abs().max().item()
    naive_err = (naive_attention(q, k, v, causal=causal, scale=scale).double() - ref).abs()
    naive_err = naive_err.max().item()
    floor = ULP_FLOOR * torch.finfo(q.dtype).eps * ref.abs().max().item()
    if err <= max(2 * naive_err, floor):
        return None
    return (f"error: inexact on this device: max error {err:.3g} against float64, over "
            f"twice naive attention's {naive_err:.3g} in {str(q.dtype).removeprefix('torch.')} "
            f"and over the floor {floor:.3g} ({ULP_FLOOR} ulps)")
