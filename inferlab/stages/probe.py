"""probe -> probe.json: where the work runs, which SDPA backends run here (and why the
others do not), the backend map, and the machine's measured ceilings.

``availability`` is each backend at the representative shape, per dtype and causal;
``backend_map`` (``measurement.backend_map``) each backend across head dims, grouped
key/value heads, a mask, dropout and every dtype, at a small shape.

Ceilings are what later stages divide by: a large copy's bandwidth (bytes read plus
written per second: the decode floor's) and a square matmul's rate per dtype (the prefill
rows' fraction of the matmul ceiling), timed interleaved by the one harness.

The matmul's size is grown by time, per dtype: n doubles from ``matmul_min_n`` until one
call takes ``matmul_call_ms`` or n reaches ``matmul_max_n``. A fixed size costs what the
slowest dtype makes of it: an AVX2 CPU's bf16 fallback took 58.7 s a call at n = 2,048.
A dtype whose rate is below a quarter of fp32's is a slow path (``matmul_slow_path``): a
native 16-bit matmul runs at least at fp32's rate (4.4x it with AVX512-BF16 here), the
fallback converts element by element (40-80x slower on AVX2), so a quarter lies far from
both. Stages read the flag to skip their points in that dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inferlab.measurement.backend_map import map_cases, map_rows
from inferlab.measurement.backends import availability
from inferlab.measurement.clocks import make_clock
from inferlab.measurement.environment import fingerprint
from inferlab.measurement.measure import time_interleaved
from inferlab.stages.common import DTYPES, TimingParams, random_qkv, tuples

MIB = 1 << 20


@dataclass(frozen=True)
class MapParams:
    """The config's ``probe.map``: the backend map's inputs."""

    tokens: int
    heads: int
    d: int
    head_dims: tuple[int, ...]
    gqa_groups: int
    dropout_p: float
    dtypes: tuple[str, ...]


@dataclass(frozen=True)
class Params:
    tokens: int
    heads: int
    d: int
    copy_mib: int
    matmul_min_n: int
    matmul_max_n: int
    matmul_call_ms: float
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]
    map: MapParams
    timing: TimingParams

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        probe = {k: tuples(v) for k, v in cfg["probe"].items() if k != "map"}
        backend_map = MapParams(**{k: tuples(v) for k, v in cfg["probe"]["map"].items()})
        return cls(**probe, map=backend_map, timing=TimingParams(**cfg["timing"]))


def availability_rows(params: Params, ctx) -> list[dict]:
    """One row per dtype x causal x backend at the representative (1, H, T, D) shape."""
    rows = []
    points = [(dtype, causal) for dtype in params.dtypes for causal in params.causal]
    for i, (dtype, causal) in enumerate(points, start=1):
        ctx.progress(i, len(points), f"availability {dtype} causal={causal}")
        q, k, v = random_qkv((1, params.heads, params.tokens, params.d), dtype, ctx.device,
                             ctx.seed)
        rows += [status.as_dict() for status in availability(q, k, v, causal=causal)]
    return rows


def backend_map_rows(params: Params, ctx) -> list[dict]:
    """Every backend over the map's cases (head dims, then causal, GQA, mask, dropout at
    its head dim d), in each of the map's dtypes."""
    m = params.map
    cases = map_cases(m.head_dims, m.d, m.heads, m.gqa_groups, m.dropout_p)
    return map_rows(cases, tuple(DTYPES[name] for name in m.dtypes), m.heads,
                    m.tokens, ctx.device, ctx.seed, progress=ctx.progress)


SLOW_PATH_FRACTION = 0.25  # of fp32's rate; why a quarter: the module docstring


def _matrices(n: int, dtype: str, device: str, gen: torch.Generator):
    """Random n x n inputs a, b and a preallocated output c, in ``dtype`` on ``device``."""
    a, b = (torch.randn(n, n, generator=gen).to(device, DTYPES[dtype]) for _ in "ab")
    return a, b, torch.empty_like(a)


