"""The timing harness across processes: each point of a stage measured in a few short
worker processes, one after another, within the stage's budget.

Across processes (``time_points``): a round of one process measures that process, but most
of the variance between runs is between processes (memory layout, where the allocator
and the kernel put things, the other tenant of a shared VM), so each point is measured in
``workers`` short worker processes, one after another, each timing every point in turn
(so drift between processes hits all points alike), each steadied like the stage's own
process (``runner.steady_process`` before torch loads). The interval is then a
random-effects one over processes: each process gives the log of its median (or of its
median paired ratio), and the 95 % interval, the prediction interval of another run of
as many processes, is their mean ± t(W-1) · s · sqrt(2/W), back on the linear scale
(``inferlab.measurement.intervals``); a row records the workers, the rounds and the between-process
share
of the variance. With one process it is the order-statistics interval of its rounds.

A stage's budget ``budget_s`` is shared by its workers (each gets the budget left over the
workers left). Points are timed in the order the stage lists them, which is its
priority. A point starts while its worker has time left, with at most its cap or what is
left; a point an earlier worker timed starts only if that time still fits. A point no
worker could fit is a row ``dropped: ...`` saying why. The first worker that timed a point
also takes its readings (memory, the kernel that ran: the profiler), after all its own
timings, so they count against the budget and no profiler runs before a timing in the
same process.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from inferlab.measurement.intervals import between_share, relative_halfwidth
from inferlab.measurement.measure import Ratio, Timing, check_count, ratio_groups, time_cases

# The worker's first lines: steady the process before torch loads, then time its points.
_WORKER_BOOT = ("import sys; from inferlab.measurement.process import steady_process; "
                "steady_process(); from inferlab.measurement.workers import worker_main; "
                "sys.exit(worker_main(sys.argv[1:]))")
DROPPED = "dropped: "


@dataclass(frozen=True)
class PointResult:
    """One point measured in up to ``workers`` processes: the timings of its cases, the
    fields the factory gave each case, the rows of what could not run there, and the
    readings taken after the timings (by the first worker that timed it); or why it was
    dropped."""

    timings: dict[str, Timing]
    meta: dict[str, dict]
    refused: list[dict]
    readings: dict[str, dict]
    dropped: str | None = None


def _factory(name: str):
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def _worker_job(job: dict, progress) -> list[dict]:
    """Time every point of ``job`` in this process, in order, within its deadline."""
    import torch

    torch.set_num_threads(job["threads"])
    factory, start, results = _factory(job["factory"]), time.perf_counter(), []
    for i, point in enumerate(job["points"]):
        left = job["deadline_s"] - (time.perf_counter() - start)
        why = _no_room(job["estimates"][i], left)
        if why:
            results.append({"dropped": why})
            continue
        began = time.perf_counter()
        built = factory(point)
        say = (lambda step, steps, label, i=i: progress(i, label)) if progress else None
        timings = time_cases(built["cases"], built.get("pair_with") or {}, device=job["device"],
                              threads=job["threads"], warmup=job["warmup"],
                              min_rounds=job["rounds"], max_rounds=job["rounds"],
                              target=math.inf, time_cap_s=min(job["cap_s"], left),
                              noisy_threshold=math.inf, min_run_s=job["min_run_s"],
                              progress=say)
        results.append({"timings": {label: (t.samples_ms, t.method, t.status,
                                            t.calls_per_timing, t.over_budget)
                                    for label, t in timings.items()},
                        "meta": built.get("meta", {}), "refused": built.get("refused", []),
                        "pair_with": built.get("pair_with") or {}, "readings": {},
                        "seconds": time.perf_counter() - began})
        del built, timings
    # After every timing of this process, so that a profiler never precedes a timing, and
    # in the first worker that timed the point, so that the workers after it get what is
    # left of the budget.
    for point, result, wanted in zip(job["points"], results, job["readings"], strict=True):
        if wanted and "timings" in result:
            result["readings"] = _readings(factory(point), result["timings"])
    return results


def _no_room(expected: float | None, left: float) -> str | None:
    """Why a point cannot start with ``left`` seconds of this worker's share, or None. A
    point no earlier worker timed is expected to take what it is given (its cap, or what
    is left, whichever is less): it starts while any time is left."""
    if left <= 0 or (expected is not None and expected > left):
        took = "" if expected is None else f"{expected:.1f} s expected (an earlier worker's), "
        return f"{took}{max(left, 0):.1f} s of the stage budget left for this worker"
    return None


def _readings(built: dict, timings: dict) -> dict:
    read = built.get("read")
    return {label: read(label) for label, t in timings.items() if read and t[2] == "ok"}


def worker_main(argv: Sequence[str]) -> int:
    """``python -c _WORKER_BOOT job.pkl result.pkl``: one worker process."""
    job_path, result_path = argv
    job = pickle.loads(Path(job_path).read_bytes())

    def progress(i: int, label: str) -> None:
        print(f"{_PROGRESS}{i} {label}", flush=True)

    results = _worker_job(job, progress)
    Path(result_path).write_bytes(pickle.dumps(results))
    return 0


_PROGRESS = "@progress "
_PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_parent() -> None:
    """In the worker, before it runs: killed when the stage's process dies (a stage killed
    mid-way leaves no worker timing on, on the cores the next run needs)."""
    try:
        ctypes.CDLL("libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # not Linux glibc: the worker ends with its job
        pass


def _run_worker(job: dict, progress: Callable[[int, int, str], object],
                point_names: Sequence[str], worker: str) -> list[dict]:
    """One worker process; its progress lines go to ``progress`` (point i of n, what), the
    profiler's USDT lines nowhere, the last other lines into the error if it fails."""
    root = str(Path(__file__).resolve().parents[2])  # this checkout's inferlab, not an install
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    with tempfile.TemporaryDirectory(prefix="inferlab-worker-") as tmp:
        job_path, result_path = Path(tmp, "job.pkl"), Path(tmp, "result.pkl")
        job_path.write_bytes(pickle.dumps(job))
        process = subprocess.Popen([sys.executable, "-c", _WORKER_BOOT, str(job_path),
                                    str(result_path)], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env,
                                   preexec_fn=_die_with_parent)
        tail: list[str] = []
        for line in process.stdout:
            line = line.rstrip("\n")
            if line.startswith(_PROGRESS):
                i, _, label = line[len(_PROGRESS):].partition(" ")
                progress(int(i) + 1, len(point_names), f"{point_names[int(i)]}: {worker}, {label}")
            elif line and not line.startswith("USDT:"):
                tail = (tail + [line])[-20:]
        if process.wait() == -signal.SIGKILL:  # the kernel's out-of-memory killer, mostly
            why = (f"its timing worker ({worker}) was killed (SIGKILL, most likely the "
                   "out-of-memory killer: the point does not fit in this machine's memory)")
            return [{"dropped": why} for _ in point_names]
        if process.returncode != 0 or not result_path.is_file():
            raise RuntimeError(f"timing worker ({worker}) exited with {process.returncode}: "
                               + "\n".join(tail))
        return pickle.loads(result_path.read_bytes())


