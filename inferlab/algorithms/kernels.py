"""Our own fused attention kernels in Triton, of tile sizes we choose and know.

``inferlab.algorithms.attention`` is the oracle in plain PyTorch; here the same algorithms
run fused, so the traffic model is checked at a tile the caller sets, not one a library
picked. Modelled on Triton's tutorial ``06-fused-attention`` (forward only).

* ``flash_attention``: FlashAttention-2 forward (Dao 2023, Algorithm 1), one program per
  (batch x head, tile of BLOCK_M queries)::

      q = Q[tile]                                    # HEAD_DIM: D padded to a power of 2
      m_i, l_i, acc = -inf, 0, 0                     # m_i in log2 units of scaled scores
      for each key tile wholly visible to every query of the tile:        # no mask
          s    = q @ k_tile^T
          m'   = max(m_i, rowmax(s) * c);  p = 2^(s * c - m');  alpha = 2^(m_i - m')
          l_i  = l_i * alpha + rowsum(p)
          acc  = acc * alpha + p @ v_tile
          m_i  = m'
      for each key tile straddling the diagonal (causal) or the end of the keys:
          the same, with s = -inf where key > query or key >= T_k        # masked
      O[tile] = acc / l_i

  c = scale * log2(e): e^(scale*s) = 2^(c*s), so one multiply-add and the exp2 the
  hardware has (Triton's tutorial, FlashAttention-3). Under ``causal`` the loop stops at
  the tile holding the tile's last query: key tiles wholly above the diagonal are never
  loaded (``traffic.block_pairs`` counts the rest), and only the tiles that cross the
  diagonal pay for the mask. The query tiles are launched longest first under causal (the
  last tile has the most key tiles), so the short ones fill the last wave.
  The launch configuration (``PrefillConfig``: tiles, warps, pipeline stages) is one of
  ``prefill_configs``, the list ``inferlab tune`` times on a GPU.

* ``flash_decode``: split-KV decoding (FlashDecoding, Dao et al. 2023) for a few queries
  per sequence (one, or the G query heads that share a key/value head), in two kernels::

      kernel 1, grid (B*H, splits): split j loops over its chunk of keys (the chunks of
          torch.tensor_split) in tiles of BLOCK_N, its loads pipelined (tl.range's
          num_stages), with the online softmax above and writes its partial m_j, l_j,
          o_j (o unnormalised) to a float32 scratch buffer; with one split it writes
          o / l itself and kernel 2 is not launched
      kernel 2, grid (B*H, queries), launched right after: the chapter's merge rule,
          m = max_j m_j;  l = sum_j l_j e^(m_j - m);  o = sum_j o_j e^(m_j - m);  out = o / l

  ``decode_splits`` chooses the split count from the cache length, the programs per
  split and the device's multiprocessors.

Inputs are float16, bfloat16 or float32 on a CUDA device; scores, softmax state and
accumulators are float32, the output has q's dtype. With ``TRITON_INTERPRET=1`` set
before import, the kernels run in Triton's interpreter on CPU tensors (slowly: the
tests); ``triton_status()`` says which applies. The first call for new compile-time
constants (dtype, HEAD_DIM, blocks, causal, warps, stages) compiles: time after a
warm-up call.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from torch import Tensor

from inferlab.algorithms.attention import TileStats
from inferlab.algorithms.shapes import check_inputs as _check_inputs
from inferlab.algorithms.shapes import check_positive_int as _check_positive_int

try:
    import triton
    import triton.language as tl
except ImportError:  # the kernels are an optional extra: pip install 'inferlab[kernels]'
    triton = None

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BLOCK_SIZES = (16, 32, 64, 128, 256)  # powers of two: tl.arange lengths, tl.dot >= 16
MAX_HEAD_DIM = 256
MAX_DECODE_QUERIES = 64  # queries per sequence flash_decode holds in one tile
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class PrefillConfig:
    """One launch of ``flash_attention``: its tiles, warps and software-pipeline stages."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    @property
    def name(self) -> str:
        """'BM128,BN64,w8,s3': what a row's ``kernel`` column says ran."""
        return f"BM{self.block_m},BN{self.block_n},w{self.num_warps},s{self.num_stages}"

    @classmethod
    def parse(cls, name: str) -> PrefillConfig:
        """The configuration ``name`` names."""
        found = re.fullmatch(r"BM(\d+),BN(\d+),w(\d+),s(\d+)", str(name))
        if found is None:
            raise ValueError(f"{name!r} is not a prefill configuration; expected one like "
                             f"{DEFAULT_PREFILL.name!r}")
        return cls(*map(int, found.groups()))

    def shared_bytes(self, head_dim: int, itemsize: int) -> int:
        """Shared memory the compiled kernel asks for on sm_90, as ptxas reports it: the
        query tile and ``num_stages`` buffers of a key and a value tile (the pipeline's
        copies in flight; tests/compile_kernels.py reads the compiled figure)."""
        return (self.block_m + 2 * self.num_stages * self.block_n) * head_dim * itemsize

    def registers_per_thread(self, head_dim: int) -> float:
        """Registers a thread needs, estimated: the float32 tile state, acc (BLOCK_M x
        HEAD_DIM) and the scores s and p (BLOCK_M x BLOCK_N each) over the program's
        threads, and 8 for the addresses and predicates of each copy in flight
        (calibrated on ptxas's counts at head dim 64)."""
        state = (self.block_m * head_dim + 2 * self.block_m * self.block_n) \
            / (32 * self.num_warps)
        return state + 8 * self.num_stages


