"""probe -> probe.json: where the work runs, which SDPA backends run here (and why the
others do not), the backend map, and the machine's measured ceilings.

``availability`` is each backend at the representative shape, per dtype and causal;
``backend_map`` (``inferlab.backend_map``) is each backend across head dims, grouped
key/value heads, a mask, dropout and every dtype, at a small shape.

Ceilings are what later stages divide by: a large copy's bandwidth (bytes read plus bytes
written per second, the decode floor's bandwidth) and a square matmul's rate per dtype
(the prefill rows' fraction of the matmul ceiling). Both are timed with the one harness,
interleaved, so they share the conditions of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inferlab.backend_map import map_cases, map_rows
from inferlab.backends import availability
from inferlab.environment import fingerprint
from inferlab.measure import time_interleaved
from inferlab.stages.common import TimingParams, harness_progress, random_qkv, torch_dtype, tuples

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
    matmul_sizes: tuple[int, ...]
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
    return map_rows(cases, tuple(torch_dtype(name) for name in m.dtypes), m.heads,
                    m.tokens, ctx.device, ctx.seed, progress=ctx.progress)


def _ceiling_cases(params: Params, device: str) -> dict:
    """{label: fn}: one large copy and an n x n matmul per size and dtype, outputs
    preallocated."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    src = torch.rand(params.copy_mib * MIB // 4, generator=gen).to(device)
    dst = torch.empty_like(src)
    cases = {"copy": lambda: dst.copy_(src)}
    for n in params.matmul_sizes:
        for dtype in params.dtypes:
            a, b = (torch.randn(n, n, generator=gen).to(device, torch_dtype(dtype))
                    for _ in "ab")
            c = torch.empty_like(a)
            cases[f"matmul {dtype} {n}"] = lambda a=a, b=b, c=c: torch.mm(a, b, out=c)
    return cases


def _row(timing) -> dict:
    """A timing as JSON (NaN, the harness's 'not measured', as None), with its method."""
    row = {**timing.as_row(), "status": timing.status, "method": timing.method}
    return {k: None if isinstance(v, float) and v != v else v for k, v in row.items()}


def ceilings(params: Params, ctx) -> dict:
    """Copy bandwidth (GB/s) and the matmul ceiling per dtype (GFLOP/s); None where it failed.

    A ceiling is the best the machine reaches: the best rate over the matmul sizes (large
    enough to saturate), and for a dtype the fp32 rate when that is higher, since kernels
    may compute that dtype in fp32 (PyTorch's CPU flash kernel does with bf16): without
    AVX512-BF16 a bf16 matmul runs at ~1 GFLOP/s while the flash kernel computes at the
    fp32 rate, which a bf16-only "ceiling" would put at 100x its ceiling.
    """
    cases = _ceiling_cases(params, ctx.device)
    progress = harness_progress(ctx, 1, 1, "ceilings")
    timings = time_interleaved(cases, progress=progress, **params.timing.options(ctx))
    copy_bytes = params.copy_mib * MIB

    def rate(label: str, amount: float) -> float | None:
        t = timings[label]
        return amount / (t.median_ms * 1e-3) / 1e9 if t.status == "ok" else None

    by_size = {dtype: {str(n): rate(f"matmul {dtype} {n}", 2 * n**3)
                       for n in params.matmul_sizes} for dtype in params.dtypes}
    own = {dtype: max((r for r in rates.values() if r is not None), default=None)
           for dtype, rates in by_size.items()}
    fp32 = own.get("float32")
    return {
        "copy_gbs": rate("copy", 2 * copy_bytes),  # a copy reads and writes every byte
        "matmul_gflops": {d: max((r for r in (r_own, fp32) if r is not None), default=None)
                          for d, r_own in own.items()},
        "matmul_gflops_by_size": by_size,
        "copy_bytes": copy_bytes,
        "matmul_sizes": list(params.matmul_sizes),
        "method": next(iter(timings.values())).method,
        "timings": {label: _row(t) for label, t in timings.items()},
    }


def run(params: Params, ctx) -> dict:
    return {"environment": fingerprint(ctx.device), "availability": availability_rows(params, ctx),
            "backend_map": backend_map_rows(params, ctx), "ceilings": ceilings(params, ctx)}
