"""The one error rule of the numerics tests: flash-attention's, with its absolute floor.

flash-attention's tests (``tests/test_flash_attn.py``) accept a low-precision output when
its error against a higher-precision reference is at most twice the error of a plain
implementation in the same precision, plus ``fwd_atol = 2 * (out_ref + 0.3 - 0.3 -
out_ref).abs().max()``: twice the rounding of one add and one subtract in the output's
dtype, i.e. a couple of ulps of the output's magnitude.

Why the floor: where the plain implementation's error is itself about one ulp (a short
softmax, one split), "twice naive" decides by which SIMD kernel ATen picked, not by
whether the code is right (under ``ATEN_CPU_CAPABILITY=avx2`` one split erred 2.97e-7
against naive's 1.39e-7). The floor keeps that a pass and stays far below any real error
(a key dropped from a chunk moves the output by a tenth).
"""

from __future__ import annotations

import pytest
import torch

from inferlab.algorithms.attention import naive_attention

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                   reason="needs a CUDA device; this machine has none")


def max_abs_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest absolute difference, taken in float64."""
    return (out.double() - ref.double()).abs().max().item()


def rounding_floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """flash-attention's ``fwd_atol``: twice the rounding of ref + 0.3 - 0.3 in ``dtype``."""
    low = ref.to(dtype)
    return 2 * (low + 0.3 - 0.3 - low).abs().max().item()


def naive_bound(naive_err: float, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """The most error an output in ``dtype`` may have: twice naive's, plus the floor."""
    return 2 * naive_err + rounding_floor(ref, dtype)


def naive_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> tuple[torch.Tensor, float]:
    """Naive attention in float64 (the reference) and naive's own error in q's dtype."""
    ref = naive_attention(q.double(), k.double(), v.double(), causal=causal, scale=scale)
    return ref, max_abs_err(naive_attention(q, k, v, causal=causal, scale=scale), ref)


def assert_as_exact_as_naive(out: torch.Tensor, ref: torch.Tensor, naive_err: float,
                             label: object = "") -> None:
    """``out`` (in its own dtype) errs against ``ref`` at most ``naive_bound``."""
    err, bound = max_abs_err(out, ref), naive_bound(naive_err, ref, out.dtype)
    assert err <= bound, (f"{label}: error {err:.3g} > 2 x naive {naive_err:.3g} + floor "
                          f"{bound - 2 * naive_err:.3g} ({out.dtype})")