def time_points(factory: str, points: Sequence[object], *, workers: int, rounds: int,
                budget_s: float, time_cap_s: float, threads: int, device: str = "cpu",
                warmup: int = 1, target: float = 0.02, noisy_threshold: float = 0.10,
                min_run_s: float = 0.002, names: Sequence[str] | None = None,
                progress: Callable[[int, int, str], object] | None = None,
                run_worker: Callable | None = None) -> list[PointResult]:
    """Time every point in ``workers`` processes, one after another, within ``budget_s``.

    Args:
        factory: "module:function"; function(point) -> {"cases": {label: fn}, "pair_with":
            {label: [candidate refs]}, "meta": {label: fields}, "refused": [rows],
            "read": label -> dict of readings taken after the timings (profiler)}. It runs
            in each worker, so it builds its inputs there; ``points`` must pickle.
        workers, rounds: processes, and rounds in each (interleaved as in time_interleaved).
        budget_s: the stage's seconds for all points in all workers; a point that no
            longer fits in a worker is dropped there (none fits: ``dropped``).
        time_cap_s: the seconds of one point in all workers (each gets 1/workers of it),
            warm-up included; a call alone longer than its share is ``over_budget``.
        names: each point's name for ``progress(i, n, "<name>: worker w/W, <step>")``.
        run_worker: how a worker runs (a test passes one that stays in process).

    Returns: one PointResult per point, in order.
    """
    check_count("workers", workers, 1)
    check_count("rounds", rounds, 1)
    if not (isinstance(budget_s, int | float) and budget_s >= 0):
        raise ValueError(f"budget_s={budget_s!r} must be a number of seconds >= 0")
    if not (isinstance(time_cap_s, int | float) and time_cap_s > 0):
        raise ValueError(f"time_cap_s={time_cap_s!r} must be a number of seconds > 0")
    names = list(names or [f"point {i + 1}" for i in range(len(points))])
    progress = progress or (lambda i, n, what: None)
    run_worker = run_worker or _run_worker
    cap = time_cap_s / workers
    estimates: list[float | None] = [None] * len(points)
    unread = [True] * len(points)
    per_worker: list[list[dict]] = []
    started = time.perf_counter()
    for w in range(workers):
        share = (budget_s - (time.perf_counter() - started)) / (workers - w)
        whys = [_no_room(e, share) for e in estimates]
        if all(whys):  # nothing would fit: no process to start
            per_worker.append([{"dropped": why} for why in whys])
            continue
        job = {"factory": factory, "points": list(points), "threads": threads,
               "device": device, "warmup": warmup, "rounds": rounds, "cap_s": cap,
               "min_run_s": min_run_s, "deadline_s": share, "estimates": estimates,
               "readings": list(unread)}
        results = run_worker(job, progress, names, f"worker {w + 1}/{workers}")
        estimates = [r.get("seconds", e) for r, e in zip(results, estimates, strict=True)]
        unread = [u and "timings" not in r for r, u in zip(results, unread, strict=True)]
        per_worker.append(results)
    return [_combine([results[i] for results in per_worker], target, noisy_threshold)
            for i in range(len(points))]


