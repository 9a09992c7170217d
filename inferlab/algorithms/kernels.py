"""Our own fused attention kernels in Triton, of tile sizes we choose and know.

``inferlab.algorithms.attention`` is the oracle in plain PyTorch; here the same algorithms
run fused, so the traffic model is checked at a tile the caller sets, not one a library
picked. Modelled on Triton's tutorial ``06-fused-attention`` (forward only, no autotune).

* ``flash_attention``: FlashAttention-2 forward (Dao 2023, Algorithm 1), one program per
  (tile of BLOCK_M queries, batch x head)::

      q = Q[tile]                                    # HEAD_DIM: D padded to a power of 2
      m_i, l_i, acc = -inf, 0, 0
      for each key tile wholly visible to every query of the tile:        # no mask
          s    = q @ k_tile^T * scale
          m'   = max(m_i, rowmax(s));  p = exp(s - m');  alpha = exp(m_i - m')
          l_i  = l_i * alpha + rowsum(p)
          acc  = acc * alpha + p @ v_tile
          m_i  = m'
      for each key tile straddling the diagonal (causal) or the end of the keys:
          the same, with s = -inf where key > query or key >= T_k        # masked
      O[tile] = acc / l_i

  Under ``causal`` the loop stops at the tile holding the tile's last query: key tiles
  wholly above the diagonal are never loaded, ``traffic.block_pairs`` counts the rest.

* ``flash_decode``: split-KV decoding (FlashDecoding, Dao et al. 2023) for one query per
  sequence, in two kernels::

      kernel 1, grid (B*H, splits): split j loops over its chunk of keys (the chunks of
          torch.tensor_split) in tiles of BLOCK_N with the online softmax above and
          writes its partial m_j, l_j, o_j (o unnormalised) to a float32 scratch buffer
      kernel 2, grid (B*H,): the chapter's merge rule,
          m = max_j m_j;  l = sum_j l_j e^(m_j - m);  o = sum_j o_j e^(m_j - m);  out = o / l

Inputs are float16, bfloat16 or float32 on a CUDA device; scores, softmax state and
accumulators are float32, the output has q's dtype. With ``TRITON_INTERPRET=1`` set
before import, the kernels run in Triton's interpreter on CPU tensors (slowly: the
tests); ``triton_status()`` says which applies. The first call for new compile-time
constants (dtype, HEAD_DIM, blocks, causal) compiles: time after a warm-up call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inferlab.algorithms.attention import TileStats
from inferlab.algorithms.partials import Partial
from inferlab.algorithms.shapes import check_inputs as _check_inputs
from inferlab.algorithms.shapes import check_positive_int as _check_positive_int

try:
    import triton
    import triton.language as tl
except ImportError:  # the kernels are an optional extra: pip install 'inferlab[kernels]'
    triton = None

__all__ = ["AVAILABLE", "triton_status", "flash_attention", "flash_attention_tiles",
           "flash_decode"]

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BLOCK_SIZES = (16, 32, 64, 128, 256)  # powers of two: tl.arange lengths, tl.dot >= 16
MAX_HEAD_DIM = 256


def _driver_error() -> str | None:
    """The first line of Triton's exception when its CUDA driver cannot start (a CUDA
    device present), else None."""
    if triton is None or INTERPRETED or not torch.cuda.is_available():
        return None
    try:  # the first use builds Triton's C helper with the system's compiler
        triton.runtime.driver.active.get_current_device()
    except Exception as exc:  # noqa: BLE001 - whatever broke, the kernels cannot launch
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return None


def triton_status(driver_error: str | None | bool = True) -> tuple[bool, str]:
    """(can the kernels run here, why or why not), for a row such as "not measured here".

    Whether the interpreter is on is read from the jitted kernels (``INTERPRETED``,
    below), not from today's environment: Triton decided it when this module loaded.
    ``driver_error``: the driver's error as already asked (``_driver_error``), or True to
    ask now.
    """
    if triton is None:
        return False, "triton is not installed (pip install 'inferlab[kernels]')"
    if INTERPRETED:
        return True, f"triton {triton.__version__} interpreter (TRITON_INTERPRET=1), CPU tensors"
    if not torch.cuda.is_available():
        return False, ("needs a CUDA device, or TRITON_INTERPRET=1 set before importing "
                       "inferlab.algorithms.kernels to run the interpreter on CPU tensors")
    first = _driver_error() if driver_error is True else driver_error
    if first is not None:
        return False, (f"triton {triton.__version__} cannot start its CUDA driver here: "
                       f"{first} (its C helper needs a C compiler and Python's "
                       "headers: e.g. apt-get install gcc python3-dev)")
    return True, f"triton {triton.__version__} on {torch.cuda.get_device_name()}"


# --------------------------------------------------------------------------- checks


def _check_runnable(q: Tensor) -> None:
    if triton is None or (not INTERPRETED and not torch.cuda.is_available()):
        raise RuntimeError(f"inferlab.algorithms.kernels cannot run here: {_STATUS_REASON}")
    if q.dtype not in DTYPES:
        raise ValueError(f"q has dtype {q.dtype}; the kernels take float16, bfloat16 or "
                         "float32 (use inferlab.algorithms.attention for float64)")
    if not INTERPRETED and q.device.type != "cuda":
        raise ValueError(f"q is on {q.device}; the compiled kernels need CUDA tensors "
                         "(set TRITON_INTERPRET=1 before import to run on the CPU)")
    if q.shape[3] > MAX_HEAD_DIM:
        raise ValueError(f"head dim D={q.shape[3]} is above {MAX_HEAD_DIM}, the largest "
                         "the kernels hold in one tile")


def _check_block(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value not in BLOCK_SIZES:
        raise ValueError(f"{name} must be one of {BLOCK_SIZES} (a power of two, at least "
                         f"16 for tl.dot); got {value!r}")
    return value


def _padded_head_dim(D: int) -> int:
    """HEAD_DIM: D rounded up to a power of two (tl.arange) and to 16 (tl.dot's K)."""
    return max(16, triton.next_power_of_2(D))


def _launch_options(BLOCK_M: int = 64) -> dict[str, int | bool]:
    # Tutorial 06's configurations: 4 warps for 64-query tiles, 8 for 128; untuned here.
    # FMA contraction stated, not defaulted: Triton 3.9 warns its default flips in 3.10.
    return {"num_warps": 4 if BLOCK_M <= 64 else 8, "num_stages": 3, "enable_fp_fusion": True}


def _dot_precision(dtype: torch.dtype) -> str:  # float32 in "ieee", not Triton's tf32
    return "ieee" if dtype == torch.float32 else "tf32"  # (tf32 breaks the 2x error rule)


# --------------------------------------------------------------------------- kernels

if triton is not None:

    @triton.jit
    def _attn_fwd_inner(acc, l_i, m_i, n_tiles, q, k_base, v_base, stride_kn, stride_vn,
                        offs_m, offs_d, lo, hi, T_k, scale,
                        MASK: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr,
                        D: tl.constexpr, DOT_PRECISION: tl.constexpr):
        """Online softmax over the key tiles [lo, hi); masked tiles set -inf scores."""
        d_ok = offs_d < D
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            kv_ok = d_ok[None, :]
            if MASK:
                kv_ok = kv_ok & (offs_n[:, None] < T_k)
            k = tl.load(k_base + offs_n[:, None] * stride_kn + offs_d[None, :],
                        mask=kv_ok, other=0.0)                              # (BLOCK_N, HEAD_DIM)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # (M, N)
            if MASK:
                keep = offs_n[None, :] < T_k
                if CAUSAL:
                    keep = keep & (offs_n[None, :] <= offs_m[:, None])
                s = tl.where(keep, s, float("-inf"))
            # Finite from the first tile on: it holds key 0, which every query sees.
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :],
                        mask=kv_ok, other=0.0)
            # p rounded to v's dtype for the tensor-core product, as FlashAttention-2 does.
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
            m_i = m_new
            n_tiles += 1
        return acc, l_i, m_i, n_tiles

    @triton.jit
    def _attn_fwd(Q, K, V, Out, Tiles, scale, T_q, T_k, H,
                  stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                  stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  HEAD_DIM: tl.constexpr, D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                  COUNT_TILES: tl.constexpr):
        start_m, pid_bh = tl.program_id(0), tl.program_id(1)
        b, h = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        q_ok = (offs_m[:, None] < T_q) & (offs_d[None, :] < D)
        q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt
                    + offs_d[None, :], mask=q_ok, other=0.0)               # (BLOCK_M, HEAD_DIM)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        n_tiles = tl.full([], 0, tl.int32)
        # Key tiles below full_hi need no mask; the loop ends at hi.
        full_hi = (T_k // BLOCK_N) * BLOCK_N
        hi = T_k
        if CAUSAL:  # key tile [n, n + BLOCK_N) is wholly visible iff n + BLOCK_N - 1 <= m0
            m0 = start_m * BLOCK_M
            full_hi = tl.minimum(full_hi, (m0 + 1) // BLOCK_N * BLOCK_N)
            hi = tl.minimum(hi, m0 + BLOCK_M)
        k_base = K + b * stride_kb + h * stride_kh
        v_base = V + b * stride_vb + h * stride_vh
        acc, l_i, m_i, n_tiles = _attn_fwd_inner(
            acc, l_i, m_i, n_tiles, q, k_base, v_base, stride_kt, stride_vt, offs_m, offs_d,
            0, full_hi, T_k, scale, False, CAUSAL, BLOCK_N, D, DOT_PRECISION)
        acc, l_i, m_i, n_tiles = _attn_fwd_inner(
            acc, l_i, m_i, n_tiles, q, k_base, v_base, stride_kt, stride_vt, offs_m, offs_d,
            full_hi, hi, T_k, scale, True, CAUSAL, BLOCK_N, D, DOT_PRECISION)
        out = acc / l_i[:, None]
        tl.store(Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot
                 + offs_d[None, :], out.to(Out.dtype.element_ty), mask=q_ok)
        if COUNT_TILES:  # debug output: key tiles this program visited
            tl.store(Tiles + pid_bh * tl.num_programs(0) + start_m, n_tiles)

    @triton.jit
    def _decode_split(Q, K, V, M, L, O, scale, S, H, SPLITS,
                      stride_qb, stride_qh, stride_kb, stride_kh, stride_kt,
                      stride_vb, stride_vh, stride_vt,
                      BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, D: tl.constexpr):
        """Partial (m, l, o) of one query against one split's chunk of keys."""
        pid_bh, split = tl.program_id(0), tl.program_id(1)
        b, h = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
        # torch.tensor_split: the first S % SPLITS chunks hold one key more.
        size, extra = S // SPLITS, S % SPLITS
        lo = split * size + tl.minimum(split, extra)
        hi = lo + size + (split < extra).to(tl.int32)
        offs_d = tl.arange(0, HEAD_DIM)
        d_ok = offs_d < D
        q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d, mask=d_ok, other=0.0)
        q = q.to(tl.float32)                                                 # (HEAD_DIM,)
        k_base = K + b * stride_kb + h * stride_kh
        v_base = V + b * stride_vb + h * stride_vh
        m_i = tl.full([], float("-inf"), tl.float32)
        l_i = tl.full([], 0.0, tl.float32)
        acc = tl.zeros([HEAD_DIM], tl.float32)
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_ok = offs_n < hi
            kv_ok = n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_base + offs_n[:, None] * stride_kt + offs_d[None, :], mask=kv_ok,
                        other=0.0)
            # One query row: a reduction, not tl.dot (whose M must be at least 16).
            s = tl.sum(q[None, :] * k.to(tl.float32), 1) * scale             # (BLOCK_N,)
            s = tl.where(n_ok, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 0))  # finite: every chunk has a key
            p = tl.exp(s - m_new)
            alpha = tl.exp(m_i - m_new)
            v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], mask=kv_ok,
                        other=0.0)
            l_i = l_i * alpha + tl.sum(p, 0)
            acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
            m_i = m_new
        part = pid_bh * SPLITS + split
        tl.store(M + part, m_i)
        tl.store(L + part, l_i)
        tl.store(O + part * D + offs_d, acc, mask=d_ok)

    @triton.jit
    def _decode_merge(M, L, O, Out, H, SPLITS, stride_ob, stride_oh,
                      BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr, D: tl.constexpr):
        """The merge rule over one query's partials, BLOCK_S partials at a time."""
        pid_bh = tl.program_id(0)
        b, h = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
        offs_d = tl.arange(0, HEAD_DIM)
        d_ok = offs_d < D
        m_i = tl.full([], float("-inf"), tl.float32)
        l_i = tl.full([], 0.0, tl.float32)
        acc = tl.zeros([HEAD_DIM], tl.float32)
        for start_s in range(0, SPLITS, BLOCK_S):  # one pass when SPLITS <= BLOCK_S
            offs_s = start_s + tl.arange(0, BLOCK_S)
            s_ok = offs_s < SPLITS
            part = pid_bh * SPLITS + offs_s
            m_j = tl.load(M + part, mask=s_ok, other=float("-inf"))
            l_j = tl.load(L + part, mask=s_ok, other=0.0)
            o_j = tl.load(O + part[:, None] * D + offs_d[None, :],
                          mask=s_ok[:, None] & d_ok[None, :], other=0.0)
            m_new = tl.maximum(m_i, tl.max(m_j, 0))  # finite: each block has a split
            weight = tl.exp(m_j - m_new)             # e^(m_j - m); 0 for the padding
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(l_j * weight, 0)
            acc = acc * alpha + tl.sum(o_j * weight[:, None], 0)
            m_i = m_new
        out = acc / l_i
        tl.store(Out + b * stride_ob + h * stride_oh + offs_d, out.to(Out.dtype.element_ty),
                 mask=d_ok)