def matmul_sizing(params: Params, dtype: str, ctx, gen: torch.Generator) -> list[dict]:
    """Two calls per n = min_n, 2 min_n, ... until a call takes ``matmul_call_ms`` or n
    reaches ``matmul_max_n``: [{n, call_ms}], the last n being the one to time. The faster
    of the two calls counts: the first of a size pays for first touches (and on a GPU for
    the BLAS library's set-up), which would stop the growth early."""
    steps, n = [], params.matmul_min_n
    while True:
        a, b, c = _matrices(n, dtype, ctx.device, gen)
        clock = make_clock(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), ctx.device,
                           ctx.threads)
        steps.append({"n": n, "call_ms": min(clock.seconds_per_call(1) for _ in "12") * 1e3})
        if steps[-1]["call_ms"] >= params.matmul_call_ms or 2 * n > params.matmul_max_n:
            return steps
        n *= 2


def _ceiling_cases(params: Params, sizes: dict[str, int], device: str,
                   gen: torch.Generator) -> dict:
    """{label: fn}: one large copy and, per dtype, an n x n matmul at its chosen n;
    outputs preallocated."""
    src = torch.rand(params.copy_mib * MIB // 4, generator=gen).to(device)
    dst = torch.empty_like(src)
    cases = {"copy": lambda: dst.copy_(src)}
    for dtype, n in sizes.items():
        a, b, c = _matrices(n, dtype, device, gen)
        cases[f"matmul {dtype} {n}"] = lambda a=a, b=b, c=c: torch.mm(a, b, out=c)
    return cases


def slow_paths(own: dict[str, float | None]) -> dict[str, bool | None]:
    """dtype -> whether its matmul rate is below SLOW_PATH_FRACTION of fp32's (a fallback
    path); None where either rate is missing. fp32 itself is the reference: False."""
    fp32 = own.get("float32")
    return {dtype: (False if dtype == "float32" else
                    None if rate is None or fp32 is None else rate < SLOW_PATH_FRACTION * fp32)
            for dtype, rate in own.items()}


def _row(timing) -> dict:
    """A timing as JSON (NaN, the harness's 'not measured', as None), with its method."""
    row = {**timing.as_row(), "status": timing.status, "method": timing.method}
    return {k: None if isinstance(v, float) and v != v else v for k, v in row.items()}


def ceilings(params: Params, ctx) -> dict:
    """Copy bandwidth (GB/s) and the matmul ceiling per dtype (GFLOP/s); None where it failed.

    A ceiling is the best the machine reaches: the matmul at a size grown by time (the
    module docstring), and for a dtype the fp32 rate when that is higher, since kernels
    may compute that dtype in fp32 (PyTorch's CPU flash kernel does with bf16): without
    AVX512-BF16 a bf16 matmul runs at ~1 GFLOP/s while the flash kernel computes at the
    fp32 rate, which a bf16-only "ceiling" would put at 100x its ceiling.
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    sizing = {}
    for i, dtype in enumerate(params.dtypes, start=1):
        ctx.progress(i, len(params.dtypes), f"matmul size by time, {dtype}")
        sizing[dtype] = matmul_sizing(params, dtype, ctx, gen)
    sizes = {dtype: steps[-1]["n"] for dtype, steps in sizing.items()}
    cases = _ceiling_cases(params, sizes, ctx.device, gen)
    timings = time_interleaved(
        cases, progress=lambda step, steps, label: ctx.progress(1, 1, f"ceilings: {label}"),
        **params.timing.options(ctx))
    copy_bytes = params.copy_mib * MIB

    def rate(label: str, amount: float) -> float | None:
        t = timings[label]
        return amount / (t.median_ms * 1e-3) / 1e9 if t.status == "ok" else None

    own = {dtype: rate(f"matmul {dtype} {n}", 2 * n**3) for dtype, n in sizes.items()}
    fp32 = own.get("float32")
    return {
        "copy_gbs": rate("copy", 2 * copy_bytes),  # a copy reads and writes every byte
        "matmul_gflops": {d: max((r for r in (r_own, fp32) if r is not None), default=None)
                          for d, r_own in own.items()},
        "matmul_gflops_by_size": {dtype: {str(sizes[dtype]): r} for dtype, r in own.items()},
        "matmul_slow_path": slow_paths(own),
        "matmul_sizing": sizing,
        "copy_bytes": copy_bytes,
        "matmul_sizes": sorted(set(sizes.values())),
        "method": next(iter(timings.values())).method,
        "timings": {label: _row(t) for label, t in timings.items()},
    }


def run(params: Params, ctx) -> dict:
    return {"environment": fingerprint(ctx.device), "availability": availability_rows(params, ctx),
            "backend_map": backend_map_rows(params, ctx), "ceilings": ceilings(params, ctx)}
