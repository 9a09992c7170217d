"""prefill -> prefill.csv: naive, tiled, tiled_fast, SDPA forced to each backend and, on a
CUDA machine, our Triton kernel, at each length, dtype, causal and full.

For each (T, dtype) point every implementation, causal and full (or the masks the size
entry names), is timed interleaved by ``workers.time_points`` in several worker
processes, each case paired round by round with naive attention of its mask (``ratio``)
and a causal case with its full-mask twin (``causal_over_full``). Then the first worker
that timed the point reads its peak extra memory and the kernel that ran with the
profiler, after all its timings.

Points are timed in the order of ``sizes``, the chapter's first and the entries marked
``extra`` after them: under ``budget_s`` the harness cuts rounds, then processes, then
points; an extra point no process could fit is rows ``dropped`` (cause ``budget``). A
size entry may name its own worker processes and warm-up calls. A backend that cannot
run here is a row ``unavailable``; a call that runs out of memory (under
``memory_cap_gib`` if set) is ``oom``; the stage goes on. A dtype whose matmul the probe
found on a slow path is rows ``dropped`` (cause ``slow_path``).

Our Triton kernel runs in the configuration ``inferlab tune`` chose for the nearest
length alike (``measurement.tuning``; its default without a tuning file): the row's
``block_q`` and ``block_k`` are its tiles and ``kernel`` names it whole.

FLOPs are the useful work, 4·B·H·T²·d (two matmuls of 2·T²·d each per head), halved when
causal; an implementation that computes masked scores does more than it is credited with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from inferlab.algorithms import implementations
from inferlab.algorithms.exactness import inexact
from inferlab.core import layout
from inferlab.measurement import tuning
from inferlab.measurement.kernel_names import kernel_in, kernel_that_ran
from inferlab.measurement.memory import capped, is_oom, peak_extra_bytes
from inferlab.measurement.process import release_freed_memory
from inferlab.measurement.status import status_fields
from inferlab.measurement.workers import time_points
from inferlab.stages.common import (
    TimingParams,
    random_qkv,
    ratio,
    sdpa_plan,
    sdpa_timed,
    tuples,
)

GIB = 1 << 30


@dataclass(frozen=True)
class Params:
    batch: int
    heads: int
    d: int
    # (dtype, the lengths T timed in it, the masks: causal values, or () for ``causal``,
    # the worker processes: 0 for timing.workers, the warm-up calls: 0 for timing.warmup,
    # whether the entry is an extra: timed after the chapter's points, dropped first)
    sizes: tuple[tuple[str, tuple[int, ...], tuple[bool, ...], int, int, bool], ...]
    causal: tuple[bool, ...]
    implementations: tuple[str, ...]  # names in algorithms.implementations, and "sdpa"
    backends: tuple[str, ...]
    blocks: tuple[int, ...]           # square tiles of the implementations sized by block
    memory_cap_gib: float | None
    budget_s: float                  # the stage's seconds of timing, all points, all workers
    timing: TimingParams

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        section = {k: tuples(v) for k, v in cfg["prefill"].items()}
        section["sizes"] = tuple((s["dtype"], tuple(s["T"]), tuple(s.get("causal", ())),
                                  s.get("workers", 0), s.get("warmup", 0),
                                  bool(s.get("extra", False)))
                                 for s in cfg["prefill"]["sizes"])
        return cls(**section, timing=TimingParams(**cfg["timing"]))

    def points(self) -> list[tuple[int, str, tuple[bool, ...], int, int, bool]]:
        """(T, dtype, masks, workers, warm-up calls, required) in timing order: the
        chapter's entries of ``sizes`` first, then the extras, each in its order."""
        entries = sorted(self.sizes, key=lambda s: s[5])  # stable: the config's order kept
        return [(T, dtype, masks or self.causal, workers or self.timing.workers,
                 warmup or self.timing.warmup, not extra)
                for dtype, lengths, masks, workers, warmup, extra in entries for T in lengths]


def prefill_flops(batch: int, heads: int, T: int, d: int, causal: bool) -> int:
    return 4 * batch * heads * T * T * d // (2 if causal else 1)


