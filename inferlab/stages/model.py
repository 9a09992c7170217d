"""model -> model.csv: the chapter's arithmetic, recomputed, so that its model and
arithmetic claims are checked against rows the pipeline wrote, never a constant in code.

Each row is one quantity with its value, unit, what it was computed from (``inputs``), and
its ``source``: the chapter's own premises (``config.yaml`` ``model:``, each quoted from
the chapter), counted or measured here, or the analytic model (``algorithms.traffic``).
The chapter's figures they stand beside: "about fourteen operations each" a block pair,
"some 29,000 launches", "1.2 seconds" at 40 µs a launch, "doubling B_q halves the K and
V traffic", 48 MiB of cache read in "170 microseconds", "a dozen separate operations" a
split-KV call; the Q&A's "intensity ≈ 7", the same FLOPs for tiled and naive attention and
"three round-trips over an O(S²) intermediate"; and Chapter 11's fused multiply-add, "1.5
to 1.6 times less time ... six to four" memory passes, measured again as a paired ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity

from inferlab.algorithms.attention import naive_attention, tiled_attention
from inferlab.algorithms.partials import splitkv_decode
from inferlab.algorithms.traffic import (
    block_pairs,
    decode_cache_bytes,
    decode_floor_time_us,
    naive_hbm_elements,
    tiled_hbm_elements,
)
from inferlab.measurement.kernel_names import quiet_profile
from inferlab.measurement.measure import time_interleaved
from inferlab.stages.common import DTYPES, TimingParams, random_qkv, tuples

# Chapter 11's multiply-add operands: 2**23 fp32 elements (32 MiB each) outgrow a CPU's
# last-level cache, so every memory pass goes to main memory, as on the GPU it measured.
FMA_ELEMENTS = 2**23
SPLITS = (1, 64)  # the chapter's fewest and most splits

# ATen ops that only describe memory (views, casts to the same dtype, allocation): they
# launch no kernel, so they are not counted as the chapter's "operations".
NO_KERNEL = {"aten::view", "aten::as_strided", "aten::slice", "aten::select",
             "aten::unsqueeze", "aten::squeeze", "aten::transpose", "aten::t", "aten::expand",
             "aten::reshape", "aten::_reshape_alias", "aten::alias", "aten::to",
             "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resolve_conj",
             "aten::resolve_neg", "aten::detach", "aten::lift_fresh"}


@dataclass(frozen=True)
class Params:
    T: int                       # the chapter's longest prefill
    block: int                   # its blocks of 128
    d: int
    heads: int
    cache_len: int               # its decode cache: 16,384 keys ...
    cache_dtype: str             # ... in fp16: 48 MiB
    launch_us: float             # premise: "40 microseconds per launch"
    decode_gbs: float            # premise: "50 GB/s at batch 1"
    sustainable_factor: float    # premise: "a sixth of the sustainable bandwidth"
    dtypes: tuple[str, ...]      # dtypes the machine balance is given for
    # the one harness's settings (the config's timing section): the launch floor and the
    # multiply-add are timed like everything else
    timing: TimingParams | None = None

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(**{k: tuples(v) for k, v in cfg["model"].items()},
                   timing=TimingParams(**cfg["timing"]))


def _kernel_ops(fn) -> int:
    """Top-level ATen operations ``fn`` runs that launch a kernel (profiler count)."""
    with quiet_profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for e in prof.events() if e.cpu_parent is None and
               e.name.startswith("aten::") and e.name not in NO_KERNEL)


def ops_per_block_pair(params: Params, ctx) -> float:
    """The slope of operations against block pairs: one query tile against 4 and 8 key
    tiles (the per-tile setup cancels)."""
    counts = []
    for n_keys in (4, 8):
        q, _, _ = random_qkv((1, 2, params.block, params.d), "float32", ctx.device, ctx.seed)
        _, k, v = random_qkv((1, 2, 1, params.d), "float32", ctx.device, ctx.seed,
                             keys=n_keys * params.block)
        counts.append(_kernel_ops(lambda k=k, v=v, q=q: tiled_attention(
            q, k, v, False, params.block, params.block)))
    return (counts[1] - counts[0]) / 4


def per_op_seconds(params: Params, ctx) -> float:
    """This machine's cost of one small ATen op (a launch floor): the median time per call
    of ``x.add(1.0)`` on 8 elements, timed by the one harness (``timing`` section)."""
    x = torch.ones(8, device=ctx.device)
    return time_interleaved({"op": lambda: x.add(1.0)},
                            **params.timing.options(ctx))["op"].median_ms / 1e3


def flops_ratio(params: Params, ctx) -> float:
    """FLOPs the profiler counts for tiled over naive attention (full mask)."""
    q, k, v = random_qkv((1, 2, 2 * params.block, params.d), "float32", ctx.device, ctx.seed)
    flops = []
    for fn in (lambda: tiled_attention(q, k, v, False, params.block, params.block),
               lambda: naive_attention(q, k, v)):
        with quiet_profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            fn()
        flops.append(sum(e.flops or 0 for e in prof.events()))
    return flops[0] / flops[1]


def splitkv_ops(params: Params, ctx) -> list[int]:
    """ATen operations one split-KV decode call launches, at each of ``SPLITS``."""
    q, k, v = random_qkv((1, 2, 1, params.d), "float32", ctx.device, ctx.seed, keys=1024)
    return [_kernel_ops(lambda s=s: splitkv_decode(q, k, v, s)) for s in SPLITS]


def fma_ratio(params: Params, ctx):
    """Two kernels (multiply, then add) over one fused multiply-add: the paired ratio."""
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed)
    a, b, c = (torch.rand(FMA_ELEMENTS, generator=gen, device=ctx.device) for _ in range(3))
    timings = time_interleaved({"fused": lambda: torch.addcmul(c, a, b),
                                "separate": lambda: a * b + c},
                               pair_with={"separate": ["fused"]}, **params.timing.options(ctx))
    return timings["separate"].ratio


def row(quantity: str, value: float, unit: str, source: str, inputs: str,
        dtype: str | None = None, ci: tuple[float, float] | None = None) -> dict:
    low, high = ci or (None, None)
    return {"quantity": quantity, "dtype": dtype, "value": value, "ci_low": low,
            "ci_high": high, "unit": unit, "source": source, "inputs": inputs, "status": "ok"}


def _added_rows(params: Params, ctx) -> list[dict]:
    """The rows of the Q&A's decode and round-trip figures, the split-KV op count and
    Chapter 11's multiply-add."""
    T, d = params.T, params.d
    rows = [row(f"naive_score_round_trips_{name}",
                (naive_hbm_elements(T, d, causal) - 4 * T * d) / (2 * T * T), "round trips",
                "model", f"traffic.naive_hbm_elements: T x T elements over 2·T², {name} mask")
            for name, causal in (("full", False), ("causal", True))]
    ops = splitkv_ops(params, ctx)
    rows.append(row("splitkv_ops_per_call", max(ops), "ops", "counted here",
                    "profiler: splitkv_decode, 1024 keys, "
                    + ", ".join(f"{n} ops at {s} splits" for n, s in zip(ops, SPLITS,
                                                                          strict=True))))
    for dtype in params.dtypes:
        rows.append(row("decode_intensity", 2 / DTYPES[dtype].itemsize, "FLOP/B",
                        "model", "4·S·d FLOPs per 2·S·d cache elements read", dtype))
    ratio = fma_ratio(params, ctx)
    if ratio is not None:
        rows.append(row("fma_two_kernels_over_fused", ratio.median, "×", "measured here",
                        f"a * b + c over torch.addcmul(c, a, b), {FMA_ELEMENTS} float32 "
                        "elements, paired round by round", ci=(ratio.ci_low, ratio.ci_high)))
    return rows


