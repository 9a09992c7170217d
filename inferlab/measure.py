"""The one timing harness; every timing stage uses it.

Timing follows the chapter's method: warm up first, then run the implementations
interleaved in rounds (A B C A B C ...) so that drift (frequency, other load, page
cache) hits all alike; report the median, the IQR over all timings and the spread
between round medians, and flag a case whose rounds disagree as ``noisy`` instead of
printing one number as if it were stable.

How one timing of one case is taken is a clock's job (``inferlab.clocks``: torch's Timer
on a CPU, do_bench or CUDA events on a GPU); this module decides how many, in what
order, and what they add up to.

A case that fails is a status, not a crash: ``oom`` (``inferlab.memory.is_oom``) or
``error: <message>``. Memory is measured by ``inferlab.memory``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from inferlab.clocks import make_clock
from inferlab.memory import check_device, is_oom

_MAX_CALLS_PER_TIMING = 1_000_000

Progress = Callable[[int, int, str], object] | None


@dataclass(frozen=True)
class Timing:
    """The timings of one case. Times are per call, in milliseconds.

    ``round_spread`` is max/min - 1 over the round medians; ``noisy`` says it exceeded
    the threshold. A case that failed has ``status`` "oom" or "error: <msg>" and NaN times
    (nothing was measured, so no number is given). ``calls_per_timing`` is how many calls
    one timing averaged over (chosen in the warm-up from ``min_run_s``).
    """

    median_ms: float
    iqr_ms: float
    n_timings: int
    round_medians_ms: tuple[float, ...]
    round_spread: float
    noisy: bool
    method: str
    status: str
    calls_per_timing: int = 1

    def as_row(self) -> dict:
        """The timing columns of prefill.csv / decode.csv (docs/contracts.md)."""
        return {
            "median_ms": self.median_ms,
            "iqr_ms": self.iqr_ms,
            "n_timings": self.n_timings,
            "round_spread": self.round_spread,
            "noisy": self.noisy,
        }


def _failure_status(exc: Exception) -> str:
    if is_oom(exc):
        return "oom"
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"error: {type(exc).__name__}: {first_line}"[:300]


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


# --------------------------------------------------------------------------- timing


def _calls_per_timing(seconds_per_call: float, min_run_s: float) -> int:
    """Enough calls that one timing lasts >= min_run_s (µs-scale decode calls need many)."""
    wanted = math.ceil(min_run_s / max(seconds_per_call, 1e-9))
    return max(1, min(wanted, _MAX_CALLS_PER_TIMING))


def _warm_up(clock, warmup: int, min_run_s: float) -> tuple[int | None, str]:
    """Run the warm-up calls; return (calls per timing, status), None when it failed."""
    try:
        for _ in range(warmup):
            seconds = clock.seconds_per_call(1)
    except Exception as exc:  # noqa: BLE001 - any failure becomes the case's status
        return None, _failure_status(exc)
    return _calls_per_timing(seconds, min_run_s), "ok"


def _summarise(per_round_ms: list[list[float]], method: str, number: int,
               noisy_threshold: float) -> Timing:
    timings = [t for round_ms in per_round_ms for t in round_ms]
    round_medians = tuple(statistics.median(r) for r in per_round_ms)
    q25, _, q75 = (statistics.quantiles(timings, n=4, method="inclusive")
                   if len(timings) > 1 else (timings[0],) * 3)
    spread = max(round_medians) / max(min(round_medians), 1e-12) - 1.0
    return Timing(statistics.median(timings), q75 - q25, len(timings), round_medians,
                  spread, spread > noisy_threshold, method, "ok", number)


def _failed(method: str, status: str, n_timings: int = 0, number: int = 0) -> Timing:
    nan = float("nan")
    return Timing(nan, nan, n_timings, (), nan, False, method, status, number)


def _check_timing_args(cases, device, threads, rounds, timings_per_round, warmup,
                       noisy_threshold, min_run_s) -> None:
    check_device(device)
    if not cases:
        raise ValueError("cases is empty: pass at least one {label: callable}")
    for label, fn in cases.items():
        if not callable(fn):
            raise ValueError(f"cases[{label!r}]={fn!r} is not callable")
    _check_count("threads", threads, 1)
    _check_count("rounds", rounds, 1)
    _check_count("timings_per_round", timings_per_round, 1)
    _check_count("warmup", warmup, 1)  # the warm-up also sizes the calls per timing
    if not noisy_threshold > 0:
        raise ValueError(f"noisy_threshold={noisy_threshold!r} must be > 0 (e.g. 0.10)")
    if not min_run_s >= 0:
        raise ValueError(f"min_run_s={min_run_s!r} must be >= 0 seconds")


def time_interleaved(
    cases: Mapping[str, Callable[[], object]],
    *,
    device: str = "cpu",
    threads: int,
    rounds: int = 3,
    timings_per_round: int = 5,
    warmup: int = 1,
    noisy_threshold: float = 0.10,
    min_run_s: float = 0.002,
    progress: Progress = None,
) -> dict[str, Timing]:
    """Time every case, interleaved: for each round, for each slot, A B C A B C ...

    Args:
        cases: label -> zero-argument callable doing the work (inputs bound already).
        device: "cpu" or "cuda".
        threads: intra-op threads while timing (set and restored around each timing).
        rounds, timings_per_round: rounds x timings per case; spread is between rounds.
        warmup: untimed calls per case before any timing; a case whose warm-up fails is
            reported "oom"/"error: ..." and left out of the rounds, the others go on.
        noisy_threshold: a case is ``noisy`` when round_spread exceeds it.
        min_run_s: calls per timing are chosen once, in the warm-up, so that one timing
            lasts at least this long; the time reported is per call.
        progress: called as progress(i, n, label) before each step (1-based), first for the
            warm-ups (n = number of cases, label "warm-up <case>"), then for the timings
            (label "round r/R: <case>").

    Returns: label -> Timing, in the order of ``cases``.
    """
    _check_timing_args(cases, device, threads, rounds, timings_per_round, warmup,
                       noisy_threshold, min_run_s)
    clocks = {label: make_clock(fn, device, threads, min_run_s) for label, fn in cases.items()}
    results: dict[str, Timing] = {}
    numbers: dict[str, int] = {}
    for i, (label, clock) in enumerate(clocks.items(), start=1):
        if progress:
            progress(i, len(clocks), f"warm-up {label}")
        number, status = _warm_up(clock, warmup, min_run_s)
        if number is None:
            results[label] = _failed(clock.method, status)
        else:
            numbers[label] = number
    samples_ms = _timed_rounds(clocks, numbers, rounds, timings_per_round, progress, results)
    for label, per_round in samples_ms.items():
        results[label] = _summarise(per_round, clocks[label].method, numbers[label],
                                    noisy_threshold)
    return {label: results[label] for label in cases}


def _timed_rounds(clocks, numbers, rounds, timings_per_round, progress, failed):
    """The interleaved loop; a case failing mid-way moves from the samples to ``failed``."""
    samples_ms = {label: [[] for _ in range(rounds)] for label in numbers}
    n_steps = rounds * timings_per_round * len(numbers)
    step = 0
    for r in range(rounds):
        for _ in range(timings_per_round):
            for label in list(samples_ms):
                step += 1
                if progress:
                    progress(step, n_steps, f"round {r + 1}/{rounds}: {label}")
                try:
                    seconds = clocks[label].seconds_per_call(numbers[label])
                except Exception as exc:  # noqa: BLE001 - becomes the case's status
                    done = sum(len(x) for x in samples_ms.pop(label))
                    failed[label] = _failed(clocks[label].method, _failure_status(exc),
                                            done, numbers[label])
                    continue
                samples_ms[label][r].append(seconds * 1e3)
    return samples_ms
