"""The one timing harness; every timing stage uses it.

The chapter's claims are ratios (naive/fused, tiled/naive, split/fused), so they are
measured as ratios. Every case is warmed up, then the cases are timed in rounds,
interleaved (A B C, A B C, ...), one timing of each per round, so that drift (frequency,
another tenant, the page cache) hits all alike. A case paired with a reference gets,
besides its own median time, the median of its *per-round* ratio to that reference: both
were timed in the same round, seconds apart, so what slows a round slows both.

How many rounds is decided by the data: after ``min_rounds`` (at least 6, the fewest for
a 95% interval), rounds continue until the 95% confidence interval of every case's median
and of every paired ratio is within ``target`` of it (e.g. ±2%), or until ``max_rounds``
or ``time_cap_s`` of timing is reached. Each ``Timing`` says how many rounds it took and
whether it ``converged``; one whose interval is wider than ``noisy_threshold`` is
``noisy``. The interval is distribution-free: order statistics of the samples, the
binomial way (no normality assumed; timings are skewed).

The cap ``time_cap_s`` bounds the whole point, warm-up included: a round starts only
while the rounds so far and the next (as long as the last) fit in it, the first always
runs. A case whose single call alone is longer than the cap is ``over_budget``: it gets
one warm-up call and then one timing per round, and the cap lets no second round start,
so it is timed once per process, never minutes of repetition.

Across processes (``time_points``): a round of one process measures that process, but most
of the variance between runs is between processes (memory layout, where the allocator
and the kernel put things, the other tenant of a shared VM), so each point is measured in
``workers`` short worker processes, one after another, each timing every point in turn
(so drift between processes hits all points alike), each steadied like the stage's own
process (``runner.steady_process`` before torch loads). The interval is then a
random-effects one over processes: each process gives the log of its median (or of its
median paired ratio), and the 95 % interval is their mean ± t(W-1) standard errors, back
on the linear scale; a row records the workers, the rounds and the between-process share
of the variance. With one process it is the order-statistics interval of its rounds.

A stage's budget ``budget_s`` is shared by its workers (each gets the budget left over the
workers left). A worker drops a point whose expected time (its time in the previous
worker, or its cap) no longer fits: points are timed in the order the stage lists them, so
the stage's list order is its priority, and a point no worker could fit is a row
``dropped: ...`` saying why.

How one timing is taken is a clock's job (``inferlab.clocks``: torch's Timer on a CPU,
do_bench or CUDA events on a GPU). A case that fails is a status, not a crash: ``oom``
(``inferlab.memory.is_oom``) or ``error: <message>``.
"""

from __future__ import annotations

import importlib
import math
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from inferlab.clocks import make_clock
from inferlab.memory import check_device, is_oom

_MAX_CALLS_PER_TIMING = 1_000_000
CI_LEVEL = 0.95
MIN_ROUNDS = 6  # with fewer samples no order-statistics interval reaches 95 %
# Student's t, 97.5 % quantile, by degrees of freedom (a 95 % two-sided interval)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 14: 2.145, 16: 2.120, 20: 2.086,
         25: 2.060, 30: 2.042}

Progress = Callable[[int, int, str], object] | None


