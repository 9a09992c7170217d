"""The one timing harness; every timing stage uses it.

The chapter's claims are ratios (naive/fused, tiled/naive, split/fused), so they are
measured as ratios. The cases are warmed up and then timed in rounds, both interleaved
(A B C, A B C, ...), one timing of each per round, so that drift (frequency, another
tenant, the page cache) hits all alike. A case paired with a reference gets, besides its
own median time, the median of its *per-round* ratio to that reference: both were timed
in the same round, seconds apart, so what slows a round slows both.

After ``min_rounds`` (at least 6, the fewest for a 95% interval), rounds continue until
the 95% confidence interval of every case's median and of every paired ratio is within
``target`` of it, or until ``max_rounds`` or the cap is reached. Each ``Timing`` says how
many rounds it took and whether it ``converged``; one whose interval is wider than
``noisy_threshold`` is ``noisy``. The interval is distribution-free: order statistics of
the samples (``intervals.median_ci``; timings are skewed).

The cap ``time_cap_s`` bounds the whole point, warm-up included: a round starts only
while the time spent and the next round (as long as the last) fit in it; the first always
runs. A case whose single call alone is longer than the cap is ``over_budget``: one
warm-up call, then one timing per process, never minutes of repetition.

Across processes the same harness runs in worker processes (``measurement.workers``);
how one timing is taken is a clock's job (``measurement.clocks``). A case that fails is a
status, not a crash: ``oom`` (``memory.is_oom``) or ``error: <message>``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from inferlab.measurement.clocks import make_clock
from inferlab.measurement.intervals import (
    MIN_ROUNDS,
    between_share,
    interval_method,
    median_ci,
    process_interval,
    process_sd,
    relative_halfwidth,
)
from inferlab.measurement.memory import is_oom

_MAX_CALLS_PER_TIMING = 1_000_000
Progress = Callable[[int, int, str], object] | None


@dataclass(frozen=True)
class Ratio:
    """This case's time over its reference's, round by round: the median and its CI."""

    ref: str
    median: float
    ci_low: float
    ci_high: float
    between_share: float | None = None
    process_sd: float | None = None  # the processes' sd of the log ratio (None: one process)


@dataclass(frozen=True)
class Timing:
    """The timings of one case, in milliseconds per call, one sample per round.

    A failed case has ``status`` "oom" or "error: <msg>" and NaN times. ``calls_per_timing``:
    the calls one timing averaged over (chosen in the warm-up from ``min_run_s``).
    ``groups``: the samples per process when several processes timed the case
    (``workers.time_points``); empty for one process. ``over_budget``: a single call was
    longer than the point's cap.
    """

    samples_ms: tuple[float, ...]
    method: str
    status: str
    calls_per_timing: int = 1
    converged: bool = False
    noisy: bool = False
    ratio: Ratio | None = None
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
        return process_interval(ratio_groups(self.per_process, other.per_process))

    def paired_sd(self, other: Timing) -> float | None:
        """The processes' sd of the log of this case's time over ``other``'s."""
        return process_sd(ratio_groups(self.per_process, other.per_process))

    def as_row(self) -> dict:
        """The timing columns of prefill.csv / decode.csv (docs/contracts.md); None for
        what was not measured (a failed case)."""
        ok, ratio = self.status == "ok", self.ratio
        low, high = self.ci_ms
        return {"median_ms": _none_if_nan(self.median_ms), "ci_low_ms": _none_if_nan(low),
                "ci_high_ms": _none_if_nan(high), "iqr_ms": _none_if_nan(self.iqr_ms),
                "rounds": self.rounds, "converged": self.converged if ok else None,
                "noisy": self.noisy if ok else None, "timing_method": self.method,
                "ratio_to": ratio.ref if ratio else None,
                "ratio": ratio.median if ratio else None,
                "ratio_ci_low": _none_if_nan(ratio.ci_low) if ratio else None,
                "ratio_ci_high": _none_if_nan(ratio.ci_high) if ratio else None}

    def process_row(self) -> dict:
        """How the interval was made: processes, the between-process share of the variance
        (of the paired ratio when there is one, else of the time), the method, and
        ``over_budget``."""
        if self.status != "ok":
            return {"workers": None, "between_share": None, "interval_method": None,
                    "over_budget": None, "process_sd": None, "ratio_process_sd": None}
        ratio = self.ratio
        share = ratio.between_share if ratio and ratio.between_share is not None else \
            between_share(self.per_process)
        return {"workers": self.workers, "between_share": share,
                "interval_method": interval_method(self.per_process),
                "over_budget": self.over_budget, "process_sd": process_sd(self.per_process),
                "ratio_process_sd": ratio.process_sd if ratio else None}


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else value