# sm_90 (H100, H200): 228 KiB of shared memory per multiprocessor, of which one block may
# use 227 KiB (CUDA programming guide, compute capability 9.0); 255 registers a thread.
SM90_SHARED_BYTES = 227 * 1024
SM90_REGISTERS = 255
# At most this many estimated registers a thread: every configuration kept compiles
# without spilling at head dim 64 (ptxas: 179 or fewer; of those pruned, 250 or more).
MAX_REGISTERS_ESTIMATE = 192


def prefill_configs(head_dim: int = 64, itemsize: int = 2) -> tuple[PrefillConfig, ...]:
    """The configurations ``inferlab tune`` times: BLOCK_M 64/128 x BLOCK_N 32/64/128 x
    2-5 pipeline stages (Triton's tutorial's space), with one warp group (4 warps) per 64
    query rows, the shape of sm_90's wgmma (m64 a warp group: fewer warps hold two tiles'
    state each, more split one tile's products), less what does not fit sm_90 at this
    head dim (padded) and element size: shared memory over a block's limit, or registers
    over ``MAX_REGISTERS_ESTIMATE`` (it would spill). tests/compile_kernels.py reads both
    in the compiled code."""
    keep = []
    for block_m in (64, 128):
        for block_n in (32, 64, 128):
            for num_stages in (2, 3, 4, 5):
                c = PrefillConfig(block_m, block_n, block_m // 16, num_stages)
                if (c.shared_bytes(head_dim, itemsize) <= SM90_SHARED_BYTES
                        and c.registers_per_thread(head_dim) <= MAX_REGISTERS_ESTIMATE):
                    keep.append(c)
    return tuple(keep)


# Before tuning: tutorial 06's choice for Hopper at head dim 64 (128 x 64 tiles, 8 warps)
DEFAULT_PREFILL = PrefillConfig(128, 64, 8, 3)


@dataclass(frozen=True)
class DecodeConfig:
    """One launch of ``flash_decode``'s split kernel: keys a tile, warps, pipeline stages,
    and ``waves``, the split rule's target (``decode_splits``)."""

    block_n: int
    num_warps: int
    num_stages: int
    waves: int = 4

    @property
    def name(self) -> str:
        """'BN128,w4,s3': what a row's ``kernel`` column says ran at a fixed split count."""
        return f"BN{self.block_n},w{self.num_warps},s{self.num_stages}"

    @property
    def full_name(self) -> str:
        """'BN128,w4,s3,waves4': the name with the split rule's target (a chosen count)."""
        return f"{self.name},waves{self.waves}"

    @classmethod
    def parse(cls, name: str) -> DecodeConfig:
        """The configuration ``name`` or ``full_name`` names (waves 4 unless named)."""
        found = re.fullmatch(r"BN(\d+),w(\d+),s(\d+)(?:,waves(\d+))?", str(name))
        if found is None:
            raise ValueError(f"{name!r} is not a decode configuration; expected one like "
                             f"{DEFAULT_DECODE.full_name!r}")
        return cls(*(int(g) for g in found.groups() if g is not None))


def decode_configs(queries: int = 1) -> tuple[DecodeConfig, ...]:
    """The configurations ``inferlab tune`` times for ``queries`` queries per sequence:
    128 or 256 keys a tile, 4 or 8 warps, 2-4 pipeline stages, 2-8 waves of programs for
    the chosen split count; for a tile of queries (grouped heads) not 256 keys over 8
    warps, which ptxas caps at 128 registers a thread and spills (tests/compile_kernels.py)."""
    return tuple(DecodeConfig(n, w, s, waves) for n in (128, 256) for w in (4, 8)
                 for s in (2, 3, 4) for waves in (2, 4, 8)
                 if queries == 1 or (n, w) != (256, 8))


DEFAULT_DECODE = DecodeConfig(128, 4, 3, 4)
MIN_SPLIT_KEYS = 256   # fewer keys a split and its fixed costs (q, partial) dominate
WAVE_FILL = 0.85       # FlashAttention-2's num_splits_heuristic: the last wave this full


def decode_splits(cache_len: int, programs: int, sm_count: int, waves: int = 4) -> int:
    """The split count for a cache of ``cache_len`` keys when each split launches
    ``programs`` programs (batch x key/value heads): at most ``waves`` waves of
    ``sm_count`` programs and at least ``MIN_SPLIT_KEYS`` keys a split, the largest count
    whose last wave is at least ``WAVE_FILL`` full (else the fullest). One split when the
    programs already fill ``waves`` waves."""
    most = max(1, min(cache_len // MIN_SPLIT_KEYS, waves * sm_count // programs))

    def fill(splits: int) -> float:
        launched = programs * splits
        return launched / (math.ceil(launched / sm_count) * sm_count)

    full = [s for s in range(most, 0, -1) if fill(s) >= WAVE_FILL]
    return full[0] if full else max(range(1, most + 1), key=fill)


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


def triton_status() -> tuple[bool, str]:
    """(can the kernels run here, why or why not). Whether the interpreter is on is read
    from the jitted kernels (``INTERPRETED``): Triton decided it when this module loaded;
    the driver's error was asked then too (``_DRIVER_ERROR``)."""
    if triton is None:
        return False, "triton is not installed (pip install 'inferlab[kernels]')"
    if INTERPRETED:
        return True, f"triton {triton.__version__} interpreter (TRITON_INTERPRET=1), CPU tensors"
    if not torch.cuda.is_available():
        return False, ("needs a CUDA device, or TRITON_INTERPRET=1 set before importing "
                       "inferlab.algorithms.kernels to run the interpreter on CPU tensors")
    first = _DRIVER_ERROR
    if first is not None:
        return False, (f"triton {triton.__version__} cannot start its CUDA driver here: "
                       f"{first} (its C helper needs a C compiler and Python's "
                       "headers: e.g. apt-get install gcc python3-dev)")
    return True, f"triton {triton.__version__} on {torch.cuda.get_device_name()}"


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


def _launch_options(num_warps: int, num_stages: int) -> dict[str, int | bool]:
    # FMA contraction stated, not defaulted: Triton 3.9 warns its default flips in 3.10
    # (and q.k * c - m is meant to be one fused multiply-add).
    return {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": True}


def _dot_precision(dtype: torch.dtype) -> str:  # float32 in "ieee", not Triton's tf32
    return "ieee" if dtype == torch.float32 else "tf32"  # (tf32 breaks the 2x error rule)


if triton is not None:

    @triton.jit
    def _rows_ok(offs_n, offs_d, end, HEAD_DIM: tl.constexpr, D: tl.constexpr):
        """(BLOCK_N, HEAD_DIM) mask of the rows before ``end``; the head dim's padding only
        where there is some: a mask that varies along a row splits its load into 2-byte
        pieces, too small for cp.async, and Triton then does not pipeline it."""
        ok = offs_n[:, None] < end
        if HEAD_DIM != D:
            ok = ok & (offs_d[None, :] < D)
        return ok

    @triton.jit
    def _attn_fwd_inner(acc, l_i, m_i, n_tiles, q, k_base, v_base, stride_kn, stride_vn,
                        offs_m, offs_d, lo, hi, T_k, qk_scale,
                        MASK: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, D: tl.constexpr,
                        DOT_PRECISION: tl.constexpr):
        """Online softmax over the key tiles [lo, hi); masked tiles set -inf scores."""
        for start_n in tl.range(lo, hi, BLOCK_N):  # pipelined: the launch's num_stages
            offs_n = start_n + tl.arange(0, BLOCK_N)
            k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :]
            v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :]
            if MASK or HEAD_DIM != D:  # compile-time: whole tiles load unmasked
                kv_ok = _rows_ok(offs_n, offs_d, T_k, HEAD_DIM, D)
                k = tl.load(k_ptrs, mask=kv_ok, other=0.0)                # (BLOCK_N, HEAD_DIM)
            else:
                k = tl.load(k_ptrs)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)    # (BLOCK_M, BLOCK_N)
            if MASK:
                keep = offs_n[None, :] < T_k
                if CAUSAL:
                    keep = keep & (offs_n[None, :] <= offs_m[:, None])
                s = tl.where(keep, s, float("-inf"))
            # Finite from the first tile on: it holds key 0, which every query sees.
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            p = tl.math.exp2(s * qk_scale - m_new[:, None])  # one multiply-add, then exp2
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            if MASK or HEAD_DIM != D:
                v = tl.load(v_ptrs, mask=kv_ok, other=0.0)
            else:
                v = tl.load(v_ptrs)
            # p rounded to v's dtype for the tensor-core product, as FlashAttention-2 does.
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
            m_i = m_new
            n_tiles += 1
        return acc, l_i, m_i, n_tiles

    @triton.jit
    def _attn_fwd(Q, K, V, Out, Tiles, qk_scale, T_q, T_k, H,
                  stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                  stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  HEAD_DIM: tl.constexpr, D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                  COUNT_TILES: tl.constexpr):
        pid_bh, start_m = tl.program_id(0), tl.program_id(1)
        n_m = tl.num_programs(1)
        if CAUSAL:  # the blocks start in launch order: the longest query tiles first
            start_m = n_m - 1 - start_m
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
            0, full_hi, T_k, qk_scale, False, CAUSAL, BLOCK_N, HEAD_DIM, D, DOT_PRECISION)
        acc, l_i, m_i, n_tiles = _attn_fwd_inner(
            acc, l_i, m_i, n_tiles, q, k_base, v_base, stride_kt, stride_vt, offs_m, offs_d,
            full_hi, hi, T_k, qk_scale, True, CAUSAL, BLOCK_N, HEAD_DIM, D, DOT_PRECISION)
        out = acc / l_i[:, None]
        tl.store(Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot
                 + offs_d[None, :], out.to(Out.dtype.element_ty), mask=q_ok)
        if COUNT_TILES:  # debug output: key tiles this program visited
            tl.store(Tiles + pid_bh * n_m + start_m, n_tiles)

    @triton.jit
    def _decode_split(Q, K, V, M, L, O, Out, qk_scale, S, H, T_q, SPLITS,
                      stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                      stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
                      BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                      D: tl.constexpr, NUM_STAGES: tl.constexpr, DIRECT: tl.constexpr,
                      DOT_PRECISION: tl.constexpr):
        """Partial (m, l, o) of the T_q queries of one (batch, head) against one split's
        chunk of keys; with DIRECT (one split) their output o / l instead."""
        pid_bh, split = tl.program_id(0), tl.program_id(1)
        b, h = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
        # torch.tensor_split: the first S % SPLITS chunks hold one key more.
        size, extra = S // SPLITS, S % SPLITS
        lo = split * size + tl.minimum(split, extra)
        hi = lo + size + (split < extra).to(tl.int32)
        offs_g = tl.arange(0, BLOCK_G)
        offs_d = tl.arange(0, HEAD_DIM)
        g_ok = offs_g < T_q
        q_ok = _rows_ok(offs_g, offs_d, T_q, HEAD_DIM, D)
        q = tl.load(Q + b * stride_qb + h * stride_qh + offs_g[:, None] * stride_qt
                    + offs_d[None, :], mask=q_ok, other=0.0)
        k_base = K + b * stride_kb + h * stride_kh
        v_base = V + b * stride_vb + h * stride_vh
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)                    # (BLOCK_G, HEAD_DIM)
        # num_stages on the loop itself: Triton pipelines a loop's loads into asynchronous
        # copies when they feed a tl.dot, or when the loop carries its own num_stages.
        for start_n in tl.range(lo, hi, BLOCK_N, num_stages=NUM_STAGES):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_ok = offs_n < hi
            kv_ok = _rows_ok(offs_n, offs_d, hi, HEAD_DIM, D)
            k = tl.load(k_base + offs_n[:, None] * stride_kt + offs_d[None, :], mask=kv_ok,
                        other=0.0)                                           # (BLOCK_N, HEAD_DIM)
            if BLOCK_G == 1:  # one query row: a reduction (tl.dot's M is at least 16)
                s = tl.sum(q.to(tl.float32) * k.to(tl.float32), 1)[None, :]  # (1, BLOCK_N)
            else:
                s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)   # (BLOCK_G, BLOCK_N)
            s = tl.where(n_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # finite: every chunk has a key
            p = tl.math.exp2(s * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], mask=kv_ok,
                        other=0.0)
            if BLOCK_G == 1:
                acc = acc * alpha[:, None] \
                    + tl.sum(tl.trans(p) * v.to(tl.float32), 0)[None, :]
            else:
                acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None],
                             input_precision=DOT_PRECISION)
            m_i = m_new
        if DIRECT:
            out = acc / l_i[:, None]
            tl.store(Out + b * stride_ob + h * stride_oh + offs_g[:, None] * stride_ot
                     + offs_d[None, :], out.to(Out.dtype.element_ty), mask=q_ok)
        else:
            part = (pid_bh * SPLITS + split) * T_q + offs_g                  # (BLOCK_G,)
            tl.store(M + part, m_i * 0.6931471805599453, mask=g_ok)  # ln 2: natural log units
            tl.store(L + part, l_i, mask=g_ok)
            tl.store(O + part[:, None] * D + offs_d[None, :], acc, mask=q_ok)

    @triton.jit
    def _decode_merge(M, L, O, Out, H, T_q, SPLITS, stride_ob, stride_oh, stride_ot,
                      BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr, D: tl.constexpr):
        """The merge rule over one query's partials, BLOCK_S partials at a time."""
        pid_bh, g = tl.program_id(0), tl.program_id(1)
        b, h = (pid_bh // H).to(tl.int64), (pid_bh % H).to(tl.int64)
        offs_d = tl.arange(0, HEAD_DIM)
        d_ok = offs_d < D
        m_i = tl.full([], float("-inf"), tl.float32)
        l_i = tl.full([], 0.0, tl.float32)
        acc = tl.zeros([HEAD_DIM], tl.float32)
        for start_s in range(0, SPLITS, BLOCK_S):  # one pass when SPLITS <= BLOCK_S
            offs_s = start_s + tl.arange(0, BLOCK_S)
            s_ok = offs_s < SPLITS
            part = (pid_bh * SPLITS + offs_s) * T_q + g
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
        tl.store(Out + b * stride_ob + h * stride_oh + g * stride_ot + offs_d,
                 out.to(Out.dtype.element_ty), mask=d_ok)


# Triton reads TRITON_INTERPRET when @triton.jit runs (at import): ask what it made.
INTERPRETED = triton is not None and not isinstance(_attn_fwd, triton.runtime.JITFunction)
_DRIVER_ERROR = _driver_error()  # asked once: the first try builds Triton's C helper
AVAILABLE, _STATUS_REASON = triton_status()


def _launch_fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool, config: PrefillConfig,
                scale: float | None, count_tiles: bool) -> tuple[Tensor, Tensor | None]:
    scale = _check_inputs(q, k, v, causal=causal, scale=scale)
    _check_runnable(q)
    BLOCK_M = _check_block("block_m", config.block_m)
    BLOCK_N = _check_block("block_n", config.block_n)
    q, k, v = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v))
    B, H, T_q, D = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    grid = (B * H, triton.cdiv(T_q, BLOCK_M))
    tiles = torch.zeros(B * H, grid[1], dtype=torch.int32, device=q.device) \
        if count_tiles else None
    _attn_fwd[grid](
        q, k, v, out, tiles, scale * LOG2E, T_q, k.shape[2], H,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3],
        CAUSAL=causal, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=_padded_head_dim(D), D=D,
        DOT_PRECISION=_dot_precision(q.dtype), COUNT_TILES=count_tiles,
        **_launch_options(config.num_warps, config.num_stages))
    return out, tiles


