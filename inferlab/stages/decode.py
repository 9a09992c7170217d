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
from inferlab.backends import kernel_that_ran
from inferlab.config import DecodeParams
from inferlab.measure import time_interleaved
from inferlab.stages import (
    random_qkv,
    ratio_or_none,
    read_ceilings,
    rows_over_points,
    table,
    timed_rows,
    timing_options,
    torch_dtype,
)
from inferlab.stages.prefill import sdpa_cases
from inferlab.traffic import decode_cache_bytes, decode_floor_time_us


def _cases(params: DecodeParams, q, k, v) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of backends that cannot run here])."""
    cases, meta = {}, {}
    for splits in params.splits:
        if splits <= k.shape[2]:  # a split needs at least one key
            cases[f"splitkv splits={splits}"] = lambda s=splits: splitkv_decode(q, k, v, s)
            meta[f"splitkv splits={splits}"] = {"impl": "splitkv", "splits": splits}
    sdpa, sdpa_meta, unavailable = sdpa_cases(q, k, v, False, params.backends)
    cases.update(sdpa)
    meta.update(sdpa_meta)
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
    timings = time_interleaved(cases, progress=progress,
                               **timing_options(params.timing, ctx)) if cases else {}

    def when_ok(label, timing) -> dict:
        achieved_gbs = cache_bytes / (timing.median_ms * 1e-3) / 1e9
        return {"achieved_gbs": achieved_gbs,
                "frac_copy_ceiling": ratio_or_none(achieved_gbs, copy_gbs),
                "kernel": meta[label].get("kernel") or kernel_that_ran(cases[label])}

    rows = timed_rows(timings, meta, when_ok)
    return [{**base, **row} for row in rows + unavailable]


def run(params: DecodeParams, ctx):
    copy_gbs = read_ceilings(ctx.inputs["probe"])["copy_gbs"]
    points = [(n, b, dtype) for n in params.cache_lens for b in params.batches
              for dtype in params.dtypes]
    rows = rows_over_points(
        ctx, points, lambda p: f"cache={p[0]} batch={p[1]} {p[2]}", params.timing.rounds,
        lambda p, progress: point_rows(params, ctx, *p, copy_gbs, progress))
    return table("decode", rows)