# Triton reads TRITON_INTERPRET when @triton.jit runs (at import): ask what it made.
INTERPRETED = triton is not None and not isinstance(_attn_fwd, triton.runtime.JITFunction)
_DRIVER_ERROR = _driver_error()  # asked once: the first try builds Triton's C helper
AVAILABLE, _STATUS_REASON = triton_status(_DRIVER_ERROR)

# --------------------------------------------------------------------------- wrappers


def _launch_fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool, block_m: int, block_n: int,
                scale: float | None, count_tiles: bool) -> tuple[Tensor, Tensor | None]:
    scale = _check_inputs(q, k, v, causal=causal, scale=scale)
    _check_runnable(q)
    BLOCK_M, BLOCK_N = _check_block("block_m", block_m), _check_block("block_n", block_n)
    q, k, v = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v))
    B, H, T_q, D = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    grid = (triton.cdiv(T_q, BLOCK_M), B * H)
    tiles = torch.zeros(B * H, grid[0], dtype=torch.int32, device=q.device) \
        if count_tiles else None
    _attn_fwd[grid](
        q, k, v, out, tiles, scale, T_q, k.shape[2], H,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        CAUSAL=causal, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=_padded_head_dim(D), D=D,
        DOT_PRECISION=_dot_precision(q.dtype), COUNT_TILES=count_tiles,
        **_launch_options(BLOCK_M))
    return out, tiles