def _prefill_config(block_m: int, block_n: int, num_warps: int | None,
                    num_stages: int) -> PrefillConfig:
    block_m, block_n = _check_block("block_m", block_m), _check_block("block_n", block_n)
    # 4 warps for a 64-query tile, 8 for 128 (tutorial 06), unless the caller says
    return PrefillConfig(block_m, block_n, num_warps or (4 if block_m <= 64 else 8), num_stages)


def flash_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                    block_m: int = 64, block_n: int = 64, scale: float | None = None,
                    num_warps: int | None = None, num_stages: int = 3) -> Tensor:
    """Fused exact attention, FlashAttention-2 style, with tiles of block_m x block_n.

    q: (batch, heads, T_q, D); k, v: (batch, heads, T_k, D), T_k may differ from T_q
    unless causal (which needs T_q == T_k, query i seeing keys 0..i, as in
    ``inferlab.algorithms.attention``). float16, bfloat16 or float32; returns (B, H, T_q, D) in q's
    dtype. block_m (queries per program) and block_n (keys per inner step) are the
    kernel's BLOCK_M and BLOCK_N, each one of ``BLOCK_SIZES``; num_warps (default 4 for
    block_m <= 64, else 8) and num_stages (copies in flight) the launch's. D up to 256,
    any value: it is padded to a power of two. scale defaults to 1/sqrt(D). Nothing is
    returned for a backward pass (no log-sum-exp). ``run_prefill`` takes a
    ``PrefillConfig`` instead.
    """
    config = _prefill_config(block_m, block_n, num_warps, num_stages)
    return _launch_fwd(q, k, v, causal, config, scale, count_tiles=False)[0]