def run(params: Params, ctx) -> list[dict]:
    ceilings = ctx.inputs["probe"]["ceilings"]
    pairs, _ = block_pairs(params.T, params.T, params.block, params.block, causal=True)
    ops = ops_per_block_pair(params, ctx)
    op_s = per_op_seconds(params, ctx)
    launches = pairs * ops
    # B_q alone: B_k stays (block_k defaults to block_q, which would halve both tiles)
    half = tiled_hbm_elements(params.T, params.d, params.block // 2, params.block, causal=True)
    full = tiled_hbm_elements(params.T, params.d, params.block, params.block, causal=True)
    qo = 2 * params.T * params.d  # Q read and O written once: not K/V traffic
    cache = decode_cache_bytes(1, params.heads, params.cache_len, params.d,
                               DTYPES[params.cache_dtype].itemsize)
    sustainable = params.decode_gbs * params.sustainable_factor
    at = f"T={params.T}, blocks of {params.block}, causal"
    rows = [
        row("ops_per_block_pair", ops, "ops", "counted here", "profiler: tiled_attention, "
            f"1 query tile against 4 and 8 key tiles of {params.block}"),
        row("launches", launches, "launches", "counted here",
            f"{pairs} block pairs ({at}) x {ops:g} ops per pair"),
        row("launch_time_s", launches * params.launch_us * 1e-6, "s", "chapter premises",
            f"{launches:g} launches x {params.launch_us:g} µs per launch (the chapter's)"),
        row("launch_time_s", launches * op_s, "s", "measured here",
            f"{launches:g} launches x {op_s * 1e6:.2f} µs per small op here"),
        row("kv_traffic_ratio_half_tile", (half - qo) / (full - qo), "×", "model",
            f"K and V elements with B_q={params.block // 2} over B_q={params.block}, "
            f"B_k={params.block} ({at})"),
        row("decode_cache_mib", cache / 2**20, "MiB", "model",
            f"K and V, batch 1, {params.heads} heads, {params.cache_len} keys, d={params.d}, "
            f"{params.cache_dtype}"),
        row("decode_floor_us", decode_floor_time_us(cache, sustainable), "µs",
            "chapter premises", f"{cache / 2**20:g} MiB at {params.sustainable_factor:g} x "
            f"{params.decode_gbs:g} GB/s (the chapter's sustainable bandwidth)"),
        row("flops_tiled_over_naive", flops_ratio(params, ctx), "×", "counted here",
            f"profiler FLOPs, T={2 * params.block}, full mask"),
    ]
    if ceilings.get("copy_gbs"):
        rows.append(row("decode_floor_us", decode_floor_time_us(cache, ceilings["copy_gbs"]),
                        "µs", "measured here", f"{cache / 2**20:g} MiB at the probe's copy "
                        f"ceiling, {ceilings['copy_gbs']:.3g} GB/s"))
    for dtype in params.dtypes:
        rate = (ceilings.get("matmul_gflops") or {}).get(dtype)
        if rate and ceilings.get("copy_gbs"):
            intensity = 2 / DTYPES[dtype].itemsize  # 4·S·d FLOPs per 2·S·d elements
            balance = rate / ceilings["copy_gbs"]
            rows.append(row("decode_intensity_over_balance", intensity / balance, "×",
                            "measured here", f"{intensity:g} FLOP/byte over the machine's "
                            f"{balance:.3g} FLOP/byte ({dtype} matmul / copy)", dtype))
    return rows + _added_rows(params, ctx)