def flash_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                    block_m: int = 64, block_n: int = 64,
                    scale: float | None = None) -> Tensor:
    """Fused exact attention, FlashAttention-2 style, with tiles of block_m x block_n.

    q: (batch, heads, T_q, D); k, v: (batch, heads, T_k, D), T_k may differ from T_q
    unless causal (which needs T_q == T_k, query i seeing keys 0..i, as in
    ``inferlab.algorithms.attention``). float16, bfloat16 or float32; returns (B, H, T_q, D) in q's
    dtype. block_m (queries per program) and block_n (keys per inner step) are the
    kernel's BLOCK_M and BLOCK_N, each one of ``BLOCK_SIZES``. D up to 256, any value:
    it is padded to a power of two. scale defaults to 1/sqrt(D). Nothing is returned
    for a backward pass (no log-sum-exp).
    """
    return _launch_fwd(q, k, v, causal, block_m, block_n, scale, count_tiles=False)[0]


def flash_attention_tiles(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                          block_m: int = 64, block_n: int = 64,
                          scale: float | None = None) -> tuple[Tensor, TileStats]:
    """``flash_attention`` plus the (query tile, key tile) pairs its loops really ran.

    Same arguments and output. Counted in the kernel's loop by each program (query tile,
    batch x head), reported per batch and head like ``tiled_attention``'s. A debug
    variant compiled separately (COUNT_TILES): do not time it.
    """
    out, tiles = _launch_fwd(q, k, v, causal, block_m, block_n, scale, count_tiles=True)
    n_m, n_n = tiles.shape[1], triton.cdiv(k.shape[2], block_n)
    return out, TileStats(computed_pairs=int(tiles[0].sum()), total_pairs=n_m * n_n)


