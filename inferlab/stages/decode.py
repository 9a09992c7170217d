"""decode -> decode.csv: one query against a KV cache, split-KV decode (plain PyTorch, and
our fused Triton kernel on a CUDA machine) against fused SDPA forced to each backend that
runs here.

A decode step must read the whole cache (K and V), so its time is bounded below by
cache_bytes / bandwidth: ``floor_ms`` is that bound at the probe's copy ceiling
(``traffic.decode_floor_time_us``), and ``achieved_gbs`` the cache bytes over the measured
time. For each (cache length, batch, dtype) point every implementation is timed
interleaved by ``workers.time_points`` in several worker processes, each paired round by
round with the fastest fused SDPA backend (``ratio``); the kernel that ran is read with
the profiler after the timings.

Every point of the chapter's layout is one it measured ("every length and batch I tried"),
so under ``budget_s`` the harness cuts rounds and processes, never these points. A
``grouped`` entry adds points of another layout of heads (grouped-query attention:
``heads`` query heads over ``kv_heads``, each group's queries read as one sequence's),
timed after the chapter's and dropped first.

Our Triton kernel runs at the grid's split counts and at the count it chooses for this
device (``kernels.decode_splits``), that row marked ``splits_chosen``, each in the
configuration ``inferlab tune`` chose here, named in the ``kernel`` column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from inferlab.algorithms import implementations, kernels
from inferlab.algorithms.exactness import inexact
from inferlab.algorithms.traffic import decode_cache_bytes, decode_floor_time_us
from inferlab.core import layout
from inferlab.measurement import tuning
from inferlab.measurement.kernel_names import kernel_that_ran
from inferlab.measurement.status import status_fields
from inferlab.measurement.workers import time_points
from inferlab.stages.common import (
    DTYPES,
    TimingParams,
    random_qkv,
    ratio,
    sdpa_plan,
    sdpa_timed,
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
    implementations: tuple[str, ...]  # names in algorithms.implementations, and "sdpa"
    budget_s: float               # the stage's seconds of timing, all points, all workers
    timing: TimingParams
    # other layouts of heads: (heads, kv_heads, cache_lens, batches), timed after the rest
    grouped: tuple[tuple[int, int, tuple[int, ...], tuple[int, ...]], ...] = ()

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        """The decode section over the timing section; its ``workers``, ``worker_rounds``
        and ``min_run_ms``, where set, override the timing's for decode (more processes of
        many short rounds: see config.yaml)."""
        section = {k: tuples(v) for k, v in cfg["decode"].items()}
        own = {k: section.pop(k) for k in HARNESS_OVERRIDES if k in section}
        section["grouped"] = tuple(
            (g["heads"], g["kv_heads"], tuple(g["cache_lens"]), tuple(g["batches"]))
            for g in cfg["decode"].get("grouped", ()))
        for i, (heads, kv_heads, *_) in enumerate(section["grouped"]):
            if heads % kv_heads:
                raise ValueError(f"decode.{cfg['device']}.grouped[{i}]: kv_heads={kv_heads} "
                                 f"does not divide heads={heads}; each key/value head serves "
                                 "a whole group of query heads")
        return cls(**section, timing=replace(TimingParams(**cfg["timing"]), **own))

    def points(self) -> list[tuple[int, int, str, int, int, bool]]:
        """(cache_len, batch, dtype, heads, kv_heads, required) in timing order: the
        chapter's layout (one key/value head per query head), then each grouped one."""
        points = [(n, b, dtype, self.heads, self.heads, True) for n in self.cache_lens
                  for b in self.batches for dtype in self.dtypes]
        return points + [(n, b, dtype, heads, kv_heads, False)
                         for heads, kv_heads, lengths, batches in self.grouped
                         for n in lengths for b in batches for dtype in self.dtypes]


def _cases(params: Params, q, k, v, plan, launches: dict, sm_count: int | None
           ) -> tuple[dict, dict, list]:
    """({label: fn}, {label: row fields}, [rows of implementations that cannot run here]),
    the SDPA backends as ``plan`` (common.sdpa_plan) found them, each Triton kernel
    launched as ``launches`` says (impl -> its configuration). q: (B, H_kv, G, D), the G
    query heads of each key/value head as its queries."""
    fixed = [s for s in params.splits if s <= k.shape[2]]  # a split needs at least one key
    cases, meta, refused = {}, {}, []
    for impl in params.implementations:
        if impl == implementations.SDPA:
            continue  # after the others, as ever
        entry = implementations.get(impl)
        if entry.launch is None:
            for splits in fixed:
                cases[f"{impl} splits={splits}"] = partial(entry.run, q, k, v, splits)
                meta[f"{impl} splits={splits}"] = {"impl": impl, "fused_sdpa": False,
                                                   "splits": splits}
            continue
        why = entry.unavailable(q.device.type)
        config = launches[impl]
        chosen = None if why is not None or sm_count is None else kernels.decode_splits(
            k.shape[2], q.shape[0] * q.shape[1], sm_count, config.waves)
        for splits in sorted({*fixed, chosen} - {None}):
            fields = {"impl": impl, "fused_sdpa": False, "splits": splits,
                      "splits_chosen": splits == chosen}
            if why is not None:
                refused.append({**fields, "status": why})
                continue
            fn = partial(entry.run, q, k, v, splits, config)
            bad = inexact(fn(), q, k, v)
            if bad is not None:  # checked once at this point's sizes before it is timed
                refused.append({**fields, "status": bad})
                continue
            name = config.full_name if splits == chosen else config.name
            cases[f"{impl} splits={splits}"] = fn
            meta[f"{impl} splits={splits}"] = {**fields, "kernel": f"{impl}[{name}]"}
    sdpa_items, sdpa_refused = plan
    sdpa = sdpa_timed(q, k, v, False, sdpa_items)
    meta.update({label: dict(fields) for label, fields in sdpa_items})
    return {**cases, **sdpa}, meta, refused + list(sdpa_refused)


