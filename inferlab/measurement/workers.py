"""The timing harness across processes: each point of a stage measured in a few short
worker processes, one after another, within the stage's budget.

A round of one process measures that process, but most of the variance between runs is
between processes (memory layout, the other tenant of a shared VM), so each point is
timed in ``workers`` worker processes, one after another, each timing every point in turn
(drift between processes hits all points alike), each steadied like the stage's own
process (``process.steady_process``, before torch loads). The interval is then over
processes (``intervals.process_interval``) and a row records the workers, the rounds and
the between-process share of the variance.

The stage's ``budget_s`` is shared by its workers (each gets the budget left over the
workers left). Points are timed in the order the stage lists them, its priority: the
chapter's own points first (``required``). Under a budget the harness cuts rounds, then
processes, and points last: the first process times every required point whatever is
left, later processes only the points that still fit, and an extra point nobody could fit
is dropped with the seconds that were left. The first worker that timed a point also takes
its readings (memory, the kernel that ran: the profiler) after all its own timings, so no
profiler runs before a timing in the same process.

A stage may also be stopped, at ``stop_at`` (a wall-clock limit) or by SIGTERM
(``stopping``): a worker writes its results point by point, so what it finished is kept,
and the points it did not finish are ``stopped`` (cause ``step_limit``).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from inferlab.measurement.intervals import between_share, relative_halfwidth
from inferlab.measurement.measure import Ratio, Timing, ratio_groups, time_interleaved

# The worker's first lines: steady the process before torch loads, then time its points.
_WORKER_BOOT = ("import sys; from inferlab.measurement.process import steady_process; "
                "steady_process(); from inferlab.measurement.workers import worker_main; "
                "sys.exit(worker_main(sys.argv[1:]))")


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
    # why no process timed it: {"status": "dropped" | "stopped", "cause": "budget" |
    # "killed" | "step_limit", "budget_left_s": seconds or None}; None when timed
    dropped: dict | None = None


def drop(status: str, cause: str, budget_left_s: float | None = None) -> dict:
    """A point no process timed, as row fields (the stages' ``status``/``cause`` columns)."""
    return {"status": status, "cause": cause, "budget_left_s": budget_left_s}


STOPPED = drop("stopped", "step_limit")


def _factory(name: str):
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def _worker_job(job: dict, progress, save=None) -> list[dict]:
    """Time every point of ``job`` in this process, in order, within its deadline; each
    finished point handed to ``save`` (the results so far) as soon as it is done."""
    import torch

    torch.set_num_threads(job["threads"])
    factory, start, results = _factory(job["factory"]), time.perf_counter(), []
    stop_at = job.get("stop_at")
    for i, point in enumerate(job["points"]):
        left = job["deadline_s"] - (time.perf_counter() - start)
        to_stop = math.inf if stop_at is None else stop_at - time.time()
        if to_stop <= 0:
            results.append({"dropped": STOPPED})
            continue
        why = None if job["required"][i] else _no_room(job["estimates"][i], left)
        if why:
            results.append({"dropped": why})
            continue
        began = time.perf_counter()
        built = factory(point)
        say = (lambda step, steps, label, i=i: progress(i, label)) if progress else None
        # a required point in the first process gets its cap whatever the budget left (its
        # later processes are what the budget cuts); any other what is left of its share
        cap = max(min(job["cap_s"][i], to_stop, math.inf if job["required"][i] else left), 1e-3)
        timings = time_interleaved(built["cases"], pair_with=built.get("pair_with"),
                                   device=job["device"], threads=job["threads"],
                                   warmup=job["warmup"][i], min_rounds=job["rounds"],
                                   max_rounds=job["rounds"], target=math.inf, time_cap_s=cap,
                                   noisy_threshold=math.inf, min_run_s=job["min_run_s"],
                                   progress=say)
        results.append({"timings": {label: (t.samples_ms, t.method, t.status,
                                            t.calls_per_timing, t.over_budget)
                                    for label, t in timings.items()},
                        "meta": built.get("meta", {}), "refused": built.get("refused", []),
                        "pair_with": built.get("pair_with") or {}, "readings": {},
                        "seconds": time.perf_counter() - began})
        del built, timings
        if save:
            save(results)
    # After every timing of this process, so that a profiler never precedes a timing, and
    # in the first worker that timed the point, so that the workers after it get what is
    # left of the budget.
    for i, (point, result, wanted) in enumerate(zip(job["points"], results, job["readings"],
                                                    strict=True)):
        if stop_at is not None and time.time() >= stop_at:
            break
        if wanted and "timings" in result:
            say = (lambda label, i=i: progress(i, f"reading {label}")) if progress else None
            result["readings"] = _readings(factory(point), result["timings"], stop_at, say)
            if save:
                save(results)
    return results


def _no_room(expected: float | None, left: float) -> dict | None:
    """Why a point cannot start with ``left`` seconds of this worker's share, or None. A
    point no earlier worker timed is expected to take what it is given (its cap, or what
    is left, whichever is less): it starts while any time is left."""
    if left <= 0 or (expected is not None and expected > left):
        return drop("dropped", "budget", round(max(left, 0.0), 1))
    return None


def _readings(built: dict, timings: dict, stop_at: float | None = None,
              say: Callable[[str], object] | None = None) -> dict:
    """Each timed case's readings, checking ``stop_at`` case by case (one point's readings
    under the profiler took tens of seconds on an H200); a case not read has none (its
    row's memory and kernel stay empty)."""
    read, out = built.get("read"), {}
    for label, t in timings.items():
        if not read or t[2] != "ok":
            continue
        if stop_at is not None and time.time() >= stop_at:
            break
        if say:
            say(label)
        out[label] = read(label)
    return out


def worker_main(argv: Sequence[str]) -> int:
    """``python -c _WORKER_BOOT job.pkl result.pkl``: one worker process. Its results are
    written point by point (each write complete, by rename), so a worker stopped mid-way
    leaves every point it finished."""
    job_path, result_path = argv
    job = pickle.loads(Path(job_path).read_bytes())

    def progress(i: int, label: str) -> None:
        print(f"{_PROGRESS}{i} {label}", flush=True)

    def save(results: list[dict]) -> None:
        partial = Path(f"{result_path}.part")
        partial.write_bytes(pickle.dumps(results))
        os.replace(partial, result_path)

    save(_worker_job(job, progress, save))
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


class _Stop:
    """The stage's stop request (SIGTERM while ``stopping`` is active): no worker starts
    after it, and the running one is ended; its finished points are kept."""

    requested = False
    worker: subprocess.Popen | None = None

    @classmethod
    def request(cls, *_) -> None:
        cls.requested = True
        if cls.worker is not None and cls.worker.poll() is None:
            cls.worker.terminate()


@contextlib.contextmanager
def stopping():
    """While active, SIGTERM stops the stage's timing at the point it has reached instead
    of killing the process: what was measured is written (``time_points`` marks the rest
    ``stopped``). Only in the main thread, where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _Stop.request)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_worker(job: dict, progress: Callable[[int, int, str], object],
                point_names: Sequence[str], worker: str) -> list[dict]:
    """One worker process; its progress lines go to ``progress`` (point i of n, what), the
    profiler's USDT lines nowhere, the last other lines into the error if it fails. A
    worker stopped (``_Stop``) or killed returns the points it finished; the others are
    ``stopped`` or ``dropped``/``killed``."""
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
        _Stop.worker = process
        tail: list[str] = []
        try:
            for line in process.stdout:
                line = line.rstrip("\n")
                if line.startswith(_PROGRESS):
                    i, _, label = line[len(_PROGRESS):].partition(" ")
                    progress(int(i) + 1, len(point_names),
                             f"{point_names[int(i)]}: {worker}, {label}")
                elif line and not line.startswith("USDT:"):
                    tail = (tail + [line])[-20:]
            code = process.wait()
        finally:
            _Stop.worker = None
        done = pickle.loads(result_path.read_bytes()) if result_path.is_file() else []
        if code == -signal.SIGKILL and not _Stop.requested:
            # the kernel's out-of-memory killer, mostly: the point it was on does not fit
            return done + [{"dropped": drop("dropped", "killed")}] * (len(point_names) - len(done))
        if _Stop.requested or (code == 0 and len(done) == len(point_names)):
            return done + [{"dropped": STOPPED}] * (len(point_names) - len(done))
        raise RuntimeError(f"timing worker ({worker}) exited with {code}: " + "\n".join(tail))


def time_points(factory: str, points: Sequence[object], *, workers: int, rounds: int,
                budget_s: float, time_cap_s: float, threads: int, device: str = "cpu",
                warmup: int = 1, target: float = 0.02, noisy_threshold: float = 0.10,
                min_run_s: float = 0.002, names: Sequence[str] | None = None,
                progress: Callable[[int, int, str], object] | None = None,
                run_worker: Callable | None = None, required: Sequence[bool] | None = None,
                point_workers: Sequence[int] | None = None,
                point_warmup: Sequence[int] | None = None,
                stop_at: float | None = None) -> list[PointResult]:
    """Time every point in up to ``workers`` processes, one after another, within
    ``budget_s``.

    Args:
        factory: "module:function"; function(point) -> {"cases": {label: fn}, "pair_with":
            {label: [candidate refs]}, "meta": {label: fields}, "refused": [rows],
            "read": label -> dict of readings taken after the timings (profiler)}. It runs
            in each worker, so it builds its inputs there; ``points`` must pickle.
        workers, rounds: processes, and rounds in each (interleaved as in time_interleaved).
        budget_s: the stage's seconds for all points in all workers; a point that no
            longer fits in a worker is left out there (by none: ``dropped``, cause budget),
            but a ``required`` point always gets its first process.
        time_cap_s: the seconds of one point in all its workers (each gets its share),
            warm-up included; a call alone longer than its share is ``over_budget``.
        required: per point, whether it is one of the chapter's (default: none is).
        point_workers, point_warmup: per point, its processes (at most ``workers``) and
            warm-up calls, where they differ from ``workers`` and ``warmup``.
        stop_at: a time.time() after which nothing more is timed (``stopped``).
        names: each point's name for ``progress(i, n, "<name>: worker w/W, <step>")``.
        run_worker: how a worker runs (a test passes one that stays in process).

    Returns: one PointResult per point, in order.
    """
    n = len(points)
    names = list(names or [f"point {i + 1}" for i in range(n)])
    progress = progress or (lambda i, n, what: None)
    run_worker = run_worker or _run_worker
    required = list(required or [False] * n)
    counts = [min(c or workers, workers) for c in (point_workers or [workers] * n)]
    warmups = [w or warmup for w in (point_warmup or [warmup] * n)]
    estimates: list[float | None] = [None] * n
    unread = [True] * n
    per_point: list[list[dict]] = [[] for _ in range(n)]
    started = time.perf_counter()
    _Stop.requested = False
    for w in range(max(counts, default=0)):
        mine = [i for i in range(n) if counts[i] > w]
        if _Stop.requested or (stop_at is not None and time.time() >= stop_at):
            for i in mine:
                per_point[i].append({"dropped": STOPPED})
            continue
        share = (budget_s - (time.perf_counter() - started)) / (max(counts) - w)
        whys = [None if (w == 0 and required[i]) else _no_room(estimates[i], share)
                for i in mine]
        if all(whys):  # nothing would fit: no process to start
            for i, why in zip(mine, whys, strict=True):
                per_point[i].append({"dropped": why})
            continue
        job = {"factory": factory, "points": [points[i] for i in mine], "threads": threads,
               "device": device, "warmup": [warmups[i] for i in mine], "rounds": rounds,
               "cap_s": [time_cap_s / counts[i] for i in mine], "min_run_s": min_run_s,
               "deadline_s": share, "estimates": [estimates[i] for i in mine],
               "readings": [unread[i] for i in mine],
               "required": [w == 0 and required[i] for i in mine], "stop_at": stop_at}
        results = run_worker(job, progress, [names[i] for i in mine],
                             f"worker {w + 1}/{max(counts)}")
        for i, result in zip(mine, results, strict=True):
            estimates[i] = result.get("seconds", estimates[i])
            unread[i] = unread[i] and "timings" not in result
            per_point[i].append(result)
    return [_combine(runs, target, noisy_threshold) for runs in per_point]


def _combine(runs: list[dict], target: float, noisy_threshold: float) -> PointResult:
    """One point's results from each worker -> Timings over processes: a case failing in
    any worker is that failure; the others get one group of samples per worker."""
    done = [r for r in runs if "timings" in r]
    if not done:
        stopped = [r["dropped"] for r in runs if r["dropped"]["status"] == "stopped"]
        return PointResult({}, {}, [], {}, (stopped or [runs[-1]["dropped"]])[0])
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
            ratio = Ratio(ref, *timing.paired_with(ok[ref]), share, timing.paired_sd(ok[ref]))
        width = max(relative_halfwidth(*timing.ci_ms, timing.median_ms),
                    relative_halfwidth(ratio.ci_low, ratio.ci_high, ratio.median)
                    if ratio and ratio.ref != label else 0.0)
        timings[label] = replace(timing, ratio=ratio, converged=width <= target,
                                 noisy=width > noisy_threshold)
    readings = next((r["readings"] for r in done if r["readings"]), {})
    return PointResult(timings, done[-1]["meta"], done[-1]["refused"], readings)
