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
The partial results, the merge rule and split-KV decoding are ``inferlab.algorithms.partials``.

All tensors are ``(B, H, T, D)`` like ``torch.nn.functional.scaled_dot_product_attention``.
Half-precision inputs are accumulated in float32 and returned in their own dtype.
Causal masking requires ``T_q == T_k`` (query ``i`` sees keys ``0..i``): SDPA aligns a
rectangular causal mask top-left, FlashAttention-2 bottom-right, and rather than pick
one silently the functions refuse the ambiguous case.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from inferlab.algorithms.shapes import check_inputs, check_positive_int


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype partial sums are kept in for inputs of ``dtype``."""
    # fp16/bf16 sums lose the small terms of a long row; float64 stays the reference.
    return torch.float64 if dtype == torch.float64 else torch.float32


def _future_keys(q_start: int, n_q: int, k_start: int, n_k: int, device) -> Tensor:
    """(n_q, n_k) bool, True where key index > query index (masked out under causal)."""
    q_idx = torch.arange(q_start, q_start + n_q, device=device)
    k_idx = torch.arange(k_start, k_start + n_k, device=device)
    return k_idx[None, :] > q_idx[:, None]


def naive_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                    scale: float | None = None) -> Tensor:
    """Ordinary attention: softmax(q kᵀ · scale [+ causal mask]) v, scores materialised.

    q: (B, H, T_q, D); k, v: (B, H, T_k, D); returns (B, H, T_q, D) in q's dtype.
    scale defaults to 1/sqrt(D). Computed in the input dtype throughout (no upcast), so
    its error in fp16 is the yardstick for the tiled versions.
    """
    scale = check_inputs(q, k, v, causal=causal, scale=scale)
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
    scale = check_inputs(q, k, v, causal=causal, scale=scale)
    BLOCK_Q = check_positive_int("block_q", block_q)
    BLOCK_K = check_positive_int("block_k", block_k)
    acc_dtype = accumulation_dtype(q.dtype)
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

    The prefill stage's measurement is the one to quote for what they save. Not done:
    folding log2(e) into q for ``exp2`` (rounding q * log2(e) put one seeded fp32 case with
    queries x40 at 8.9e-5 against naive's 3.1e-5, beyond the 2x rule).
    """
    scale = check_inputs(q, k, v, causal=causal, scale=scale)
    BLOCK_Q = check_positive_int("block_q", block_q)
    BLOCK_K = check_positive_int("block_k", block_k)
    B, H, T_q, D = q.shape
    acc_dtype = accumulation_dtype(q.dtype)
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
