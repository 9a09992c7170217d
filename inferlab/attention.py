"""The attention algorithms of the chapter, in plain PyTorch: the oracle, not a kernel.

* ``naive_attention``: ordinary attention, materialising the ``T x T`` scores. Its
  memory passes are the ones ``traffic.naive_hbm_elements`` counts: one scaled score
  product, one masking pass if causal, a softmax, a product with ``V``. In float64 it is
  the reference every other implementation is checked against.
* ``tiled_attention``: the chapter's online softmax, literally (FlashAttention,
  Dao et al. 2022, Algorithm 1; the running normaliser is Milakov & Gimelshein 2018)::

      for each tile of BLOCK_Q queries:
          m_i, l_i, acc = -inf, 0, 0
          for each tile of BLOCK_K keys (skip tiles wholly in the future if causal):
              s    = q_tile @ k_tile^T * scale
              m'   = max(m_i, rowmax(s))
              p    = exp(s - m')
              l_i  = l_i * exp(m_i - m') + rowsum(p)
              acc  = acc * exp(m_i - m') + p @ v_tile
              m_i  = m'
          out_tile = acc / l_i

* ``tiled_attention_fast``: the same loop with fewer operations per block pair
  (the chapter's exercise 4).
* Partials: the triple ``(m, l, o)`` over a subset of keys, the exact merge rule, and
  split-KV decoding (FlashDecoding) built from them.

All tensors are ``(B, H, T, D)`` like ``torch.nn.functional.scaled_dot_product_attention``.
Half-precision inputs are accumulated in float32 and returned in their own dtype.
Causal masking requires ``T_q == T_k`` (query ``i`` sees keys ``0..i``): SDPA aligns a
rectangular causal mask top-left, FlashAttention-2 bottom-right, and rather than pick
one silently the functions refuse the ambiguous case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import NamedTuple

import torch
from torch import Tensor

from inferlab.shapes import check_qkv

__all__ = [
    "TILED",
    "TileStats",
    "Partial",
    "naive_attention",
    "tiled_attention",
    "tiled_attention_fast",
    "partial_attention",
    "merge_partials",
    "finalize",
    "splitkv_decode",
    "splitkv_decode_fold",
]

# --------------------------------------------------------------------------- checks


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                  scale: float | None = None, min_keys: int = 1) -> float:
    """Validate q, k, v, causal and scale for every entry point; return the scale to use."""
    check_qkv(q, k, v)
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
    return _check_scale(scale, q.shape[3])


def _check_scale(scale: float | None, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale) \
            or scale <= 0:
        raise ValueError(f"scale must be a finite number > 0 (default 1/sqrt(D)); got {scale!r}")
    return float(scale)


def _check_positive_int(name: str, value: object, upper: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be at most {upper} (the number of keys); got {value}")
    return value


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    # fp16/bf16 sums lose the small terms of a long row; float64 stays the reference.
    return torch.float64 if dtype == torch.float64 else torch.float32


def _future_keys(q_start: int, n_q: int, k_start: int, n_k: int, device) -> Tensor:
    """(n_q, n_k) bool, True where key index > query index (masked out under causal)."""
    q_idx = torch.arange(q_start, q_start + n_q, device=device)
    k_idx = torch.arange(k_start, k_start + n_k, device=device)
    return k_idx[None, :] > q_idx[:, None]


# --------------------------------------------------------------------------- ordinary


def naive_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                    scale: float | None = None) -> Tensor:
    """Ordinary attention: softmax(q kᵀ · scale [+ causal mask]) v, scores materialised.

    q: (B, H, T_q, D); k, v: (B, H, T_k, D); returns (B, H, T_q, D) in q's dtype.
    scale defaults to 1/sqrt(D). Computed in the input dtype throughout (no upcast), so
    its error in fp16 is the yardstick for the tiled versions.
    """
    scale = _check_inputs(q, k, v, causal=causal, scale=scale)
    B, H, T_q, D = q.shape
    T_k = k.shape[2]
    q3, k3, v3 = (t.reshape(B * H, -1, D) for t in (q, k, v))
    # beta=0 ignores the uninitialised input: one pass writes the scaled scores.
    scores = torch.baddbmm(q3.new_empty(B * H, T_q, T_k), q3, k3.transpose(1, 2),
                           beta=0, alpha=scale)
    if causal:
        scores.masked_fill_(_future_keys(0, T_q, 0, T_k, q.device), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.bmm(probs, v3).reshape(B, H, T_q, D)


# --------------------------------------------------------------------------- tiled


@dataclass(frozen=True)
class TileStats:
    """Block pairs (query tile, key tile) the loop computed, out of all that exist."""

    computed_pairs: int
    total_pairs: int

    @property
    def fraction(self) -> float:
        return self.computed_pairs / self.total_pairs


def _tile_range(causal: bool, q_start: int, q_end: int, k_start: int, k_end: int) -> str:
    """'skip' if the key tile is wholly in the future, 'mask' if it straddles, else 'full'."""
    if not causal or k_end - 1 <= q_start:
        return "full"
    return "skip" if k_start > q_end - 1 else "mask"


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                    block_q: int = 128, block_k: int = 128,
                    scale: float | None = None) -> tuple[Tensor, TileStats]:
    """Block-wise exact attention with the online softmax (the chapter's pseudocode).

    q: (B, H, T_q, D); k, v: (B, H, T_k, D). Returns the output (B, H, T_q, D) in q's
    dtype and the TileStats of the loop that ran. Lengths need not be multiples of the
    blocks. Under causal, key tiles wholly above the diagonal are skipped, not computed.
    """
    scale = _check_inputs(q, k, v, causal=causal, scale=scale)
    BLOCK_Q = _check_positive_int("block_q", block_q)
    BLOCK_K = _check_positive_int("block_k", block_k)
    acc_dtype = _accumulation_dtype(q.dtype)
    T_q, T_k = q.shape[2], k.shape[2]
    out = torch.empty_like(q)
    computed = total = 0
    for q0 in range(0, T_q, BLOCK_Q):
        q1 = min(q0 + BLOCK_Q, T_q)
        q_tile = q[:, :, q0:q1].to(acc_dtype)
        m_i = q_tile.new_full(q_tile.shape[:-1], float("-inf"))  # (B, H, n_q)
        l_i = q_tile.new_zeros(q_tile.shape[:-1])
        acc = torch.zeros_like(q_tile)                             # (B, H, n_q, D)
        for k0 in range(0, T_k, BLOCK_K):
            k1 = min(k0 + BLOCK_K, T_k)
            total += 1
            kind = _tile_range(causal, q0, q1, k0, k1)
            if kind == "skip":
                continue
            computed += 1
            s = q_tile @ k[:, :, k0:k1].to(acc_dtype).transpose(-1, -2) * scale
            if kind == "mask":
                s = s.masked_fill(_future_keys(q0, q1 - q0, k0, k1 - k0, q.device),
                                  float("-inf"))
            # Finite after the first key tile: key 0 is never in any query's future.
            m_new = torch.maximum(m_i, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            correction = torch.exp(m_i - m_new)
            l_i = l_i * correction + p.sum(dim=-1)
            acc = acc * correction[..., None] + p @ v[:, :, k0:k1].to(acc_dtype)
            m_i = m_new
        out[:, :, q0:q1] = (acc / l_i[..., None]).to(q.dtype)
    return out, TileStats(computed_pairs=computed, total_pairs=total)


def tiled_attention_fast(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                         block_q: int = 128, block_k: int = 128,
                         scale: float | None = None) -> tuple[Tensor, TileStats]:
    """``tiled_attention`` with fewer operations per block pair (chapter exercise 4).

    Same arguments, result, TileStats and exactness as ``tiled_attention``. Changes:

    * cast, scale and reshape q once, not once per block pair: the loop has no scale op;
    * batch and heads flattened to (B*H, T, D) so each product is one ``bmm``;
    * in place on the score tile (``sub_``, ``exp_``) and on the running state
      (``mul_``, ``add_``, ``baddbmm_`` for acc += p @ v): no new tensor per elementwise op;
    * ``amax``/``maximum`` write into buffers reused across key tiles.

    In a rough ad-hoc timing on a shared 2-core CPU (fp32, 12 heads, d=64,
    T=1024-4096) these took 10-30% off ``tiled_attention``'s time, the in-place ops
    being the largest single step. The prefill stage's measurement is the one to quote.

    Tried and dropped: folding log2(e) into q to use ``exp2`` (a little faster per
    element here, but rounding q * log2(e) adds error to the scores: with queries x40 one
    seeded fp32 case erred 8.9e-5 against naive's 3.1e-5, beyond the 2x rule); caching
    the diagonal-tile causal mask, and appending a column of ones to v so that p @ v
    also yields l (neither gained anything measurable here).
    """
    scale = _check_inputs(q, k, v, causal=causal, scale=scale)
    BLOCK_Q = _check_positive_int("block_q", block_q)
    BLOCK_K = _check_positive_int("block_k", block_k)
    B, H, T_q, D = q.shape
    acc_dtype = _accumulation_dtype(q.dtype)
    q3 = (q.to(acc_dtype) * scale).reshape(B * H, T_q, D)
    k3, v3 = (t.to(acc_dtype).reshape(B * H, -1, D) for t in (k, v))
    out = torch.empty_like(q3)
    computed = total = 0
    for q0 in range(0, T_q, BLOCK_Q):
        q1 = min(q0 + BLOCK_Q, T_q)
        out[:, q0:q1], n_computed, n_total = _fast_query_tile(q3[:, q0:q1], k3, v3, q0,
                                                               causal, BLOCK_K)
        computed, total = computed + n_computed, total + n_total
    return out.reshape(q.shape).to(q.dtype), TileStats(computed_pairs=computed,
                                                       total_pairs=total)


def _fast_query_tile(q_tile: Tensor, k3: Tensor, v3: Tensor, q0: int, causal: bool,
                     BLOCK_K: int) -> tuple[Tensor, int, int]:
    """One query tile of the fast loop. q_tile: (B*H, n_q, D), already multiplied by scale.

    Returns the tile's output (B*H, n_q, D) and the key tiles computed and visited.
    """
    n_q, T_k = q_tile.shape[1], k3.shape[1]
    m_i = q_tile.new_full(q_tile.shape[:2], float("-inf"))  # (B*H, n_q)
    m_new, row_max, l_i = torch.empty_like(m_i), torch.empty_like(m_i), torch.zeros_like(m_i)
    acc = torch.zeros_like(q_tile)
    computed = total = 0
    for k0 in range(0, T_k, BLOCK_K):
        k1 = min(k0 + BLOCK_K, T_k)
        total += 1
        kind = _tile_range(causal, q0, q0 + n_q, k0, k1)
        if kind == "skip":
            continue
        computed += 1
        s = torch.bmm(q_tile, k3[:, k0:k1].transpose(1, 2))
        if kind == "mask":
            s.masked_fill_(_future_keys(q0, n_q, k0, k1 - k0, s.device), float("-inf"))
        torch.maximum(m_i, torch.amax(s, dim=-1, out=row_max), out=m_new)
        p = s.sub_(m_new.unsqueeze(-1)).exp_()
        correction = m_i.sub_(m_new).exp_()  # m_i's old value is not needed after this
        l_i.mul_(correction).add_(p.sum(dim=-1))
        acc.mul_(correction.unsqueeze(-1)).baddbmm_(p, v3[:, k0:k1])
        m_i, m_new = m_new, m_i
    return acc.div_(l_i.unsqueeze(-1)), computed, total


# The two plain-PyTorch tilings by the name rows and configs give them.
TILED = {"tiled": tiled_attention, "tiled_fast": tiled_attention_fast}


# --------------------------------------------------------------------------- partials


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
    scale = _check_inputs(q, k, v, scale=scale, min_keys=0)
    B, H, T_q, D = q.shape
    _check_mask(mask, (B, H, T_q, k.shape[2]))
    acc_dtype = _accumulation_dtype(q.dtype)
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
    for name, p in (("a", a), ("b", b)):
        if not isinstance(p, Partial):
            raise ValueError(f"{name} must be a Partial; got {type(p).__name__}")
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
    if not isinstance(p, Partial):
        raise ValueError(f"p must be a Partial; got {type(p).__name__}")
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
    acc_dtype = _accumulation_dtype(q.dtype)
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

    ``splitkv_decode_fold`` is the same result as a left fold of ``merge_partials`` over
    the chunks (the reference the tests compare with). Returns q's dtype.
    """
    scale = _check_inputs(q, k, v, scale=scale)
    splits = _check_positive_int("splits", splits, upper=k.shape[2])
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


def splitkv_decode_fold(q: Tensor, k: Tensor, v: Tensor, splits: int,
                        scale: float | None = None) -> Tensor:
    """``splitkv_decode`` as a left fold: one ``partial_attention`` per chunk, merged one
    at a time (a Python loop whose cost grows with the split count: the reference)."""
    _check_inputs(q, k, v, scale=scale)
    splits = _check_positive_int("splits", splits, upper=k.shape[2])
    chunks = zip(k.tensor_split(splits, dim=2), v.tensor_split(splits, dim=2), strict=True)
    merged = None
    for k_chunk, v_chunk in chunks:
        part = partial_attention(q, k_chunk, v_chunk, scale=scale)
        merged = part if merged is None else merge_partials(merged, part)
    return finalize(merged).to(q.dtype)
