"""decode -> decode.csv: one query against a KV cache, split-KV decode (plain PyTorch, and
our fused Triton kernel on a CUDA machine) against fused SDPA forced to each backend that
runs here.

A decode step must read the whole cache (K and V), so its time is bounded below by
cache_bytes / bandwidth: ``floor_ms`` is that bound at the probe's measured copy
ceiling (traffic.decode_floor_time_us), and ``achieved_gbs`` is the cache bytes over the
measured time. For each (cache length, batch, dtype) point every implementation is
timed interleaved by ``workers.time_points``, in several worker processes, each paired
round by round with the fastest fused SDPA backend (``ratio``: this time / the fused
kernel's); the kernel that ran is read with the profiler in the first worker that timed
the point, after all that worker's timings.

Points are timed in the order cache length, batch, dtype of the config (shortest cache
first). Every one is a point the chapter measured ("every length and batch I tried"), so
under the stage's ``budget_s`` the harness cuts rounds and processes, never points: each
gets its first process whatever the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inferlab.algorithms import kernels
from inferlab.algorithms.exactness import inexact
from inferlab.algorithms.partials import splitkv_decode
from inferlab.algorithms.traffic import decode_cache_bytes, decode_floor_time_us
from inferlab.measurement.backends import FUSED_SDPA
from inferlab.measurement.kernel_names import kernel_that_ran
from inferlab.measurement.status import status_fields
from inferlab.measurement.workers import time_points
from inferlab.stages.common import (
    TimingParams,
    random_qkv,
    ratio,
    sdpa_plan,
    sdpa_timed,
    torch_dtype,
    tuples,
)

# timing keys the decode section may set for itself
HARNESS_OVERRIDES = ("workers", "worker_rounds", "min_run_ms")


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
    budget_s: float               # the stage's seconds of timing, all points, all workers
    timing: TimingParams

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        """The decode section over the timing section; its ``workers``, ``worker_rounds``
        and ``min_run_ms``, where set, override the timing's for decode (more processes of
        many short rounds: see config.yaml)."""
        section = {k: tuples(v) for k, v in cfg["decode"].items()}
        own = {k: section.pop(k) for k in HARNESS_OVERRIDES if k in section}
        return cls(**section, timing=replace(TimingParams(**cfg["timing"]), **own))


def _cases(params: Params, q, k, v, plan) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of backends that cannot run here]), the SDPA
    backends as ``plan`` (common.sdpa_plan) found them."""
    cases, meta = {}, {}
    for splits in params.splits:
        if splits <= k.shape[2]:  # a split needs at least one key
            cases[f"splitkv splits={splits}"] = lambda s=splits: splitkv_decode(q, k, v, s)
            meta[f"splitkv splits={splits}"] = {"impl": "splitkv", "fused_sdpa": False,
                                                "splits": splits}
    sdpa_items, refused = plan
    sdpa = sdpa_timed(q, k, v, False, sdpa_items)
    sdpa_meta = {label: dict(fields) for label, fields in sdpa_items}
    refused = list(refused)
    if params.triton:
        why = kernels.not_timeable(q.device.type)
        for splits in (s for s in params.splits if s <= k.shape[2]):
            fields = {"impl": "triton_decode", "fused_sdpa": False, "splits": splits}
            if why is not None:
                refused.append({**fields, "status": why})
                continue
            bad = inexact(kernels.flash_decode(q, k, v, splits), q, k, v)
            if bad is not None:  # checked once at this point's sizes before it is timed
                refused.append({**fields, "status": bad})
                continue
            label = f"triton_decode splits={splits}"
            cases[label] = lambda s=splits: kernels.flash_decode(q, k, v, s)
            meta[label] = {**fields, "kernel": "_decode_split + _decode_merge (Triton)"}
    return {**cases, **sdpa}, {**meta, **sdpa_meta}, refused