def ratio_groups(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> list[list]:
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


def _warm_up(clocks, warmup: int, min_run_s: float, cap_s: float, failed: dict,
             progress: Progress) -> tuple[dict[str, int], set[str]]:
    """``warmup`` untimed rounds, interleaved as the timed rounds will be: returns (label
    -> calls per timing, the labels over budget); a case whose call fails moves to
    ``failed``, and one whose call alone is longer than ``cap_s`` gets no further call.

    Interleaved because in the rounds the other cases run in between and the heap takes
    that layout: warm-ups back to back left the first timed round unsettled (naive
    attention at 8,192 tokens: 11.7 s against 2-3 s after). Calls per timing follow each
    case's fastest warm-up call (the first pays for first touches, any can be preempted),
    by its wall time: on a GPU each call also costs a flush and a sleep, so a 10 us
    kernel timed by its events got 110 ms of wall for a "10 ms" timing."""
    fastest = {label: math.inf for label in clocks}
    over: set[str] = set()
    for w in range(1, warmup + 1):
        for i, (label, clock) in enumerate(clocks.items(), start=1):
            if label in failed or label in over:
                continue
            if progress:
                progress(i, len(clocks), f"warm-up {label}" if warmup == 1
                         else f"warm-up {w}/{warmup} {label}")
            try:
                seconds = clock.seconds_per_call(1)
                wall = getattr(clock, "last_wall_s", None)
                fastest[label] = min(fastest[label], seconds if wall is None else wall)
            except Exception as exc:  # noqa: BLE001 - any failure becomes the case's status
                failed[label] = Timing((), clock.method, _failure_status(exc))
                continue
            if fastest[label] > cap_s:
                over.add(label)
    numbers = {label: max(1, min(math.ceil(min_run_s / max(seconds, 1e-9)),
                                 _MAX_CALLS_PER_TIMING))
               for label, seconds in fastest.items() if label not in failed}
    return numbers, over


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
        threads: intra-op threads while timing.
        device: "cpu" or "cuda".
        pair_with: label -> candidate reference labels; the case's ``ratio`` is paired
            with the fastest of them that timed ok (itself included gives ratio 1).
        warmup: untimed rounds before any timing (one call of each case a round); a case
            whose warm-up fails is "oom"/"error: ..." and the others go on.
        min_rounds, max_rounds: rounds taken at least / at most (one timing per case each).
        target: stop once every CI half-width (median and ratio) is within this fraction.
        time_cap_s: the point's seconds, warm-up included (the module's docstring).
        noisy_threshold: a case whose CI half-width exceeds this fraction is ``noisy``.
        min_run_s: one timing lasts at least this long (calls per timing chosen in the
            warm-up); the time reported is per call.
        progress: called as progress(i, n, label) for each warm-up call (n cases, label
            "warm-up <case>", or "warm-up w/W <case>" with W warm-up rounds), then once
            per round (label "round r").

    Returns: label -> Timing, in the order of ``cases``.
    """
    pair_with = dict(pair_with or {})
    started = time.perf_counter()
    clocks = {label: make_clock(fn, device, threads) for label, fn in cases.items()}
    failed: dict[str, Timing] = {}
    numbers, over = _warm_up(clocks, warmup, min_run_s, time_cap_s, failed, progress)
    samples: dict[str, list[float]] = {label: [] for label in numbers}
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
        if r >= min_rounds and samples and max(_widths(samples, pair_with).values()) <= target:
            break
    widths = _widths(samples, pair_with)
    results = dict(failed)
    for label, xs in samples.items():
        ref = _reference(label, samples, pair_with)
        ratio = None if ref is None else Ratio(ref, *paired_ratio(xs, samples[ref]))
        results[label] = Timing(tuple(xs), clocks[label].method, "ok", numbers[label],
                                widths[label] <= target, widths[label] > noisy_threshold,
                                ratio, over_budget=label in over)
    return {label: results[label] for label in cases}
