"""decode -> decode.csv: one query against a KV cache, split-KV decode (plain PyTorch, and
our fused Triton kernel on a CUDA machine) against fused SDPA forced to each backend that
runs here.

A decode step must read the whole cache (K and V), so its time is bounded below by
cache_bytes / bandwidth: ``floor_ms`` is that bound at the probe's measured copy
ceiling (traffic.decode_floor_time_us), and ``achieved_gbs`` is the cache bytes over the
measured time. For each (cache length, batch, dtype) point every implementation is
timed in one interleaved ``measure.time_interleaved`` call, each paired round by round
with the fastest fused SDPA backend (``ratio``: this time / the fused kernel's).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferlab import kernels
from inferlab.backends import kernel_that_ran, sdpa_cases
from inferlab.measure import time_interleaved
from inferlab.partials import splitkv_decode
from inferlab.stages.common import (
    TimingParams,
    harness_progress,
    random_qkv,
    ratio,
    torch_dtype,
    tuples,
)
from inferlab.traffic import decode_cache_bytes, decode_floor_time_us


@dataclass(frozen=True)
class Params:
    heads: int
    d: int
    cache_lens: tuple[int, ...]
    batches: tuple[int, ...]
    dtypes: tuple[str, ...]
    splits: tuple[int, ...]
    backends: tuple[str, ...]
    triton: bool                  # also time our fused split-KV kernel (kernels.flash_decode)
    timing: TimingParams

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        section = {k: tuples(v) for k, v in cfg["decode"].items()}
        return cls(**section, timing=TimingParams(**cfg["timing"]))


def _cases(params: Params, q, k, v) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of backends that cannot run here])."""
    cases, meta = {}, {}
    for splits in params.splits:
        if splits <= k.shape[2]:  # a split needs at least one key
            cases[f"splitkv splits={splits}"] = lambda s=splits: splitkv_decode(q, k, v, s)
            meta[f"splitkv splits={splits}"] = {"impl": "splitkv", "fused_sdpa": False,
                                                "splits": splits}
    sdpa, sdpa_meta, refused = sdpa_cases(q, k, v, False, params.backends)
    if params.triton:
        why = kernels.not_timeable(q.device.type)
        for splits in (s for s in params.splits if s <= k.shape[2]):
            fields = {"impl": "triton_decode", "fused_sdpa": False, "splits": splits}
            if why is not None:
                refused.append({**fields, "status": f"unavailable: {why}"})
                continue
            label = f"triton_decode splits={splits}"
            cases[label] = lambda s=splits: kernels.flash_decode(q, k, v, s)
            meta[label] = {**fields, "kernel": "_decode_split + _decode_merge (Triton)"}
    return {**cases, **sdpa}, {**meta, **sdpa_meta}, refused


def point_rows(params: Params, ctx, cache_len: int, batch: int, dtype: str,
               copy_gbs: float | None, progress) -> list[dict]:
    """All rows of one (cache length, batch, dtype) point."""
    q, k, v = random_qkv((batch, params.heads, 1, params.d), dtype, ctx.device, ctx.seed,
                         keys=cache_len)
    cache_bytes = decode_cache_bytes(batch, params.heads, cache_len, params.d,
                                     torch_dtype(dtype).itemsize)
    floor_ms = None if not copy_gbs else decode_floor_time_us(cache_bytes, copy_gbs) / 1e3
    base = {"cache_len": cache_len, "batch": batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "cache_bytes": cache_bytes, "floor_ms": floor_ms}
    cases, meta, refused = _cases(params, q, k, v)
    fused = [label for label in cases if meta[label]["fused_sdpa"]]
    timings = time_interleaved(cases, pair_with=dict.fromkeys(cases, fused) if fused else None,
                               progress=progress, **params.timing.options(ctx)) if cases else {}
    rows = []
    for label, timing in timings.items():
        row = {**base, **meta[label], **timing.as_row(), "status": timing.status}
        if timing.status == "ok":
            row["achieved_gbs"] = cache_bytes / (timing.median_ms * 1e-3) / 1e9
            row["frac_copy_ceiling"] = ratio(row["achieved_gbs"], copy_gbs)
            row["kernel"] = meta[label].get("kernel") or kernel_that_ran(cases[label])
        rows.append(row)
    return rows + [{**base, **row} for row in refused]


def run(params: Params, ctx) -> list[dict]:
    copy_gbs = ctx.inputs["probe"]["ceilings"]["copy_gbs"]
    points = [(n, b, dtype) for n in params.cache_lens for b in params.batches
              for dtype in params.dtypes]
    rows = []
    for i, (cache_len, batch, dtype) in enumerate(points, start=1):
        name = f"cache={cache_len} batch={batch} {dtype}"
        progress = harness_progress(ctx, i, len(points), name)
        rows += point_rows(params, ctx, cache_len, batch, dtype, copy_gbs, progress)
    return rows