@dataclass(frozen=True)
class Point:
    """What a timing worker needs to build one point's cases (it pickles)."""

    params: Params
    cache_len: int
    batch: int
    dtype: str
    device: str
    seed: int
    sdpa: tuple = ((), [])   # the SDPA backends that run (common.sdpa_plan)


def _inputs(params: Params, cache_len: int, batch: int, dtype: str, device: str, seed: int):
    return random_qkv((batch, params.heads, 1, params.d), dtype, device, seed, keys=cache_len)


def plan_point(params: Params, cache_len: int, batch: int, dtype: str, device: str,
               seed: int) -> Point:
    """The point, with its SDPA backends checked here, in the stage's process."""
    q, k, v = _inputs(params, cache_len, batch, dtype, device, seed)
    return Point(params, cache_len, batch, dtype, device, seed,
                 sdpa_plan(q, k, v, False, params.backends))


def point_cases(point: Point) -> dict:
    """One point's cases for ``workers.time_points``, built in the worker that times them."""
    q, k, v = _inputs(point.params, point.cache_len, point.batch, point.dtype, point.device,
                      point.seed)
    cases, meta, refused = _cases(point.params, q, k, v, point.sdpa)
    fused = [label for label in cases if meta[label]["fused_sdpa"]]

    def read(label: str) -> dict:
        return {"kernel": meta[label].get("kernel") or kernel_that_ran(cases[label])}

    return {"cases": cases, "pair_with": dict.fromkeys(cases, fused) if fused else {},
            "meta": meta, "refused": refused, "read": read}


def _planned(params: Params, cache_len: int) -> list[dict]:
    """The rows a dropped point would have had."""
    rows = [{"impl": "splitkv", "fused_sdpa": False, "splits": s} for s in params.splits
            if s <= cache_len]
    return rows + [{"impl": f"sdpa_{b}", "fused_sdpa": b in FUSED_SDPA}
                   for b in params.backends]


def point_rows(params: Params, cache_len: int, batch: int, dtype: str, result,
               copy_gbs: float | None) -> list[dict]:
    """All rows of one (cache length, batch, dtype) point from its ``PointResult``."""
    cache_bytes = decode_cache_bytes(batch, params.heads, cache_len, params.d,
                                     torch_dtype(dtype).itemsize)
    floor_ms = None if not copy_gbs else decode_floor_time_us(cache_bytes, copy_gbs) / 1e3
    base = {"cache_len": cache_len, "batch": batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "cache_bytes": cache_bytes, "floor_ms": floor_ms}
    if result.dropped:
        return [{**base, **row, **result.dropped} for row in _planned(params, cache_len)]
    rows = []
    for label, timing in result.timings.items():
        row = {**base, **result.meta[label], **timing.as_row(), **timing.process_row(),
               **status_fields(timing.status)}
        if timing.status == "ok":
            row["achieved_gbs"] = cache_bytes / (timing.median_ms * 1e-3) / 1e9
            row["frac_copy_ceiling"] = ratio(row["achieved_gbs"], copy_gbs)
            row.update(result.readings.get(label, {}))
        rows.append(row)
    return rows + [{**base, **row, **status_fields(row["status"])} for row in result.refused]


def run(params: Params, ctx) -> list[dict]:
    copy_gbs = ctx.inputs["probe"]["ceilings"]["copy_gbs"]
    points = [(n, b, dtype) for n in params.cache_lens for b in params.batches
              for dtype in params.dtypes]
    planned = [plan_point(params, n, b, dtype, ctx.device, ctx.seed) for n, b, dtype in points]
    results = time_points(
        "inferlab.stages.decode:point_cases", planned,
        names=[f"cache={n} batch={b} {dtype}" for n, b, dtype in points],
        budget_s=params.budget_s, progress=ctx.progress, stop_at=ctx.stop_at,
        required=[True] * len(points), **params.timing.point_options(ctx))
    rows = []
    for (cache_len, batch, dtype), result in zip(points, results, strict=True):
        rows += point_rows(params, cache_len, batch, dtype, result, copy_gbs)
    return rows