def _cases(params: Params, q, k, v, causal: bool, plan, launches: dict) -> tuple[dict, dict,
                                                                                 list]:
    """({label: fn}, {label: row fields}, [rows of implementations that cannot run here])
    for one mask, the SDPA backends as ``plan`` found them, each Triton kernel launched as
    ``launches`` says ((impl, causal) -> its configuration); labels end in " causal" or
    " full"."""
    mask = "causal" if causal else "full"
    cases, meta, refused = {}, {}, []
    for impl in params.implementations:
        if impl == implementations.SDPA:
            sdpa_meta, sdpa_refused = plan
            cases.update({f"{label} {mask}": fn
                          for label, fn in sdpa_timed(q, k, v, causal, sdpa_meta).items()})
            meta.update({f"{label} {mask}": dict(fields) for label, fields in sdpa_meta})
            refused += sdpa_refused
            continue
        entry = implementations.get(impl)
        if entry.launch is not None:  # our kernel, checked once at this point's sizes
            fields = {"impl": impl, "fused_sdpa": False}
            status = entry.unavailable(q.device.type)
            if status is None:
                config = launches[(impl, causal)]
                fields.update(block_q=config.block_m, block_k=config.block_n,
                              kernel=f"{impl}[{config.name}]")
                fn = partial(entry.run, q, k, v, causal, config)
                status = inexact(fn(), q, k, v, causal)
            if status is None:
                cases[f"{impl} {mask}"], meta[f"{impl} {mask}"] = fn, fields
            else:
                refused.append({**fields, "status": status})
        elif entry.sized_by == "block":
            for b in params.blocks:
                label = f"{impl} block={b} {mask}"
                cases[label] = partial(entry.run, q, k, v, causal, b, b)
                meta[label] = {"impl": impl, "fused_sdpa": False, "block_q": b, "block_k": b}
        else:
            cases[f"{impl} {mask}"] = partial(entry.run, q, k, v, causal)
            meta[f"{impl} {mask}"] = {"impl": impl, "fused_sdpa": False}
    for fields in meta.values():
        fields["causal"] = causal
    return cases, meta, [{**row, "causal": causal} for row in refused]


def _memory_and_kernel(fn, known_kernel: str | None, device: str) -> dict:
    """Peak extra memory and the kernel that ran; status 'oom' if either ran out."""
    named: list = []  # on a CPU the memory's profiler session also names the kernel
    try:
        reading = peak_extra_bytes(fn, device, on_profile=lambda prof: named.append(
            kernel_in(prof)))
        kernel = known_kernel or (named[0] if named else kernel_that_ran(fn))
    except Exception as exc:  # noqa: BLE001 - an out-of-memory here is a result
        if not is_oom(exc):
            raise
        return {"status": "oom"}
    return {"peak_extra_bytes": reading.peak_extra_bytes, "memory_method": reading.method,
            "kernel": kernel}


@dataclass(frozen=True)
class Point:
    """What a timing worker needs to build one point's cases (it pickles)."""

    params: Params
    T: int
    dtype: str
    masks: tuple[bool, ...]
    device: str
    seed: int
    sdpa: tuple = ()      # per mask, the SDPA backends that run (common.sdpa_plan)
    launches: tuple = ()  # ((impl, causal), configuration) of each Triton kernel


def _inputs(params: Params, T: int, dtype: str, device: str, seed: int):
    return random_qkv((params.batch, params.heads, T, params.d), dtype, device, seed)


def plan_point(params: Params, T: int, dtype: str, masks: tuple[bool, ...], device: str,
               seed: int, tuned: list[dict] = ()) -> Point:
    """The point, with its SDPA backends checked here, in the stage's process, and the
    configuration each Triton kernel runs: the one ``tuned`` (``tuning.load``) nearest."""
    plans = ()
    if implementations.SDPA in params.implementations:
        q, k, v = _inputs(params, T, dtype, device, seed)
        plans = tuple(sdpa_plan(q, k, v, causal, params.backends) for causal in masks)
    launches = tuple(((impl, causal), tuning.choose(list(tuned), impl, "prefill", d=params.d,
                                                    dtype=dtype, causal=causal, T=T))
                     for impl in params.implementations if impl != implementations.SDPA
                     and implementations.get(impl).launch is not None for causal in masks)
    return Point(params, T, dtype, masks, device, seed, plans, launches)


def point_cases(point: Point) -> dict:
    """One point's cases for ``workers.time_points``, built in the worker that times them:
    both masks, each case paired with naive attention of its mask; readings (memory,
    kernel) taken after the timings."""
    params = point.params
    q, k, v = _inputs(params, point.T, point.dtype, point.device, point.seed)
    cap = None if params.memory_cap_gib is None else math.ceil(params.memory_cap_gib * GIB)
    cases, meta, refused = {}, {}, []
    for i, causal in enumerate(point.masks):
        plan = point.sdpa[i] if point.sdpa else ((), [])
        more, more_meta, more_refused = _cases(params, q, k, v, causal, plan,
                                               dict(point.launches))
        cases.update({label: capped(fn, cap, point.device) for label, fn in more.items()})
        meta.update(more_meta)
        refused += more_refused
    pair_with = {label: [f"naive {label.rsplit(' ', 1)[1]}"] for label in cases
                 if f"naive {label.rsplit(' ', 1)[1]}" in cases}

    def read(label: str) -> dict:
        return _memory_and_kernel(cases[label], meta[label].get("kernel"), point.device)

    return {"cases": cases, "pair_with": pair_with, "meta": meta, "refused": refused,
            "read": read}


