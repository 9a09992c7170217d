"""The analytic main-memory traffic model of direct and tiled attention, and the decode model.

Counts are in *elements* per head and per sequence (multiply by the element size
for bytes), for the forward pass of inference (no log-sum-exp is written for a
backward pass). A tile is assumed to stay in on-chip memory for its whole life:
that is what a fused kernel does and what an unfused, framework-level tiling does
not (chapter, "What it saves: traffic").

The counting (T tokens, head dimension d, query tile B_q, key tile B_k = B_q):

Direct ("naive") attention, ``softmax(mask(scale·Q Kᵀ)) V``:

=============================  =====================  ==========
term                           tensor, direction      elements
=============================  =====================  ==========
score product reads            Q read, K read         2·T·d
score product writes           S written once         T²
  (the scale is applied in the product's epilogue, as a GEMM's ``alpha``)
causal mask (causal only)      S read, S written      2·T²
  (the mask is generated from indices; a stored boolean mask would add T² reads)
softmax                        S read, P written      2·T²
output product                 P read, V read         T² + T·d
output                         O written              T·d
=============================  =====================  ==========

so ``naive = 4·T·d + 4·T²`` for full attention and ``4·T·d + 6·T²`` for causal.

Tiled (fused) attention: Q is read once and O written once (``2·T·d``); the
K and V tiles are read once for every (query tile, key tile) pair the kernel
computes, ``2·d·Σ keys visited``. Full attention visits all T keys for each of the
T/B_q query tiles, ``2·T²·d/B_q``; causal attention skips tiles wholly above the
diagonal, so with B_k = B_q query tile i visits (i + 1)·B_q keys and the sum is
``T²·d/B_q + T·d``. Hence ``tiled = 2·T²·d/B_q + 2·T·d`` (full) and
``T²·d/B_q + 3·T·d`` (causal).

The ratio naive/tiled tends to ``6·B_q/d`` for causal attention (the chapter's
exercise 3) and to ``2·B_q/d`` for full attention. For d = 64, B_q = 128 the causal
counting gives 9.09, 10.32, 11.09, 11.52 at T = 1024, 2048, 4096, 8192: the
chapter's printed 9.1, 10.3, 11.1, 11.5. Full attention gives 3.78, 3.88, 3.94,
3.97. The chapter does not say which mask its figures assume; only the causal
counting reproduces them, so that is the one they correspond to.

Decode (exercise 7): one new query per sequence must read the whole K and V cache,
``2·batch·heads·cache_len·d`` elements; at a bandwidth of W bytes/s that is the
floor on the step's time. The chapter: 48 MiB (12 heads, d = 64, fp16, 16,384 keys)
at the sustainable bandwidth (six times the 50 GB/s it measured) is 170 µs.
"""

from __future__ import annotations

import math


def block_pairs(T_q: int, T_k: int, block_q: int, block_k: int, causal: bool) -> tuple[int, int]:
    """(computed, total) (query tile, key tile) pairs of a tiled attention pass.

    Causal masks are aligned top-left like ``scaled_dot_product_attention`` (query i
    sees keys 0..i), so causal requires ``T_q == T_k``. A key tile is computed when
    its first key is at or before the last query of the tile.
    """
    if causal and T_q != T_k:
        raise ValueError(f"causal requires T_q == T_k, got T_q={T_q}, T_k={T_k}")
    n_q, n_k = math.ceil(T_q / block_q), math.ceil(T_k / block_k)
    if not causal:
        return n_q * n_k, n_q * n_k
    computed = sum(min(n_k, math.ceil(min(T_q, (i + 1) * block_q) / block_k)) for i in range(n_q))
    return computed, n_q * n_k


def _keys_visited(T: int, block_q: int, block_k: int, causal: bool) -> int:
    """Sum over query tiles of the keys whose K and V tiles that query tile reads."""
    n_q = math.ceil(T / block_q)
    if not causal:
        return n_q * T
    return sum(
        min(T, math.ceil(min(T, (i + 1) * block_q) / block_k) * block_k) for i in range(n_q)
    )


def naive_hbm_elements(T: int, d: int, causal: bool = False) -> int:
    """Elements direct attention moves to and from main memory, per head and sequence.

    ``4·T·d`` (Q, K, V read, O written) plus the score passes: S written by the scaled
    product (T²), the causal mask's read and write of S (2·T², causal only), the
    softmax's read of S and write of P (2·T²) and the output product's read of P (T²).
    See the module docstring for the table.
    """
    score_passes = 6 if causal else 4
    return 4 * T * d + score_passes * T * T


def tiled_hbm_elements(
    T: int, d: int, block_q: int, block_k: int | None = None, causal: bool = False
) -> int:
    """Elements a fused tiled kernel moves to and from main memory, per head and sequence.

    Q read once and O written once (``2·T·d``), plus K and V (``2·d`` per key) read
    once for every (query tile, key tile) pair computed. ``block_k`` defaults to
    ``block_q``; it only matters for causal attention, through the diagonal tiles.
    """
    block_k = block_q if block_k is None else block_k
    return 2 * T * d + 2 * d * _keys_visited(T, block_q, block_k, causal)


def traffic_ratio(
    T: int, d: int, block_q: int, block_k: int | None = None, causal: bool = True
) -> float:
    """naive / tiled main-memory traffic; tends to 6·B_q/d (causal) or 2·B_q/d (full)."""
    naive = naive_hbm_elements(T, d, causal=causal)
    return naive / tiled_hbm_elements(T, d, block_q, block_k, causal=causal)


def implied_block_q(measured_ratio: float, T: int | None, d: int, causal: bool = True) -> float:
    """The query tile B_q for which the model's traffic ratio equals ``measured_ratio``.

    With ``T`` given, inverts the finite-T counting (B_k = B_q, T a multiple of B_q):
    causal ``B_q = T²·d / (naive/R − 3·T·d)``, full ``B_q = 2·T²·d / (naive/R − 2·T·d)``.
    With ``T=None``, uses the large-T limit of exercise 3: ``B_q = R·d/6`` (causal) or
    ``R·d/2`` (full). Returns ``math.inf`` when the ratio is at or above what any tile
    size can explain (the fused kernel would have to move less than Q, K, V and O once).
    """
    if T is None:
        return measured_ratio * d / (6 if causal else 2)
    tiled = naive_hbm_elements(T, d, causal=causal) / measured_ratio
    fixed = (3 if causal else 2) * T * d
    if tiled <= fixed:
        return math.inf
    return (1 if causal else 2) * T * T * d / (tiled - fixed)


def decode_cache_bytes(batch: int, heads: int, cache_len: int, d: int,
                       bytes_per_element: int) -> int:
    """Bytes one decode step must read from the KV cache: K and V, every head and key.

    The query and the output (``2·batch·heads·d`` elements) are negligible beside the
    cache and are not counted.
    """
    return 2 * batch * heads * cache_len * d * bytes_per_element


def decode_floor_time_us(cache_bytes: int, bandwidth_gbs: float) -> float:
    """The shortest time (µs) a decode step can take: reading ``cache_bytes`` at
    ``bandwidth_gbs`` (10⁹ bytes per second)."""
    return cache_bytes / (bandwidth_gbs * 1e9) * 1e6