def median_ci(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float]:
    """A distribution-free ``level`` confidence interval of the median: the order
    statistics (x_(k), x_(n+1-k)) for the largest k whose binomial coverage
    1 - 2·P(Bin(n, ½) < k) still reaches ``level``. NaN, NaN when n is too small."""
    xs, n = sorted(values), len(values)
    best, below = 0, 0.0  # below = P(Bin(n, 1/2) <= k - 1)
    for k in range(1, n // 2 + 1):
        below += math.comb(n, k - 1) / 2**n
        if 1 - 2 * below < level:
            break
        best = k
    return (xs[best - 1], xs[n - best]) if best else (math.nan, math.nan)


def relative_halfwidth(low: float, high: float, centre: float) -> float:
    """(high - low) / 2 / centre: the ± of an interval as a fraction; inf when undefined."""
    if not (math.isfinite(low) and math.isfinite(high)) or centre <= 0:
        return math.inf
    return (high - low) / 2 / centre


def t975(df: int) -> float:
    """Student's t quantile for a 95 % two-sided interval with ``df`` degrees of freedom
    (the nearest tabled df at or below; the normal 1.96 beyond 30)."""
    if df < 1:
        return math.nan
    return _T975[max(k for k in _T975 if k <= df)] if df <= 30 else 1.96


def process_interval(groups: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """(centre, low, high) of positive values measured in several processes: each
    process's median on the log scale, their mean ± t(W-1) standard errors (random
    effects: the spread of the process medians already holds the spread of the rounds),
    back on the linear scale. With one process: its median and order-statistics CI."""
    groups = [g for g in groups if g]
    if len(groups) < 2:
        xs = groups[0] if groups else []
        return (statistics.median(xs) if xs else math.nan, *median_ci(xs))
    logs = [math.log(statistics.median(g)) for g in groups]
    centre = statistics.fmean(logs)
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def between_share(groups: Sequence[Sequence[float]]) -> float | None:
    """The between-process share of the variance of log values (one-way random effects,
    method of moments): sigma_b^2 / (sigma_b^2 + sigma_w^2), where sigma_w^2 is the pooled
    variance of the rounds within a process and sigma_b^2 = var(process means) -
    sigma_w^2 / rounds, floored at 0. None with fewer than two processes of two rounds."""
    groups = [[math.log(x) for x in g] for g in groups if len(g) >= 2]
    if len(groups) < 2:
        return None
    within = statistics.fmean(statistics.variance(g) for g in groups)
    rounds = statistics.fmean(len(g) for g in groups)
    between = max(0.0, statistics.variance([statistics.fmean(g) for g in groups])
                  - within / rounds)
    return between / (between + within) if between + within > 0 else 0.0


def interval_method(groups: Sequence[Sequence[float]]) -> str:
    """How ``process_interval`` made the interval of these groups, in words."""
    sizes = [len(g) for g in groups if g]
    rounds = "-".join(str(n) for n in sorted(set(sizes)))
    if len(sizes) < 2:
        return f"order statistics of {sum(sizes)} rounds in one process"
    return (f"random effects over {len(sizes)} processes x {rounds} rounds "
            f"(mean of log medians, t with {len(sizes) - 1} df)")


@dataclass(frozen=True)
class Ratio:
    """This case's time over its reference's, round by round: the median and its CI."""

    ref: str
    median: float
    ci_low: float
    ci_high: float
    between_share: float | None = None


@dataclass(frozen=True)
class Timing:
    """The timings of one case, in milliseconds per call, one sample per round.

    A case that failed has ``status`` "oom" or "error: <msg>" and NaN times (nothing was
    measured, so no number is given). ``calls_per_timing`` is how many calls one timing
    averaged over (chosen in the warm-up from ``min_run_s``). ``groups`` holds the samples
    per process when several processes timed the case (``time_points``); empty means one
    process, ``samples_ms``. ``over_budget``: a single call was longer than the point's cap.
    """

    samples_ms: tuple[float, ...]
    method: str
    status: str
    calls_per_timing: int = 1
    converged: bool = False
    noisy: bool = False
    ratio: Ratio | None = field(default=None)
    groups: tuple[tuple[float, ...], ...] = ()
    over_budget: bool = False

    @property
    def per_process(self) -> tuple[tuple[float, ...], ...]:
        return self.groups or (self.samples_ms,)

    @property
    def workers(self) -> int:
        return len([g for g in self.per_process if g])

    @property
    def rounds(self) -> int:
        return len(self.samples_ms)

    @property
    def median_ms(self) -> float:
        if self.status != "ok":
            return math.nan
        return process_interval(self.per_process)[0] if self.groups else \
            statistics.median(self.samples_ms)

    @property
    def ci_ms(self) -> tuple[float, float]:
        if self.status != "ok":
            return (math.nan, math.nan)
        return process_interval(self.per_process)[1:] if self.groups else \
            median_ci(self.samples_ms)

    @property
    def iqr_ms(self) -> float:
        if self.status != "ok" or len(self.samples_ms) < 2:
            return math.nan
        q25, _, q75 = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
        return q75 - q25

    def paired_with(self, other: Timing) -> tuple[float, float, float]:
        """(centre, low, high) of this case's time over ``other``'s, paired round by round
        within each process (both were timed in the same rounds)."""
        return process_interval(_ratio_groups(self.per_process, other.per_process))

    def as_row(self) -> dict:
        """The timing columns of prefill.csv / decode.csv (docs/contracts.md); None for
        what was not measured (a failed case)."""
        if self.status != "ok":
            return {"median_ms": None, "ci_low_ms": None, "ci_high_ms": None, "iqr_ms": None,
                    "rounds": self.rounds, "converged": None, "noisy": None,
                    "timing_method": self.method, "ratio_to": None, "ratio": None,
                    "ratio_ci_low": None, "ratio_ci_high": None, "workers": None,
                    "between_share": None, "interval_method": None, "over_budget": None}
        low, high = self.ci_ms
        ratio = self.ratio
        share = ratio.between_share if ratio and ratio.between_share is not None else \
            between_share(self.per_process)
        return {"median_ms": self.median_ms, "ci_low_ms": _none_if_nan(low),
                "ci_high_ms": _none_if_nan(high),
                "iqr_ms": _none_if_nan(self.iqr_ms), "rounds": self.rounds,
                "converged": self.converged,
                "noisy": self.noisy, "timing_method": self.method,
                "ratio_to": ratio.ref if ratio else None,
                "ratio": ratio.median if ratio else None,
                "ratio_ci_low": _none_if_nan(ratio.ci_low) if ratio else None,
                "ratio_ci_high": _none_if_nan(ratio.ci_high) if ratio else None,
                "workers": self.workers, "between_share": share,
                "interval_method": interval_method(self.per_process),
                "over_budget": self.over_budget}


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else value


def _ratio_groups(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> list[list]:
    return [[x / y for x, y in zip(ga, gb, strict=True)] for ga, gb in zip(a, b, strict=True)]


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Median of a[r] / b[r] over rounds r, with its CI."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return (statistics.median(ratios), *median_ci(ratios))


def _failure_status(exc: Exception) -> str:
    if is_oom(exc):
        return "oom"
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"error: {type(exc).__name__}: {first_line}"[:300]


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


def _check_args(cases, pair_with, device, threads, warmup, min_rounds, max_rounds, target,
                time_cap_s, noisy_threshold, min_run_s) -> None:
    check_device(device)
    if not cases:
        raise ValueError("cases is empty: pass at least one {label: callable}")
    for label, fn in cases.items():
        if not callable(fn):
            raise ValueError(f"cases[{label!r}]={fn!r} is not callable")
    for label, refs in (pair_with or {}).items():
        unknown = [r for r in (label, *refs) if r not in cases]
        if unknown or not refs:
            raise ValueError(f"pair_with[{label!r}]={list(refs)!r} must name cases; "
                             f"unknown: {unknown or 'none given'}")
    _check_count("threads", threads, 1)
    _check_count("warmup", warmup, 1)  # the warm-up also sizes the calls per timing
    _check_count("min_rounds", min_rounds, MIN_ROUNDS)
    _check_count("max_rounds", max_rounds, min_rounds)
    for name, value in (("target", target), ("noisy_threshold", noisy_threshold),
                        ("time_cap_s", time_cap_s)):
        if not (isinstance(value, int | float) and value > 0):
            raise ValueError(f"{name}={value!r} must be a number > 0")
    if not min_run_s >= 0:
        raise ValueError(f"min_run_s={min_run_s!r} must be >= 0 seconds")


def _warm_up(clock, warmup: int, min_run_s: float,
             cap_s: float = math.inf) -> tuple[int | None, str, float]:
    """Run the warm-up calls; return (calls per timing, status, fastest call in s), None
    calls when it failed. A call alone longer than ``cap_s`` ends the warm-up.

    Calls per timing follow the fastest warm-up call: the first pays for first touches
    (the heap growing), and any can be preempted on a shared machine, which would leave a
    microsecond case at one call per timing, its timings dominated by the disturbance."""
    try:
        seconds = math.inf
        for _ in range(warmup):
            seconds = min(seconds, clock.seconds_per_call(1))
            if seconds > cap_s:
                break
    except Exception as exc:  # noqa: BLE001 - any failure becomes the case's status
        return None, _failure_status(exc), math.nan
    wanted = math.ceil(min_run_s / max(seconds, 1e-9))
    return max(1, min(wanted, _MAX_CALLS_PER_TIMING)), "ok", seconds


def _reference(label: str, samples: dict, pair_with: Mapping) -> str | None:
    """The fastest (lowest median) of ``label``'s candidate references still timing."""
    refs = [r for r in pair_with.get(label, ()) if r in samples]
    return min(refs, key=lambda r: statistics.median(samples[r])) if refs else None


def _widths(samples: dict, pair_with: Mapping) -> dict[str, float]:
    """label -> the wider of its median's and its paired ratio's relative CI half-width."""
    widths = {}
    for label, xs in samples.items():
        low, high = median_ci(xs)
        width = relative_halfwidth(low, high, statistics.median(xs))
        ref = _reference(label, samples, pair_with)
        if ref is not None and ref != label:
            centre, low, high = paired_ratio(xs, samples[ref])
            width = max(width, relative_halfwidth(low, high, centre))
        widths[label] = width
    return widths


def time_interleaved(
    cases: Mapping[str, Callable[[], object]],
    *,
    threads: int,
    device: str = "cpu",
    pair_with: Mapping[str, Sequence[str]] | None = None,
    warmup: int = 1,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = 30,
    target: float = 0.02,
    time_cap_s: float = 30.0,
    noisy_threshold: float = 0.10,
    min_run_s: float = 0.002,
    progress: Progress = None,
) -> dict[str, Timing]:
    """Time every case, interleaved, in rounds, until the data says it is enough.

    Args:
        cases: label -> zero-argument callable doing the work (inputs bound already).
        threads: intra-op threads while timing (set and restored around each timing).
        device: "cpu" or "cuda".
        pair_with: label -> candidate reference labels; the case's ``ratio`` is paired
            with the fastest of them that timed ok (itself included gives ratio 1).
        warmup: untimed calls per case before any timing; a case whose warm-up fails is
            reported "oom"/"error: ..." and left out of the rounds, the others go on.
        min_rounds, max_rounds: rounds taken at least / at most (one timing per case each).
        target: stop once every CI half-width (median and ratio) is within this fraction.
        time_cap_s: or once this many seconds were spent timing (after min_rounds).
        noisy_threshold: a case whose CI half-width exceeds this fraction is ``noisy``.
        min_run_s: calls per timing are chosen in the warm-up so that one timing lasts at
            least this long; the time reported is per call.
        progress: called as progress(i, n, label): first for each warm-up (n = the number
            of cases, label "warm-up <case>"), then once per round (label "round r").

    Returns: label -> Timing, in the order of ``cases``.
    """
    pair_with = dict(pair_with or {})
    _check_args(cases, pair_with, device, threads, warmup, min_rounds, max_rounds, target,
                time_cap_s, noisy_threshold, min_run_s)
    return _time_cases(cases, pair_with, device=device, threads=threads, warmup=warmup,
                       min_rounds=min_rounds, max_rounds=max_rounds, target=target,
                       time_cap_s=time_cap_s, noisy_threshold=noisy_threshold,
                       min_run_s=min_run_s, progress=progress)


def _time_cases(cases, pair_with, *, device, threads, warmup, min_rounds, max_rounds, target,
                time_cap_s, noisy_threshold, min_run_s, progress) -> dict[str, Timing]:
    """``time_interleaved`` without the argument checks (a worker may take fewer rounds
    than a one-process interval needs: its interval is made over processes)."""
    started = time.perf_counter()
    clocks = {label: make_clock(fn, device, threads, min_run_s) for label, fn in cases.items()}
    failed: dict[str, Timing] = {}
    numbers: dict[str, int] = {}
    over: set[str] = set()
    for i, (label, clock) in enumerate(clocks.items(), start=1):
        if progress:
            progress(i, len(clocks), f"warm-up {label}")
        number, status, seconds = _warm_up(clock, warmup, min_run_s, time_cap_s)
        if number is None:
            failed[label] = Timing((), clock.method, status)
            continue
        numbers[label] = number
        if seconds > time_cap_s:
            over.add(label)
    samples = _rounds(clocks, numbers, pair_with, failed, min_rounds, max_rounds, target,
                      time_cap_s, progress, started)
    widths = _widths(samples, pair_with)
    results = dict(failed)
    for label, xs in samples.items():
        ref = _reference(label, samples, pair_with)
        ratio = None if ref is None else Ratio(ref, *paired_ratio(xs, samples[ref]))
        results[label] = Timing(tuple(xs), clocks[label].method, "ok", numbers[label],
                                widths[label] <= target, widths[label] > noisy_threshold,
                                ratio, over_budget=label in over)
    return {label: results[label] for label in cases}


def _rounds(clocks, numbers, pair_with, failed, min_rounds, max_rounds, target, time_cap_s,
            progress, started: float | None = None) -> dict[str, list[float]]:
    """The interleaved loop; a case failing mid-way moves from the samples to ``failed``.

    The cap counts from ``started`` (the point's start, warm-up included): a round starts
    only if the time spent plus the last round's length still fits in it; the first
    round always runs."""
    samples: dict[str, list[float]] = {label: [] for label in numbers}
    started = time.perf_counter() if started is None else started
    last_round = 0.0
    for r in range(1, max_rounds + 1):
        if r > 1 and time.perf_counter() - started + last_round > time_cap_s:
            break
        if progress:
            progress(r, max_rounds, f"round {r}")
        round_started = time.perf_counter()
        for label in list(samples):
            try:
                seconds = clocks[label].seconds_per_call(numbers[label])
            except Exception as exc:  # noqa: BLE001 - becomes the case's status
                failed[label] = Timing((), clocks[label].method, _failure_status(exc),
                                       numbers[label])
                del samples[label]
                continue
            samples[label].append(seconds * 1e3)
        last_round = time.perf_counter() - round_started
        if r < min_rounds or not samples:
            continue
        if max(_widths(samples, pair_with).values()) <= target:
            break
    return samples


# --------------------------------------------------------------------------- processes

# The worker's first lines: steady the process before torch loads, then time its points.
_WORKER_BOOT = ("import sys; from inferlab.runner import steady_process; steady_process(); "
                "from inferlab.measure import worker_main; sys.exit(worker_main(sys.argv[1:]))")
DROPPED = "dropped: "


@dataclass(frozen=True)
class PointResult:
    """One point measured in up to ``workers`` processes: the timings of its cases, the
    fields the factory gave each case, the rows of what could not run there, and the
    readings taken after the timings (last worker only); or why it was dropped."""

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
        if job["estimates"][i] > left:
            results.append({"dropped": f"{job['estimates'][i]:.1f} s expected, "
                                       f"{max(left, 0):.1f} s of the stage budget left"})
            continue
        began = time.perf_counter()
        built = factory(point)
        say = (lambda step, steps, label, i=i: progress(i, label)) if progress else None
        timings = _time_cases(built["cases"], built.get("pair_with") or {}, device=job["device"],
                              threads=job["threads"], warmup=job["warmup"],
                              min_rounds=job["rounds"], max_rounds=job["rounds"],
                              target=math.inf, time_cap_s=min(job["cap_s"], left),
                              noisy_threshold=math.inf, min_run_s=job["min_run_s"],
                              progress=say)
        read = built.get("read")
        readings = {label: read(label) for label, t in timings.items()
                    if t.status == "ok" and read and job["readings"]}
        results.append({"timings": {label: (t.samples_ms, t.method, t.status,
                                            t.calls_per_timing, t.over_budget)
                                    for label, t in timings.items()},
                        "meta": built.get("meta", {}), "refused": built.get("refused", []),
                        "pair_with": built.get("pair_with") or {},
                        "readings": readings, "seconds": time.perf_counter() - began})
        del built, timings
    return results


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


def _run_worker(job: dict, log: Callable[[str], None], point_names: Sequence[str],
                worker: str) -> list[dict]:
    """One worker process; its progress lines go to ``log``, the profiler's USDT lines
    nowhere, anything else (an error) to ``log`` too."""
    root = str(Path(__file__).resolve().parent.parent)  # this checkout's inferlab, not an install
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    with tempfile.TemporaryDirectory(prefix="inferlab-worker-") as tmp:
        job_path, result_path = Path(tmp, "job.pkl"), Path(tmp, "result.pkl")
        job_path.write_bytes(pickle.dumps(job))
        process = subprocess.Popen([sys.executable, "-c", _WORKER_BOOT, str(job_path),
                                    str(result_path)], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env)
        tail: list[str] = []
        for line in process.stdout:
            line = line.rstrip("\n")
            if line.startswith(_PROGRESS):
                i, _, label = line[len(_PROGRESS):].partition(" ")
                log(f"{worker}, {point_names[int(i)]}: {label}")
            elif line and not line.startswith("USDT:"):
                tail = (tail + [line])[-20:]
        if process.wait() != 0 or not result_path.is_file():
            raise RuntimeError(f"timing worker ({worker}) exited with {process.returncode}: "
                               + "\n".join(tail))
        return pickle.loads(result_path.read_bytes())


def time_points(factory: str, points: Sequence[object], *, workers: int, rounds: int,
                budget_s: float, time_cap_s: float, threads: int, device: str = "cpu",
                warmup: int = 1, target: float = 0.02, noisy_threshold: float = 0.10,
                min_run_s: float = 0.002, names: Sequence[str] | None = None,
                log: Callable[[str], None] | None = None,
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
        run_worker: how a worker runs (a test passes one that stays in process).

    Returns: one PointResult per point, in order.
    """
    _check_count("workers", workers, 1)
    _check_count("rounds", rounds, 1)
    for name, value in (("budget_s", budget_s), ("time_cap_s", time_cap_s)):
        if not (isinstance(value, int | float) and value > 0):
            raise ValueError(f"{name}={value!r} must be a number of seconds > 0")
    names = list(names or [f"point {i + 1}" for i in range(len(points))])
    log = log or (lambda line: None)
    run_worker = run_worker or _run_worker
    cap = time_cap_s / workers
    estimates = [cap] * len(points)
    per_worker: list[list[dict]] = []
    started = time.perf_counter()
    for w in range(workers):
        left = budget_s - (time.perf_counter() - started)
        job = {"factory": factory, "points": list(points), "threads": threads,
               "device": device, "warmup": warmup, "rounds": rounds, "cap_s": cap,
               "min_run_s": min_run_s, "deadline_s": left / (workers - w),
               "estimates": estimates, "readings": w == workers - 1}
        results = run_worker(job, log, names, f"worker {w + 1}/{workers}")
        estimates = [r.get("seconds", e) for r, e in zip(results, estimates, strict=True)]
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
            pairs = _ratio_groups(timing.per_process, ok[ref].per_process)
            share = between_share(pairs) if ref != label else None
            ratio = Ratio(ref, *timing.paired_with(ok[ref]), share)
        width = max(relative_halfwidth(*timing.ci_ms, timing.median_ms),
                    relative_halfwidth(ratio.ci_low, ratio.ci_high, ratio.median)
                    if ratio and ratio.ref != label else 0.0)
        timings[label] = replace(timing, ratio=ratio, converged=width <= target,
                                 noisy=width > noisy_threshold)
    return PointResult(timings, done[-1]["meta"], done[-1]["refused"], done[-1]["readings"])