def flash_decode(q: Tensor, k: Tensor, v: Tensor, splits: int, block_n: int = 64,
                 scale: float | None = None) -> Tensor:
    """Split-KV (FlashDecoding) attention of one query per sequence: two fused kernels.

    q: (batch, heads, 1, D); k, v: (batch, heads, S, D), the cache. The S keys are cut
    into ``splits`` chunks with ``torch.tensor_split`` semantics (the first S % splits
    chunks hold one key more), 1 <= splits <= S; each chunk runs as its own program over
    tiles of block_n keys and writes a float32 partial (m, l, o); a second kernel merges
    the partials. Returns (B, H, 1, D) in q's dtype; float16, bfloat16 or float32.
    """
    m, l, o = _split_partials(q, k, v, splits, block_n, scale)
    B, H, SPLITS, D = o.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    _decode_merge[(B * H,)](
        m, l, o, out, H, SPLITS, out.stride(0), out.stride(1),
        BLOCK_S=min(triton.next_power_of_2(SPLITS), 64), HEAD_DIM=_padded_head_dim(D), D=D,
        **_launch_options())
    return out


def _split_partials(q: Tensor, k: Tensor, v: Tensor, splits: int, block_n: int,
                    scale: float | None) -> Partial:
    """Kernel 1 alone: split j's partial in row j, m, l (B, H, splits), o (B, H, splits, D)."""
    scale = _check_inputs(q, k, v, scale=scale)
    _check_runnable(q)
    if q.shape[2] != 1:
        raise ValueError(f"q must hold one query per sequence, (B, H, 1, D); got "
                         f"{tuple(q.shape)} (use flash_attention for more)")
    B, H, _, D = q.shape
    S = k.shape[2]
    SPLITS = _check_positive_int("splits", splits, upper=S)
    BLOCK_N = _check_block("block_n", block_n)
    q, k, v = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v))
    m = torch.empty(B, H, SPLITS, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    o = torch.empty(B, H, SPLITS, D, dtype=torch.float32, device=q.device)
    _decode_split[(B * H, SPLITS)](
        q, k, v, m, l, o, scale, S, H, SPLITS, q.stride(0), q.stride(1),
        *k.stride()[:3], *v.stride()[:3], BLOCK_N=BLOCK_N, HEAD_DIM=_padded_head_dim(D), D=D,
        **_launch_options())
    return Partial(m, l, o)


def not_timeable(device: str) -> dict | None:
    """None when the kernels can be timed on ``device``, else the row's status as data
    (``measurement.status``): unavailable, cause ``no_triton``, ``triton_driver`` (with
    Triton's own words) or ``no_cuda_device`` (the interpreter on CPU tensors is for tests,
    never timing)."""
    if device == "cuda" and AVAILABLE and not INTERPRETED:
        return None
    if triton is None:
        return {"status": "unavailable", "cause": "no_triton"}
    if _DRIVER_ERROR is not None:
        return {"status": "unavailable", "cause": "triton_driver", "reason": _DRIVER_ERROR}
    return {"status": "unavailable", "cause": "no_cuda_device"}
