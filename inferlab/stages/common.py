"""What the stage modules share: seeded inputs, dtype names, the harness's options and
the SDPA backends a point runs. Each stage is ``inferlab.stages.<name>``: a frozen
``Params`` built from the stage's effective config, and ``run(params, ctx)`` returning rows
(a table artifact) or a dict (a JSON artifact); ``inferlab.workflow.runner`` does the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
}


def random_qkv(shape: tuple[int, int, int, int], dtype: str, device: str, seed: int,
               keys: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Standard-normal q (B, H, T, D) and k, v (B, H, keys or T, D), seeded, then cast.

    Drawn in float32 on ``device`` itself, from one generator of that device seeded with
    ``seed``: every dtype on a device sees the same numbers (up to the cast), and a GPU
    never waits for the CPU (decode's 805 M samples at 65,536 keys took ~12 s a draw on
    the CPU). On a CPU these are exactly the numbers of the committed CPU evidence.
    """
    B, H, T, D = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn((B, H, T, D), generator=gen, device=device)
    k, v = (torch.randn((B, H, T if keys is None else keys, D), generator=gen, device=device)
            for _ in "kv")
    return tuple(t.to(dtype=DTYPES[dtype]) for t in (q, k, v))


def tuples(value):
    """Lists (nested too) as tuples, so params built from a config are hashable."""
    if isinstance(value, list):
        return tuple(tuples(v) for v in value)
    return value


@dataclass(frozen=True)
class TimingParams:
    """The config's ``timing`` section: how the one harness times every case."""

    warmup: int
    min_rounds: int
    max_rounds: int
    target: float
    time_cap_s: float
    noisy_threshold: float
    min_run_ms: float
    workers: int = 1              # processes each point is timed in (workers.time_points)
    worker_rounds: int = 6        # rounds in each of them
    point_cap_s: float = 60.0     # one point's seconds, all workers and warm-ups included

    def options(self, ctx) -> dict:
        """Keyword arguments of ``measure.time_interleaved``."""
        return {"device": ctx.device, "threads": ctx.threads, "warmup": self.warmup,
                "min_rounds": self.min_rounds, "max_rounds": self.max_rounds,
                "target": self.target, "time_cap_s": self.time_cap_s,
                "noisy_threshold": self.noisy_threshold, "min_run_s": self.min_run_ms / 1e3}

    def point_options(self, ctx) -> dict:
        """Keyword arguments of ``workers.time_points`` (but the stage's budget)."""
        return {"device": ctx.device, "threads": ctx.threads, "warmup": self.warmup,
                "workers": self.workers, "rounds": self.worker_rounds,
                "target": self.target, "time_cap_s": self.point_cap_s,
                "noisy_threshold": self.noisy_threshold, "min_run_s": self.min_run_ms / 1e3}


def sdpa_plan(q, k, v, causal: bool, backends) -> tuple[tuple[tuple[str, dict], ...], list]:
    """Which of ``backends`` run on these inputs: ((label, row fields), ...) and the rows
    of those that do not. Asked in the stage's own process, never in a timing worker:
    the check runs each backend under the profiler, and a profiler session before a
    timing can slow it (pytorch#144455). It pickles, for the workers."""
    from inferlab.measurement.backends import sdpa_cases

    _, meta, refused = sdpa_cases(q, k, v, causal, backends)
    return tuple(meta.items()), refused


def sdpa_timed(q, k, v, causal: bool, plan) -> dict:
    """label -> SDPA forced to that backend, for each backend of ``plan`` (``sdpa_plan``)."""
    from inferlab.measurement.backends import run_sdpa

    backends = {label: fields["impl"].removeprefix("sdpa_") for label, fields in plan}
    return {label: (lambda b=b: run_sdpa(q, k, v, b, causal)) for label, b in backends.items()}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing, NaN or the denominator 0."""
    if numerator is None or denominator is None:
        return None
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return None
    return numerator / denominator
