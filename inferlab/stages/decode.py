"""decode -> decode.csv: one query against a KV cache, split-KV decode (plain PyTorch)
against fused SDPA forced to each backend that runs here.

A decode step must read the whole cache (K and V), so its time is bounded below by
cache_bytes / bandwidth: ``floor_ms`` is that bound at the probe's measured copy
ceiling (traffic.decode_floor_time_us), and ``achieved_gbs`` is the cache bytes over the
measured time. For each (cache length, batch, dtype) point every implementation is
timed in one interleaved ``measure.time_interleaved`` call.
"""

from __future__ import annotations

from inferlab.attention import splitkv_decode
from inferlab.backends import availability, kernel_that_ran, run_sdpa
from inferlab.config import DecodeParams
from inferlab.measure import time_interleaved
from inferlab.stages import (
    harness_progress,
    random_qkv,
    ratio_or_none,
    read_ceilings,
    table,
    timing_options,
    torch_dtype,
)
from inferlab.stages.prefill import unavailable_status
from inferlab.traffic import decode_cache_bytes, decode_floor_time_us


def _cases(params: DecodeParams, q, k, v) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of backends that cannot run here])."""
    cases, meta, unavailable = {}, {}, []
    for splits in params.splits:
        if splits <= k.shape[2]:  # a split needs at least one key
            cases[f"splitkv splits={splits}"] = lambda s=splits: splitkv_decode(q, k, v, s)
            meta[f"splitkv splits={splits}"] = {"impl": "splitkv", "splits": splits}
    for status in availability(q, k, v, causal=False):
        if status.backend in params.backends:
            label = f"sdpa_{status.backend}"
            if status.ran:
                cases[label] = lambda b=status.backend: run_sdpa(q, k, v, b, False)
                meta[label] = {"impl": label, "kernel": status.op}
            else:
                unavailable.append({"impl": label, "status": unavailable_status(status)})
    return cases, meta, unavailable


def point_rows(params: DecodeParams, ctx, cache_len: int, batch: int, dtype: str,
               copy_gbs: float | None, progress) -> list[dict]:
    """All rows of one (cache length, batch, dtype) point."""
    q, k, v = random_qkv((batch, params.heads, 1, params.d), dtype, ctx.device, ctx.seed,
                         keys=cache_len)
    cache_bytes = decode_cache_bytes(batch, params.heads, cache_len, params.d,
                                     torch_dtype(dtype).itemsize)
    floor_ms = None if not copy_gbs else decode_floor_time_us(cache_bytes, copy_gbs) / 1e3
    base = {"cache_len": cache_len, "batch": batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "cache_bytes": cache_bytes, "floor_ms": floor_ms}
    cases, meta, unavailable = _cases(params, q, k, v)
    rows = []
    timings = time_interleaved(cases, progress=progress,
                               **timing_options(params.timing, ctx)) if cases else {}
    for label, timing in timings.items():
        row = {**meta[label], **timing.as_row(), "status": timing.status}
        if timing.status == "ok":
            row["achieved_gbs"] = cache_bytes / (timing.median_ms * 1e-3) / 1e9
            row["frac_copy_ceiling"] = ratio_or_none(row["achieved_gbs"], copy_gbs)
            row["kernel"] = row.get("kernel") or kernel_that_ran(cases[label])
        rows.append(row)
    return [{**base, **row} for row in rows + unavailable]


def run(params: DecodeParams, ctx):
    copy_gbs = read_ceilings(ctx.inputs["probe"])["copy_gbs"]
    points = [(n, b, dtype) for n in params.cache_lens for b in params.batches
              for dtype in params.dtypes]
    rows = []
    for i, (cache_len, batch, dtype) in enumerate(points, start=1):
        name = f"cache={cache_len} batch={batch} {dtype}"
        progress = harness_progress(ctx, i, len(points), name, params.timing.rounds)
        rows += point_rows(params, ctx, cache_len, batch, dtype, copy_gbs, progress)
    return table("decode", rows)