def run_prefill(q: Tensor, k: Tensor, v: Tensor, causal: bool, config: PrefillConfig) -> Tensor:
    """``flash_attention`` launched as ``config`` says (the prefill stage's call)."""
    return _launch_fwd(q, k, v, causal, config, None, count_tiles=False)[0]


def flash_attention_tiles(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
                          block_m: int = 64, block_n: int = 64,
                          scale: float | None = None) -> tuple[Tensor, TileStats]:
    """``flash_attention`` plus the (query tile, key tile) pairs its loops really ran.

    Same arguments and output. Counted in the kernel's loop by each program (batch x
    head, query tile), reported per batch and head like ``tiled_attention``'s. A debug
    variant compiled separately (COUNT_TILES): do not time it.
    """
    config = _prefill_config(block_m, block_n, None, 3)
    out, tiles = _launch_fwd(q, k, v, causal, config, scale, count_tiles=True)
    n_m, n_n = tiles.shape[1], triton.cdiv(k.shape[2], block_n)
    return out, TileStats(computed_pairs=int(tiles[0].sum()), total_pairs=n_m * n_n)


def flash_decode(q: Tensor, k: Tensor, v: Tensor, splits: int, block_n: int = 128,
                 scale: float | None = None, num_warps: int = 4, num_stages: int = 3) -> Tensor:
    """Split-KV (FlashDecoding) attention of a few queries per sequence: two fused kernels.

    q: (batch, heads, T_q, D), T_q from 1 to ``MAX_DECODE_QUERIES``: one query per
    sequence, or grouped-query attention's G query heads of one key/value head as its
    T_q queries (``(B, H_kv * G, 1, D)`` viewed as ``(B, H_kv, G, D)``: each key and value
    is then read once for the G of them). No mask. k, v: (batch, heads, S, D), the cache.
    The S keys are cut into ``splits`` chunks with ``torch.tensor_split`` semantics (the
    first S % splits chunks hold one key more), 1 <= splits <= S; each chunk runs as its
    own program over tiles of block_n keys, num_stages of them in flight, and writes a
    float32 partial (m, l, o); a second kernel merges the partials. One split writes its
    output itself. Returns (B, H, T_q, D) in q's dtype; float16, bfloat16 or float32.
    """
    config = DecodeConfig(block_n, num_warps, num_stages)
    if splits == 1:  # (True and 1.0 too: _launch_split refuses them by name)
        return _launch_split(q, k, v, splits, config, scale, direct=True)
    m, l, o = _launch_split(q, k, v, splits, config, scale, direct=False)
    B, H, SPLITS, T_q, D = o.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    _decode_merge[(B * H, T_q)](
        m, l, o, out, H, T_q, SPLITS, *out.stride()[:3],
        BLOCK_S=min(triton.next_power_of_2(SPLITS), 64), HEAD_DIM=_padded_head_dim(D), D=D,
        **_launch_options(4, 1))
    return out