def _planned(params: Params, masks: tuple[bool, ...]) -> list[dict]:
    """The rows a dropped point would have had (its backends not asked, so not known; a
    Triton kernel's configuration not chosen, so left out)."""
    impls = []
    for impl in params.implementations:
        if impl == implementations.SDPA:
            impls += [(f"sdpa_{b}", None) for b in params.backends]
        elif implementations.get(impl).launch is None:
            sized = implementations.get(impl).sized_by == "block"
            impls += [(impl, b) for b in params.blocks] if sized else [(impl, None)]
    return [{"impl": impl, "fused_sdpa": implementations.get(impl).fused_sdpa,
             "block_q": b, "block_k": b, "causal": causal}
            for causal in masks for impl, b in impls]


def dropped_rows(params: Params, ctx, T: int, dtype: str, masks: tuple[bool, ...],
                 status: dict) -> list[dict]:
    """The rows of a point not timed: each planned case with ``status`` (its fields)."""
    base = {"T": T, "batch": params.batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "threads": ctx.threads}
    return [{**base, **row, **status,
             "flops": prefill_flops(params.batch, params.heads, T, params.d, row["causal"])}
            for row in _planned(params, masks)]


def point_rows(params: Params, ctx, T: int, dtype: str, masks: tuple[bool, ...], result,
               matmul_gflops: float | None) -> list[dict]:
    """All rows of one (T, dtype) point from its ``measure.PointResult``."""
    base = {"T": T, "batch": params.batch, "heads": params.heads, "d": params.d,
            "dtype": dtype, "threads": ctx.threads}
    if result.dropped:
        return dropped_rows(params, ctx, T, dtype, masks, result.dropped)
    timings, meta = result.timings, result.meta
    rows = []
    for label, timing in timings.items():
        fields = meta[label]
        flops = prefill_flops(params.batch, params.heads, T, params.d, fields["causal"])
        row = {**base, **fields, **timing.as_row(), **timing.process_row(), "flops": flops,
               **status_fields(timing.status)}
        if row["ratio_to"] is not None:
            row["ratio_to"] = meta[row["ratio_to"]]["impl"]
        full = timings.get(label.replace(" causal", " full"))
        if fields["causal"] and full is not None and "ok" == timing.status == full.status:
            row["causal_over_full"], row["causal_over_full_ci_low"], \
                row["causal_over_full_ci_high"] = timing.paired_with(full)
            row["causal_over_full_process_sd"] = timing.paired_sd(full)
        if timing.status == "ok":
            row.update(result.readings.get(label, {}))
            row["achieved_gflops"] = flops / (timing.median_ms * 1e-3) / 1e9
            row["frac_matmul_ceiling"] = ratio(row["achieved_gflops"], matmul_gflops)
        rows.append(row)
    return rows + [{**base, **row, **status_fields(row["status"]),
                    "flops": prefill_flops(params.batch, params.heads, T, params.d,
                                           row["causal"])}
                   for row in result.refused]


def run(params: Params, ctx) -> list[dict]:
    ceilings = ctx.inputs["probe"]["ceilings"]
    # dtype -> the status of its points where the probe found its matmul on a slow path
    # (bf16 without AVX512-BF16: naive attention at 512 tokens took seconds a call)
    slow = {dtype: {"status": "dropped", "cause": "slow_path"}
            for dtype, is_slow in (ceilings.get("matmul_slow_path") or {}).items() if is_slow}
    points = params.points()
    timed = [p for p in points if p[1] not in slow]
    tuned = tuning.load(layout.tuning_path(ctx.root, ctx.key)) if ctx.device == "cuda" else []
    planned = [plan_point(params, T, dtype, masks, ctx.device, ctx.seed, tuned)
               for T, dtype, masks, *_ in timed]
    release_freed_memory()  # the backend checks' buffers, before a worker needs them
    options = params.timing.point_options(ctx)
    results = dict(zip([p[:2] for p in timed], time_points(
        "inferlab.stages.prefill:point_cases", planned,
        names=[f"T={T} {dtype}" for T, dtype, *_ in timed],
        budget_s=params.budget_s, progress=ctx.progress, stop_at=ctx.stop_at,
        required=[p[5] for p in timed], point_workers=[p[3] for p in timed],
        point_warmup=[p[4] for p in timed], **options), strict=True))
    rows = []
    for T, dtype, masks, *_ in points:  # the config's order, whatever the timing order
        if dtype in slow:
            rows += dropped_rows(params, ctx, T, dtype, masks, slow[dtype])
        else:
            rows += point_rows(params, ctx, T, dtype, masks, results[(T, dtype)],
                               ceilings["matmul_gflops"].get(dtype))
    return rows
