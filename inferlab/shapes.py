"""The one check of attention inputs: q, k, v as (B, H, T, D) tensors.

Our own algorithms (``inferlab.attention``, ``inferlab.kernels``) need the strict form;
the backend probe (``inferlab.backends``) only the loose one, because its job is to hand
PyTorch inputs that a backend may refuse (grouped heads, other head dims) and record why.
"""

from __future__ import annotations

from torch import Tensor


def check_qkv(q: Tensor, k: Tensor, v: Tensor, strict: bool = True) -> None:
    """ValueError naming the tensor and what is wrong.

    Always: three 4-D tensors (B, H, T, D) on one device. ``strict``: also floating, one
    dtype, the same B, H and D, and as many keys as values.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 4-D tensor (B, H, T, D); got {shape}")
        if strict and not t.dtype.is_floating_point:
            raise ValueError(f"{name} must have a floating dtype; got {t.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; q, k and v "
                             "must share a device")
        if not strict:
            continue
        if t.dtype != q.dtype:
            raise ValueError(f"{name} is {t.dtype} but q is {q.dtype}; q, k and v must share "
                             "a dtype")
        for axis, label in ((0, "batch B"), (1, "heads H"), (3, "head dim D")):
            if t.shape[axis] != q.shape[axis]:
                raise ValueError(f"{name} has {label}={t.shape[axis]} but q has "
                                 f"{q.shape[axis]}; shapes are (B, H, T, D)")
    if strict and k.shape[2] != v.shape[2]:
        raise ValueError(f"k has {k.shape[2]} keys but v has {v.shape[2]}; they must match")
