"""Partial results over subsets of the keys, the exact merge rule, and split-KV decoding.

The chapter's partial result over a set of keys J is the triple (m, l, o): the running
maximum, the normaliser and the unnormalised accumulator of the online softmax
(``inferlab.algorithms.attention``). Two partials over disjoint key sets merge exactly
(``merge_partials``), in any order or grouping, which is what lets a kernel split the keys
across processors: FlashDecoding (``splitkv_decode``) for one query against a long cache.

All tensors are ``(B, H, T, D)``; partials are float32 for fp16/bf16/fp32 inputs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from inferlab.algorithms.attention import accumulation_dtype
from inferlab.algorithms.shapes import check_inputs, check_positive_int


class Partial(NamedTuple):
    """The chapter's partial result over a subset J of the keys, per query row.

    m: (B, H, T_q)    max over J of the scaled scores s_j; -inf where J is empty/masked.
    l: (B, H, T_q)    sum over J of exp(s_j - m); 0 where J is empty.
    o: (B, H, T_q, D) the *unnormalised* accumulator sum over J of exp(s_j - m) v_j
                      (the tiled loop's ``acc``); the output is o / l, see ``finalize``.

    Float32 for fp16/bf16/fp32 inputs, float64 for float64 inputs.
    """

    m: Tensor
    l: Tensor
    o: Tensor

    @property
    def lse(self) -> Tensor:
        """(B, H, T_q) log-sum-exp of the scaled scores, m + log l; -inf for empty rows."""
        return self.m + torch.log(self.l)  # -inf + log 0 = -inf: no NaN for empty rows


def _safe_max(m: Tensor) -> Tensor:
    """m with -inf replaced by 0, so exp(x - m) is exp(-inf) = 0, not exp(nan), on empty rows."""
    return torch.where(m == float("-inf"), torch.zeros_like(m), m)


def _check_mask(mask: Tensor | None, scores_shape: tuple[int, ...]) -> None:
    if mask is None:
        return
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool tensor (True = key attended); got {got}")
    try:
        if torch.broadcast_shapes(mask.shape, scores_shape) != scores_shape:
            raise RuntimeError
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                         f"(B, H, T_q, T_k) = {scores_shape}") from None


def partial_attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None,
                      mask: Tensor | None = None) -> Partial:
    """The partial (m, l, o) of q against the given keys only (no causal shortcut).

    q: (B, H, T_q, D); k, v: (B, H, T_k, D), T_k may be 0 (gives the empty partial).
    mask: optional bool, broadcastable to (B, H, T_q, T_k); True means the key is attended
    (SDPA's convention). Rows with no attended key get m=-inf, l=0, o=0.

    The two products run in the input dtype, as ``naive_attention``'s do (half-precision
    matmuls accumulate in float32 inside); the softmax state is float32. Nothing the
    size of the cache is copied or upcast: only scores and outputs are.
    """
    scale = check_inputs(q, k, v, scale=scale, min_keys=0)
    B, H, T_q, D = q.shape
    _check_mask(mask, (B, H, T_q, k.shape[2]))
    acc_dtype = accumulation_dtype(q.dtype)
    if k.shape[2] == 0:  # amax of an empty row is an error, and the answer is known
        return Partial(q.new_full((B, H, T_q), float("-inf"), dtype=acc_dtype),
                       q.new_zeros((B, H, T_q), dtype=acc_dtype),
                       q.new_zeros((B, H, T_q, D), dtype=acc_dtype))
    s = (q @ k.transpose(-1, -2)).to(acc_dtype) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1)
    p = torch.exp(s - _safe_max(m)[..., None])
    return Partial(m=m, l=p.sum(dim=-1), o=(p.to(v.dtype) @ v).to(acc_dtype))


def merge_partials(a: Partial, b: Partial) -> Partial:
    """The exact merge rule: the partial over the union of two disjoint key sets.

    m = max(m_a, m_b); l = l_a e^(m_a - m) + l_b e^(m_b - m); o likewise. Associative and
    commutative (up to rounding), with the empty partial as identity, so key blocks may be
    merged in any order or grouping (the chapter's exercise 1).
    """
    if a.o.shape != b.o.shape or a.o.dtype != b.o.dtype:
        raise ValueError(f"b has o of shape {tuple(b.o.shape)} {b.o.dtype} but a has "
                         f"{tuple(a.o.shape)} {a.o.dtype}; partials of the same queries match")
    m = torch.maximum(a.m, b.m)
    m_safe = _safe_max(m)
    weight_a, weight_b = torch.exp(a.m - m_safe), torch.exp(b.m - m_safe)
    return Partial(m=m, l=a.l * weight_a + b.l * weight_b,
                   o=a.o * weight_a[..., None] + b.o * weight_b[..., None])


def finalize(p: Partial) -> Tensor:
    """The attention output o / l, (B, H, T_q, D), in the partial's dtype (float32 or 64).

    Rows that saw no attended key (l = 0) give 0, never NaN.
    """
    l_safe = torch.where(p.l == 0, torch.ones_like(p.l), p.l)  # o is 0 there already
    return p.o / l_safe[..., None]


def _chunk_partials(q: Tensor, k: Tensor, v: Tensor, start: int, n: int, size: int,
                    scale: float) -> Partial:
    """Partials of ``n`` equal chunks of ``size`` keys from key ``start``, batched.

    The chunks are a view of the cache, (B, H, n, size, D). When they tile the whole cache
    (a split count that divides it) the batched products read that view in place; a group
    that covers part of it is gathered once by the product, in the cache's own dtype.
    Returns m, l of shape (B, H, n, T_q) and o of shape (B, H, n, T_q, D).
    """
    acc_dtype = accumulation_dtype(q.dtype)
    k_c, v_c = (t[:, :, start:start + n * size].unflatten(2, (n, size)) for t in (k, v))
    s = (q.unsqueeze(2) @ k_c.transpose(-1, -2)).to(acc_dtype) * scale   # (B, H, n, T_q, size)
    m = s.amax(dim=-1)
    p = torch.exp(s - m[..., None])  # every chunk has a key: m is finite
    return Partial(m=m, l=p.sum(dim=-1), o=(p.to(v.dtype) @ v_c).to(acc_dtype))


def splitkv_decode(q: Tensor, k: Tensor, v: Tensor, splits: int,
                   scale: float | None = None) -> Tensor:
    """Split-KV (FlashDecoding) attention: exact, non-causal, for any number of queries.

    q: (B, H, T_q, D), typically T_q = 1; k, v: (B, H, T_k, D). The keys are cut into
    ``splits`` contiguous chunks with ``torch.tensor_split`` semantics: the first
    T_k % splits chunks hold one key more, down to one key per chunk. As the chapter
    built it, a fixed number of batched operations whatever the split count: the equal
    chunks are two batched views of the cache (the longer ones, the shorter ones), each
    done in one product for all its chunks (max, exponentials and sums per chunk), then
    one log-sum-exp merge over all chunks:

        m = max_j m_j;  l = sum_j l_j e^(m_j - m);  o = sum_j o_j e^(m_j - m);  out = o / l

    The same result as a left fold of ``merge_partials`` over the chunks' partials
    (tests/test_partials.py compares them). Returns q's dtype.
    """
    scale = check_inputs(q, k, v, scale=scale)
    splits = check_positive_int("splits", splits, upper=k.shape[2])
    size, longer = divmod(k.shape[2], splits)  # `longer` chunks of size + 1, then size
    groups = [(0, longer, size + 1), (longer * (size + 1), splits - longer, size)]
    # both groups always run (one may hold no chunk): the same operations for any count
    parts = [_chunk_partials(q, k, v, start, n, sz, scale) for start, n, sz in groups]
    m, l, o = (torch.cat(t, dim=2) for t in zip(*parts, strict=True))
    m_all = m.amax(dim=2, keepdim=True)
    weight = torch.exp(m - m_all)                                          # (B, H, n, T_q)
    merged = Partial(m=m_all.squeeze(2), l=(l * weight).sum(dim=2),
                     o=(o * weight[..., None]).sum(dim=2))
    return finalize(merged).to(q.dtype)

