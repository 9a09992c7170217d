"""prefill -> prefill.csv: naive, tiled, tiled_fast and SDPA forced to each backend, at each
length, dtype, causal and full.

For each (T, dtype, causal) point every implementation is timed in one
``measure.time_interleaved`` call (A B C A B C ...), then, separately, its peak extra
memory and the kernel that ran are read (each with the profiler, outside the timing).
A backend that cannot run here gets a row with ``unavailable: <reason>``; a call that
runs out of memory (under ``memory_cap_gib`` if set) gets ``oom``; the stage goes on.

FLOPs are the useful work, 4·B·H·T²·d (two matmuls of 2·T²·d each per head), halved when
causal, since only the lower triangle is needed; an implementation that computes masked
scores does more arithmetic than it is credited with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferlab.attention import TILED, naive_attention
from inferlab.backends import kernel_that_ran, sdpa_cases
from inferlab.measure import time_interleaved
from inferlab.memory import capped, is_oom, peak_extra_bytes
from inferlab.stages.common import TimingParams, harness_progress, random_qkv, ratio, tuples

GIB = 1 << 30


@dataclass(frozen=True)
class Params:
    batch: int
    heads: int
    d: int
    lengths: tuple[int, ...]
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]
    implementations: tuple[str, ...]
    backends: tuple[str, ...]
    blocks: tuple[int, ...]
    memory_cap_gib: float | None
    timing: TimingParams

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        section = {k: tuples(v) for k, v in cfg["prefill"].items()}
        return cls(**section, timing=TimingParams(**cfg["timing"]))


def prefill_flops(batch: int, heads: int, T: int, d: int, causal: bool) -> int:
    return 4 * batch * heads * T * T * d // (2 if causal else 1)


def _cases(params: Params, q, k, v, causal: bool) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of backends that cannot run here])."""
    cases, meta, refused = {}, {}, []
    if "naive" in params.implementations:
        cases["naive"] = lambda: naive_attention(q, k, v, causal)
        meta["naive"] = {"impl": "naive", "fused_sdpa": False}
    for impl, fn in TILED.items():
        if impl in params.implementations:
            for b in params.blocks:
                label = f"{impl} block={b}"
                cases[label] = lambda fn=fn, b=b: fn(q, k, v, causal, b, b)
                meta[label] = {"impl": impl, "fused_sdpa": False, "block_q": b, "block_k": b}
    if "sdpa" in params.implementations:
        sdpa, sdpa_meta, refused = sdpa_cases(q, k, v, causal, params.backends)
        cases.update(sdpa)
        meta.update(sdpa_meta)
    return cases, meta, refused


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


def point_rows(params: Params, ctx, T: int, dtype: str, causal: bool,
               matmul_gflops: float | None, progress) -> list[dict]:
    """All rows of one (T, dtype, causal) point."""
    q, k, v = random_qkv((params.batch, params.heads, T, params.d), dtype, ctx.device, ctx.seed)
    base = {"T": T, "batch": params.batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "causal": causal, "threads": ctx.threads,
            "flops": prefill_flops(params.batch, params.heads, T, params.d, causal)}
    cap = None if params.memory_cap_gib is None else math.ceil(params.memory_cap_gib * GIB)
    cases, meta, refused = _cases(params, q, k, v, causal)
    cases = {label: capped(fn, cap, ctx.device) for label, fn in cases.items()}
    timings = time_interleaved(cases, progress=progress,
                               **params.timing.options(ctx)) if cases else {}
    rows = []
    for label, timing in timings.items():
        row = {**base, **meta[label], **timing.as_row(), "status": timing.status}
        if timing.status == "ok":
            row.update(_memory_and_kernel(cases[label], meta[label].get("kernel"), ctx.device))
            row["achieved_gflops"] = base["flops"] / (timing.median_ms * 1e-3) / 1e9
            row["frac_matmul_ceiling"] = ratio(row["achieved_gflops"], matmul_gflops)
        rows.append(row)
    return rows + [{**base, **row} for row in refused]


def run(params: Params, ctx) -> list[dict]:
    ceilings = ctx.inputs["probe"]["ceilings"]["matmul_gflops"]
    points = [(T, dtype, causal) for T in params.lengths for dtype in params.dtypes
              for causal in params.causal]
    rows = []
    for i, (T, dtype, causal) in enumerate(points, start=1):
        name = f"T={T} {dtype} {'causal' if causal else 'full'}"
        progress = harness_progress(ctx, i, len(points), name, params.timing.rounds)
        rows += point_rows(params, ctx, T, dtype, causal, ceilings.get(dtype), progress)
    return rows