@dataclass(frozen=True)
class Point:
    """What a timing worker needs to build one point's cases (it pickles)."""

    params: Params
    cache_len: int
    batch: int
    dtype: str
    heads: int
    kv_heads: int
    device: str
    seed: int
    sdpa: tuple = ((), [])   # the SDPA backends that run (common.sdpa_plan)
    launches: tuple = ()     # (impl, configuration) of each Triton kernel
    sm_count: int | None = None  # the device's multiprocessors (None on a CPU)


def _inputs(params: Params, cache_len: int, batch: int, dtype: str, heads: int,
            kv_heads: int, device: str, seed: int):
    """q (B, H_kv, G, D): the G = heads / kv_heads query heads of each key/value head as
    its queries (one, in the chapter's layout); k, v (B, H_kv, cache_len, D)."""
    return random_qkv((batch, kv_heads, heads // kv_heads, params.d), dtype, device, seed,
                      keys=cache_len)


def plan_point(params: Params, cache_len: int, batch: int, dtype: str, heads: int,
               kv_heads: int, device: str, seed: int, tuned: list[dict] = ()) -> Point:
    """The point, with its SDPA backends checked here, in the stage's process, and the
    configuration each Triton kernel runs: the one ``tuned`` (``tuning.load``) nearest."""
    q, k, v = _inputs(params, cache_len, batch, dtype, heads, kv_heads, device, seed)
    launches = tuple((impl, tuning.choose(list(tuned), impl, "decode", d=params.d,
                                          dtype=dtype, queries=heads // kv_heads,
                                          cache_len=cache_len, programs=batch * kv_heads))
                     for impl in params.implementations if impl != implementations.SDPA
                     and implementations.get(impl).launch is not None)
    return Point(params, cache_len, batch, dtype, heads, kv_heads, device, seed,
                 sdpa_plan(q, k, v, False, params.backends), launches,
                 tuning.sm_count(device))


def point_cases(point: Point) -> dict:
    """One point's cases for ``workers.time_points``, built in the worker that times them."""
    q, k, v = _inputs(point.params, point.cache_len, point.batch, point.dtype, point.heads,
                      point.kv_heads, point.device, point.seed)
    cases, meta, refused = _cases(point.params, q, k, v, point.sdpa, dict(point.launches),
                                  point.sm_count)
    fused = [label for label in cases if meta[label]["fused_sdpa"]]

    def read(label: str) -> dict:
        return {"kernel": meta[label].get("kernel") or kernel_that_ran(cases[label])}

    return {"cases": cases, "pair_with": dict.fromkeys(cases, fused) if fused else {},
            "meta": meta, "refused": refused, "read": read}


def _planned(params: Params, cache_len: int) -> list[dict]:
    """The rows a dropped point would have had (a Triton kernel's, its split count not
    chosen, left out)."""
    rows = []
    for impl in params.implementations:
        if impl == implementations.SDPA:
            rows += [{"impl": f"sdpa_{b}", "fused_sdpa": implementations.get(f"sdpa_{b}")
                      .fused_sdpa} for b in params.backends]
        elif implementations.get(impl).launch is None:
            rows += [{"impl": impl, "fused_sdpa": False, "splits": s} for s in params.splits
                     if s <= cache_len]
    return rows


def point_rows(params: Params, cache_len: int, batch: int, dtype: str, heads: int,
               kv_heads: int, result, copy_gbs: float | None) -> list[dict]:
    """All rows of one (cache length, batch, dtype, layout) point from its ``PointResult``."""
    cache_bytes = decode_cache_bytes(batch, kv_heads, cache_len, params.d,
                                     DTYPES[dtype].itemsize)
    floor_ms = None if not copy_gbs else decode_floor_time_us(cache_bytes, copy_gbs) / 1e3
    base = {"cache_len": cache_len, "batch": batch, "heads": heads, "kv_heads": kv_heads,
            "d": params.d, "dtype": dtype, "cache_bytes": cache_bytes, "floor_ms": floor_ms}
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
    points = params.points()
    tuned = tuning.load(layout.tuning_path(ctx.root, ctx.key)) if ctx.device == "cuda" else []
    planned = [plan_point(params, n, b, dtype, heads, kv_heads, ctx.device, ctx.seed, tuned)
               for n, b, dtype, heads, kv_heads, _ in points]
    results = time_points(
        "inferlab.stages.decode:point_cases", planned,
        names=[f"cache={n} batch={b} {dtype}" + ("" if h == kv else f" heads={h}:{kv}")
               for n, b, dtype, h, kv, _ in points],
        budget_s=params.budget_s, progress=ctx.progress, stop_at=ctx.stop_at,
        required=[p[5] for p in points], **params.timing.point_options(ctx))
    rows = []
    for (n, b, dtype, heads, kv_heads, _), result in zip(points, results, strict=True):
        rows += point_rows(params, n, b, dtype, heads, kv_heads, result, copy_gbs)
    return rows