def _combine(runs: list[dict], target: float, noisy_threshold: float) -> PointResult:
    """One point's results from each worker -> Timings over processes: a case failing in
    any worker is that failure; the others get one group of samples per worker."""
    done = [r for r in runs if "timings" in r]
    if not done:
        return PointResult({}, {}, [], {}, DROPPED + runs[-1]["dropped"])
    timings: dict[str, Timing] = {}
    for label, (_, method, _, calls, _) in done[0]["timings"].items():
        mine = [r["timings"][label] for r in done]
        failed = next((t for t in mine if t[2] != "ok"), None)
        if failed is not None:
            timings[label] = Timing((), failed[1], failed[2], failed[3])
            continue
        groups = tuple(tuple(t[0]) for t in mine)
        timings[label] = Timing(tuple(x for g in groups for x in g), method, "ok", calls,
                                groups=groups if len(groups) > 1 else (),
                                over_budget=any(t[4] for t in mine))
    pair_with = done[-1].get("pair_with") or {}
    ok = {label: t for label, t in timings.items() if t.status == "ok"}
    for label, timing in ok.items():
        refs = [r for r in pair_with.get(label, ()) if r in ok]
        ratio = None
        if refs:
            ref = min(refs, key=lambda r: ok[r].median_ms)
            pairs = ratio_groups(timing.per_process, ok[ref].per_process)
            share = between_share(pairs) if ref != label else None
            ratio = Ratio(ref, *timing.paired_with(ok[ref]), share)
        width = max(relative_halfwidth(*timing.ci_ms, timing.median_ms),
                    relative_halfwidth(ratio.ci_low, ratio.ci_high, ratio.median)
                    if ratio and ratio.ref != label else 0.0)
        timings[label] = replace(timing, ratio=ratio, converged=width <= target,
                                 noisy=width > noisy_threshold)
    readings = next((r["readings"] for r in done if r["readings"]), {})
    return PointResult(timings, done[-1]["meta"], done[-1]["refused"], readings)
