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

from inferlab.attention import naive_attention, tiled_attention, tiled_attention_fast
from inferlab.backends import availability, kernel_that_ran, run_sdpa
from inferlab.config import PrefillParams
from inferlab.measure import is_oom, memory_cap, peak_extra_bytes, time_interleaved
from inferlab.stages import (
    random_qkv,
    ratio_or_none,
    read_ceilings,
    rows_over_points,
    table,
    timed_rows,
    timing_options,
)

GIB = 1 << 30
TILED = {"tiled": tiled_attention, "tiled_fast": tiled_attention_fast}


def prefill_flops(batch: int, heads: int, T: int, d: int, causal: bool) -> int:
    return 4 * batch * heads * T * T * d // (2 if causal else 1)


def _cases(params: PrefillParams, q, k, v, causal: bool) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of backends that cannot run here])."""
    cases, meta, unavailable = {}, {}, []
    if "naive" in params.implementations:
        cases["naive"] = lambda: naive_attention(q, k, v, causal)
        meta["naive"] = {"impl": "naive"}
    for impl, fn in TILED.items():
        if impl in params.implementations:
            for b in params.blocks:
                label = f"{impl} block={b}"
                cases[label] = lambda fn=fn, b=b: fn(q, k, v, causal, b, b)
                meta[label] = {"impl": impl, "block_q": b, "block_k": b}
    if "sdpa" in params.implementations:
        sdpa, sdpa_meta, unavailable = sdpa_cases(q, k, v, causal, params.backends)
        cases.update(sdpa)
        meta.update(sdpa_meta)
    return cases, meta, unavailable


def sdpa_cases(q, k, v, causal: bool, backends) -> tuple[dict, dict, list]:
    """SDPA forced to each of ``backends`` that runs here ({label: fn}, {label: fields}),
    and a row for each that does not (its PyTorch reason, or oom)."""
    cases, meta, unavailable = {}, {}, []
    for status in availability(q, k, v, causal=causal):
        if status.backend not in backends:
            continue
        label = f"sdpa_{status.backend}"
        if not status.ran:
            unavailable.append({"impl": label, "status": unavailable_status(status)})
            continue
        cases[label] = lambda b=status.backend: run_sdpa(q, k, v, b, causal)
        meta[label] = {"impl": label, "kernel": status.op}
    return cases, meta, unavailable


def unavailable_status(status) -> str:
    """'oom' when forcing the backend ran out of memory, else 'unavailable: <reason>'."""
    if status.error and is_oom(RuntimeError(status.error)):
        return "oom"
    return f"unavailable: {status.reason or status.error or 'refused without a reason'}"


def _capped(fn, cap_bytes: int | None, device: str):
    """``fn`` run under ``measure.memory_cap``: only the attention call is capped, not the
    harness or the profiler around it (a cap of a few MiB would starve Python itself)."""
    if cap_bytes is None:
        return fn

    def capped():
        with memory_cap(cap_bytes, device):
            return fn()
    return capped


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


def point_rows(params: PrefillParams, ctx, T: int, dtype: str, causal: bool,
               matmul_gflops: float | None, progress) -> list[dict]:
    """All rows of one (T, dtype, causal) point."""
    q, k, v = random_qkv((params.batch, params.heads, T, params.d), dtype, ctx.device, ctx.seed)
    base = {"T": T, "batch": params.batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "causal": causal, "threads": ctx.threads,
            "flops": prefill_flops(params.batch, params.heads, T, params.d, causal)}
    cap = None if params.memory_cap_gib is None else math.ceil(params.memory_cap_gib * GIB)
    cases, meta, unavailable = _cases(params, q, k, v, causal)
    cases = {label: _capped(fn, cap, ctx.device) for label, fn in cases.items()}
    timings = time_interleaved(cases, progress=progress,
                               **timing_options(params.timing, ctx)) if cases else {}

    def when_ok(label, timing) -> dict:
        fields = _memory_and_kernel(cases[label], meta[label].get("kernel"), ctx.device)
        fields["achieved_gflops"] = base["flops"] / (timing.median_ms * 1e-3) / 1e9
        fields["frac_matmul_ceiling"] = ratio_or_none(fields["achieved_gflops"], matmul_gflops)
        return fields

    rows = timed_rows(timings, meta, when_ok)
    return [{**base, **row} for row in rows + unavailable]


def run(params: PrefillParams, ctx):
    ceilings = read_ceilings(ctx.inputs["probe"])["matmul_gflops"]
    points = [(T, dtype, causal) for T in params.lengths for dtype in params.dtypes
              for causal in params.causal]
    rows = rows_over_points(
        ctx, points, lambda p: f"T={p[0]} {p[1]} {'causal' if p[2] else 'full'}",
        params.timing.rounds,
        lambda p, progress: point_rows(params, ctx, *p, ceilings.get(p[1]), progress))
    return table("prefill", rows)
