"""prefill -> prefill.csv: naive, tiled, tiled_fast and SDPA forced to each backend, at each
length, dtype, causal and full.

For each (T, dtype) point every implementation, causal and full, is timed in one
``measure.time_interleaved`` call (A B C A B C ...): each case paired round by round with
naive attention of its mask (``ratio``: this time / naive's), and a causal case with its
full-mask twin (``causal_over_full``). Then, separately, its peak extra memory and the
kernel that ran are read (each with the profiler, outside the timing).
A backend that cannot run here gets a row with ``unavailable: <reason>``; a call that
runs out of memory (under ``memory_cap_gib`` if set) gets ``oom``; the stage goes on.

FLOPs are the useful work, 4·B·H·T²·d (two matmuls of 2·T²·d each per head), halved when
causal, since only the lower triangle is needed; an implementation that computes masked
scores does more arithmetic than it is credited with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferlab import kernels
from inferlab.attention import TILED, naive_attention
from inferlab.backends import kernel_that_ran, sdpa_cases
from inferlab.measure import paired_ratio, time_interleaved
from inferlab.memory import capped, is_oom, peak_extra_bytes
from inferlab.stages.common import TimingParams, harness_progress, random_qkv, ratio, tuples

GIB = 1 << 30
TRITON_BLOCK_N = 64


@dataclass(frozen=True)
class Params:
    batch: int
    heads: int
    d: int
    sizes: tuple[tuple[str, tuple[int, ...]], ...]  # (dtype, the lengths T timed in it)
    causal: tuple[bool, ...]
    implementations: tuple[str, ...]
    backends: tuple[str, ...]
    blocks: tuple[int, ...]
    triton_blocks: tuple[int, ...]   # block_m of our Triton kernel (block_n 64)
    memory_cap_gib: float | None
    timing: TimingParams

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        section = {k: tuples(v) for k, v in cfg["prefill"].items()}
        section["sizes"] = tuple((s["dtype"], tuple(s["T"])) for s in cfg["prefill"]["sizes"])
        return cls(**section, timing=TimingParams(**cfg["timing"]))


def prefill_flops(batch: int, heads: int, T: int, d: int, causal: bool) -> int:
    return 4 * batch * heads * T * T * d // (2 if causal else 1)


def _cases(params: Params, q, k, v, causal: bool) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of backends that cannot run here]) for
    one mask; labels end in " causal" or " full"."""
    mask = "causal" if causal else "full"
    cases, meta, refused = {}, {}, []
    if "naive" in params.implementations:
        cases[f"naive {mask}"] = lambda: naive_attention(q, k, v, causal)
        meta[f"naive {mask}"] = {"impl": "naive", "fused_sdpa": False}
    for impl, fn in TILED.items():
        if impl in params.implementations:
            for b in params.blocks:
                label = f"{impl} block={b} {mask}"
                cases[label] = lambda fn=fn, b=b: fn(q, k, v, causal, b, b)
                meta[label] = {"impl": impl, "fused_sdpa": False, "block_q": b, "block_k": b}
    if "sdpa" in params.implementations:
        sdpa, sdpa_meta, refused = sdpa_cases(q, k, v, causal, params.backends)
        cases.update({f"{label} {mask}": fn for label, fn in sdpa.items()})
        meta.update({f"{label} {mask}": fields for label, fields in sdpa_meta.items()})
    if "triton" in params.implementations:
        why = kernels.not_timeable(q.device.type)
        for b in params.triton_blocks:
            fields = {"impl": "triton_flash", "fused_sdpa": False, "block_q": b,
                      "block_k": TRITON_BLOCK_N}
            if why is not None:
                refused.append({**fields, "status": f"unavailable: {why}"})
                continue
            label = f"triton_flash block={b} {mask}"
            cases[label] = lambda b=b: kernels.flash_attention(q, k, v, causal, b, TRITON_BLOCK_N)
            meta[label] = {**fields, "kernel": f"_attn_fwd (Triton, BLOCK_M={b}, "
                                              f"BLOCK_N={TRITON_BLOCK_N})"}
    for fields in meta.values():
        fields["causal"] = causal
    return cases, meta, [{**row, "causal": causal} for row in refused]


def _memory_and_kernel(fn, known_kernel: str | None, device: str) -> dict:
    """Peak extra memory and the kernel that ran; status 'oom' if either ran out."""
    try:
        reading = peak_extra_bytes(fn, device)
        kernel = known_kernel or kernel_that_ran(fn)
    except Exception as exc:  # noqa: BLE001 - an out-of-memory here is a result
        if not is_oom(exc):
            raise
        return {"status": "oom"}
    return {"peak_extra_bytes": reading.peak_extra_bytes, "memory_method": reading.method,
            "kernel": kernel}


def point_rows(params: Params, ctx, T: int, dtype: str, matmul_gflops: float | None,
               progress) -> list[dict]:
    """All rows of one (T, dtype) point: both masks timed in one interleaved call, each
    case paired with naive attention of its mask, and a causal case also with its own
    full-mask case (the chapter's causal/full time)."""
    q, k, v = random_qkv((params.batch, params.heads, T, params.d), dtype, ctx.device, ctx.seed)
    base = {"T": T, "batch": params.batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "threads": ctx.threads}
    cap = None if params.memory_cap_gib is None else math.ceil(params.memory_cap_gib * GIB)
    cases, meta, refused = {}, {}, []
    for causal in params.causal:
        more, more_meta, more_refused = _cases(params, q, k, v, causal)
        cases.update({label: capped(fn, cap, ctx.device) for label, fn in more.items()})
        meta.update(more_meta)
        refused += more_refused
    pair_with = {label: [f"naive {label.rsplit(' ', 1)[1]}"] for label in cases
                 if f"naive {label.rsplit(' ', 1)[1]}" in cases}
    timings = time_interleaved(cases, pair_with=pair_with, progress=progress,
                               **params.timing.options(ctx)) if cases else {}
    rows = []
    for label, timing in timings.items():
        fields = meta[label]
        flops = prefill_flops(params.batch, params.heads, T, params.d, fields["causal"])
        row = {**base, **fields, **timing.as_row(), "flops": flops, "status": timing.status}
        if row["ratio_to"] is not None:
            row["ratio_to"] = meta[row["ratio_to"]]["impl"]
        full = timings.get(label.replace(" causal", " full"))
        if fields["causal"] and full is not None and "ok" == timing.status == full.status:
            row["causal_over_full"], row["causal_over_full_ci_low"], \
                row["causal_over_full_ci_high"] = paired_ratio(timing.samples_ms,
                                                               full.samples_ms)
        if timing.status == "ok":
            row.update(_memory_and_kernel(cases[label], fields.get("kernel"), ctx.device))
            row["achieved_gflops"] = flops / (timing.median_ms * 1e-3) / 1e9
            row["frac_matmul_ceiling"] = ratio(row["achieved_gflops"], matmul_gflops)
        rows.append(row)
    return rows + [{**base, **row, "flops": prefill_flops(params.batch, params.heads, T,
                                                          params.d, row["causal"])}
                   for row in refused]


def run(params: Params, ctx) -> list[dict]:
    ceilings = ctx.inputs["probe"]["ceilings"]["matmul_gflops"]
    points = [(T, dtype) for dtype, lengths in params.sizes for T in lengths]
    rows = []
    for i, (T, dtype) in enumerate(points, start=1):
        progress = harness_progress(ctx, i, len(points), f"T={T} {dtype}")
        rows += point_rows(params, ctx, T, dtype, ceilings.get(dtype), progress)
    return rows
