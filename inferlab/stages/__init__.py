"""The pipeline's stages, one module each, every one a plain function
``run(params, ctx) -> pandas.DataFrame | dict`` (no Snakemake inside):

* ``probe``       -> probe.json       environment, SDPA availability, measured ceilings
* ``correctness`` -> correctness.csv  error against float64; block pairs; split-KV; merge
* ``prefill``     -> prefill.csv      naive / tiled / tiled_fast / SDPA per backend: time, memory
* ``decode``      -> decode.csv       one query against a cache: split-KV vs fused SDPA
* ``traffic``     -> traffic.csv      the traffic model's ratio against the measured one
* ``claims``      -> claims.json      each chapter claim's verdict on this machine

``params`` is the stage's frozen dataclass from ``inferlab.config``; ``ctx`` is
``inferlab.pipeline.StageContext`` (device, threads, seed, input artifacts, progress).
``inferlab.pipeline.run_stage`` serialises, validates and registers what ``run`` returns.
This module holds the few helpers the stages share.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
}


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype={name!r} is not supported; expected one of {list(DTYPES)}")
    return DTYPES[name]


def random_qkv(shape: tuple[int, int, int, int], dtype: str, device: str, seed: int,
               keys: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Standard-normal q (B, H, T, D) and k, v (B, H, keys or T, D), seeded, then cast.

    Drawn on the CPU in float32 from one seeded generator, so every device and dtype
    sees the same numbers (up to the cast).
    """
    B, H, T, D = shape
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn((B, H, T, D), generator=gen)
    k, v = (torch.randn((B, H, T if keys is None else keys, D), generator=gen) for _ in "kv")
    return tuple(t.to(device=device, dtype=torch_dtype(dtype)) for t in (q, k, v))


def read_ceilings(probe_json: Path) -> dict:
    """The ``ceilings`` of a probe.json: {"copy_gbs": float|None, "matmul_gflops": {...}}."""
    return json.loads(Path(probe_json).read_text())["ceilings"]


def timing_options(timing, ctx) -> dict:
    """Keyword arguments of ``measure.time_interleaved`` from the config's timing block."""
    return {"device": ctx.device, "threads": ctx.threads, "rounds": timing.rounds,
            "timings_per_round": timing.timings_per_round, "warmup": timing.warmup,
            "noisy_threshold": timing.noisy_threshold, "min_run_s": timing.min_run_ms / 1e3}


def harness_progress(ctx, i: int, n: int, point: str, rounds: int):
    """A progress callback for ``time_interleaved`` that reports point ``i`` of ``n`` at each
    warm-up and at the start of each round (not at every timing: that floods the log)."""
    def report(step: int, steps: int, label: str) -> None:
        per_round = max(steps // rounds, 1)
        if label.startswith("warm-up") or step % per_round == 1 or per_round == 1:
            ctx.progress(i, n, f"{point}: {label}")
    return report


def rows_over_points(ctx, points: list, describe, rounds: int, point_rows) -> list[dict]:
    """Rows of every point, with "point i of n" progress: ``point_rows(point, progress)``
    gives one point's rows; ``describe(point)`` names it in the progress line."""
    rows = []
    for i, point in enumerate(points, start=1):
        progress = harness_progress(ctx, i, len(points), describe(point), rounds)
        rows += point_rows(point, progress)
    return rows


def timed_rows(timings: dict, meta: dict, when_ok) -> list[dict]:
    """One row per timed case: its ``meta`` fields, the harness's timing columns and
    status, and for a case that timed ok the fields ``when_ok(label, timing)`` adds."""
    rows = []
    for label, timing in timings.items():
        row = {**meta[label], **timing.as_row(), "status": timing.status}
        if timing.status == "ok":
            row.update(when_ok(label, timing))
        rows.append(row)
    return rows


def ratio_or_none(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing, NaN or the denominator 0."""
    if numerator is None or denominator is None:
        return None
    if numerator != numerator or denominator != denominator or denominator == 0:
        return None
    return numerator / denominator


def timing_row(timing) -> dict:
    """``Timing.as_row()`` plus its status, NaN (not measured) as None for JSON."""
    row = {**timing.as_row(), "status": timing.status}
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in row.items()}


def table(stage: str, rows: list[dict]):
    """A DataFrame with exactly the contract columns of ``stage`` (schemas/<stage>.schema.json,
    docs/contracts.md), in order; a column a row does not set is empty (None)."""
    import pandas as pd

    from inferlab.config import REPO_ROOT

    schema = json.loads((REPO_ROOT / "schemas" / f"{stage}.schema.json").read_text())
    columns = schema["required"]
    unknown = {key for row in rows for key in row} - set(columns)
    if unknown:
        raise ValueError(f"rows of {stage!r} set columns {sorted(unknown)} that the contract "
                         f"does not have; expected a subset of {columns}")
    frame = pd.DataFrame([{c: row.get(c) for c in columns} for row in rows], columns=columns)
    # nullable integers, so a column with empty cells is still written as 2, not 2.0
    for column in columns:
        types = schema["properties"][column]["type"]
        if "integer" in (types if isinstance(types, list) else [types]):
            frame[column] = frame[column].astype("Int64")
    return frame


def max_abs_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref|, computed in float64."""
    return (out.to(torch.float64) - ref.to(torch.float64)).abs().max().item()
