"""The one check of attention inputs: q, k, v as (B, H, T, D) tensors, the mask flag, the
scale and the block and split counts. Our algorithms (``attention``, ``partials``,
``kernels``) call ``check_inputs`` and ``check_positive_int``.
"""

from __future__ import annotations

import math
from numbers import Real

from torch import Tensor


def check_inputs(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                 scale: float | None = None, min_keys: int = 1) -> float:
    """Validate q, k, v, causal and scale; return the scale to use. A ValueError names
    the tensor or argument and what is wrong."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-D tensor (B, H, T, D); got {shape}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{name} must have a floating dtype; got {t.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; q, k and v "
                             "must share a device")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} is {t.dtype} but q is {q.dtype}; q, k and v must share "
                             "a dtype")
        for axis, label in ((0, "batch B"), (1, "heads H"), (3, "head dim D")):
            if t.shape[axis] != q.shape[axis]:
                raise ValueError(f"{name} has {label}={t.shape[axis]} but q has "
                                 f"{q.shape[axis]}; shapes are (B, H, T, D)")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"k has {k.shape[2]} keys but v has {v.shape[2]}; they must match")
    if q.shape[2] < 1 or q.shape[3] < 1:
        raise ValueError(f"q must have at least one query and D >= 1; got {tuple(q.shape)}")
    if k.shape[2] < min_keys:
        raise ValueError(f"k must have at least {min_keys} key(s); got {k.shape[2]} "
                         "(partial_attention accepts an empty key set)")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool; got {causal!r}")
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError(f"causal=True needs T_q == T_k (query i sees keys 0..i); got "
                         f"T_q={q.shape[2]}, T_k={k.shape[2]}. Alignment of a rectangular "
                         "causal mask is ambiguous (SDPA: top-left), so it is refused")
    if scale is None:
        return 1.0 / math.sqrt(q.shape[3])
    if isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale) \
            or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0 (default 1/sqrt(D)); got {scale!r}")
    return float(scale)


def check_positive_int(name: str, value: object, upper: int | None = None) -> int:
    """``value`` as a block or split count: an int >= 1, at most ``upper`` (the keys)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be at most {upper} (the number of keys); got {value}")
    return value