def run_decode(q: Tensor, k: Tensor, v: Tensor, splits: int, config: DecodeConfig) -> Tensor:
    """``flash_decode`` launched as ``config`` says (the decode stage's call)."""
    return flash_decode(q, k, v, splits, config.block_n, None, config.num_warps,
                        config.num_stages)


def _launch_split(q: Tensor, k: Tensor, v: Tensor, splits: int, config: DecodeConfig,
                  scale: float | None, direct: bool):
    """Kernel 1: the output (direct), or the partials m, l (B, H, splits, T_q) and o
    (B, H, splits, T_q, D), split j's at index j of the third axis."""
    scale = _check_inputs(q, k, v, scale=scale)
    _check_runnable(q)
    if not 1 <= q.shape[2] <= MAX_DECODE_QUERIES:
        raise ValueError(f"q must hold 1 to {MAX_DECODE_QUERIES} queries per sequence, "
                         f"(B, H, T_q, D); got {tuple(q.shape)} (use flash_attention for more)")
    B, H, T_q, D = q.shape
    S = k.shape[2]
    SPLITS = _check_positive_int("splits", splits, upper=S)
    BLOCK_N = _check_block("block_n", config.block_n)
    q, k, v = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v))
    if direct:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        m = l = o = None
    else:
        m = torch.empty(B, H, SPLITS, T_q, dtype=torch.float32, device=q.device)
        l = torch.empty_like(m)
        o = torch.empty(B, H, SPLITS, T_q, D, dtype=torch.float32, device=q.device)
        out = None
    strides_out = out.stride()[:3] if direct else (0, 0, 0)
    # one query: a row reduction; more: a tl.dot tile of at least 16 rows
    BLOCK_G = 1 if T_q == 1 else max(16, triton.next_power_of_2(T_q))
    _decode_split[(B * H, SPLITS)](
        q, k, v, m, l, o, out, scale * LOG2E, S, H, T_q, SPLITS, *q.stride()[:3],
        *k.stride()[:3], *v.stride()[:3], *strides_out, BLOCK_G=BLOCK_G, BLOCK_N=BLOCK_N,
        HEAD_DIM=_padded_head_dim(D), D=D, NUM_STAGES=config.num_stages, DIRECT=direct,
        DOT_PRECISION=_dot_precision(q.dtype),
        **_launch_options(config.num_warps, config.num_stages))
    return out if direct else (m, l, o)


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
