"""Tests for the timing harness: in one process (inferlab.measurement.measure), its
statistics (intervals) and across worker processes (workers).

Wall-clock assertions use generous bounds: a sleep of s ms must read at least s ms and
less than ten times that; orderings (a 6 ms case slower than a 1 ms case) and ratios of
sleeps carry the tests; the statistics are checked on known data.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import signal
import statistics
import time

import pytest
import torch

from inferlab.algorithms.attention import naive_attention
from inferlab.measurement import intervals, measure, workers
from inferlab.measurement.intervals import median_ci, relative_halfwidth
from inferlab.measurement.measure import Ratio, Timing, time_interleaved
from tests.numerics import requires_cuda


def _sleeper(ms: float):
    return lambda: time.sleep(ms / 1e3)


def _timed(cases, **options):
    """time_interleaved on one thread, with no minimum run per timing unless given."""
    return time_interleaved(cases, **{"threads": 1, "min_run_s": 0.0, **options})


def test_cases_run_interleaved_a_b_c_in_their_warm_ups_and_rounds():
    calls: list[str] = []
    cases = {name: (lambda n=name: calls.append(n)) for name in "ABC"}
    steps: list[tuple[int, int, str]] = []
    result = _timed(cases, warmup=2, min_rounds=6, max_rounds=6,
                    progress=lambda *a: steps.append(a))
    # two warm-up rounds A B C, A B C (never A A B B C C), then six timed rounds; runs of
    # one case collapsed: torch's Timer adds untimed calls before each timing
    assert [case for case, _ in itertools.groupby(calls)] == list("ABC") * (2 + 6)
    assert [s[2] for s in steps[:6]] == [f"warm-up {w}/2 {c}" for w in (1, 2) for c in "ABC"]
    assert [s[2] for s in steps[6:]] == [f"round {r}" for r in range(1, 7)]
    assert all(t.rounds == 6 and t.status == "ok" for t in result.values())


@pytest.mark.parametrize("ms", [2, 7])
def test_a_sleeper_reads_its_own_length_in_milliseconds(ms):
    timing = _timed({"sleep": _sleeper(ms)}, max_rounds=6)["sleep"]
    # a sleep never ends early; scheduling adds a little, never a factor of ten
    assert ms <= timing.median_ms < 10 * ms
    assert ms <= timing.ci_ms[0] <= timing.median_ms <= timing.ci_ms[1]
    assert timing.method == "torch.utils.benchmark.Timer"


def test_statistics_of_known_sleeps_and_their_row():
    result = _timed({"fast": _sleeper(1), "slow": _sleeper(6)}, max_rounds=8,
                    pair_with={"slow": ["fast"]})
    fast, slow = result["fast"], result["slow"]
    assert slow.median_ms > fast.median_ms + 3.0
    assert fast.median_ms == statistics.median(fast.samples_ms)
    row = slow.as_row()  # its keys: test_the_row_of_a_paired_timing
    how = slow.process_row()
    assert how == {"workers": 1, "over_budget": False, "between_share": None,
                   "interval_method": "order_statistics", "process_sd": None,
                   "ratio_process_sd": None}
    assert row["ratio_to"] == "fast" and fast.ratio is None
    assert row["ratio"] == statistics.median(
        [s / f for s, f in zip(slow.samples_ms, fast.samples_ms, strict=True)])


def test_calls_per_timing_follow_the_fastest_warm_up_call_not_a_disturbed_last_one():
    """A warm-up call preempted on a loaded machine (here: the last of three sleeps 20 ms)
    must not set a microsecond case to one call per timing."""
    calls = []

    def tiny():
        calls.append(1)
        if len(calls) == 3:
            time.sleep(0.02)

    result = _timed({"tiny": tiny}, warmup=3, max_rounds=6, min_run_s=0.005)
    assert result["tiny"].calls_per_timing >= 10


@pytest.mark.parametrize(("values", "level", "expected"), [
    ([5.0, 1.0, 4.0, 2.0, 3.0, 6.0], 0.95, (1.0, 6.0)),     # n = 6: min and max (96.9 %)
    (list(range(10, 0, -1)), 0.95, (2, 9)),                  # n = 10: x(2), x(9) (97.9 %)
    ([1.0, 2.0, 3.0, 4.0, 5.0], 0.95, None),                 # n = 5: no 95 % interval
    ([], 0.95, None),
    # n = 6: (x(2), x(5)) covers exactly 78.125 %: at that level it is the interval, and
    # just above it (x(1), x(6)), which covers 96.875 %, and nothing above that
    ([6.0, 1.0, 5.0, 2.0, 4.0, 3.0], 0.78125, (2.0, 5.0)),
    ([6.0, 1.0, 5.0, 2.0, 4.0, 3.0], 0.78126, (1.0, 6.0)),
    ([6.0, 1.0, 5.0, 2.0, 4.0, 3.0], 0.96875, (1.0, 6.0)),
    ([6.0, 1.0, 5.0, 2.0, 4.0, 3.0], 0.97, None),
    (list(range(1, 12)), 0.5, (4, 8)),                       # n = 11: k = 4 covers 77 %
])
def test_median_ci_is_the_order_statistics_interval(values, level, expected):
    low, high = median_ci(values, level=level)
    if expected is None:
        assert math.isnan(low) and math.isnan(high)
    else:
        assert (low, high) == expected


def test_the_coverage_of_the_order_statistics_interval_is_at_least_95_percent():
    """Draw skewed samples of known median: the interval must miss it at most ~5 % of
    the time (here: at most 8 of 200 draws of 12, a generous bound on 2.9 % expected)."""
    rng = random.Random(7)
    misses = 0
    for _ in range(200):
        xs = [rng.lognormvariate(0, 1) for _ in range(12)]  # median exactly 1
        low, high = median_ci(xs)
        misses += not (low <= 1.0 <= high)
    assert misses <= 8


class _VirtualTime:
    """perf_counter of a virtual clock that only the virtual clocks move: no real waiting."""

    now = 0.0

    def perf_counter(self):
        return self.now

    def time(self):  # a stage's stop_at is on the wall clock: here the same virtual one
        return self.now


def _virtual(monkeypatch, seconds: dict[str, float | list], calls: list | None = None
             ) -> dict:
    """Replace the harness's time (``measure.time``) and clocks: case label -> seconds per
    call (or one per timing in turn, the last repeated), each call moving the virtual time
    on by that much. ``calls`` collects (label, number). Returns the cases: each returns
    its label, which its clock reads."""
    now = _VirtualTime()
    monkeypatch.setattr(measure, "time", now)

    class Clock:
        method = "virtual"

        def __init__(self, fn):
            self.label = fn()

        timed = 0

        def seconds_per_call(self, number):
            if calls is not None:
                calls.append((self.label, number))
            each = seconds[self.label]
            if isinstance(each, list):
                each = each[min(self.timed, len(each) - 1)]
            self.timed += 1
            if isinstance(each, Exception):  # this call fails
                raise each
            now.now += each * number
            return each

    monkeypatch.setattr(measure, "make_clock", lambda fn, *a: Clock(fn))
    return {label: (lambda x=label: x) for label in seconds}


def _scaled(base_ms: float, schedule: list[float]) -> list[float]:
    """Seconds per call for ``_virtual``: base_ms x schedule[r] (r = 0 is the warm-up)."""
    return [base_ms * factor / 1e3 for factor in schedule]


def test_pairing_cancels_drift_shared_by_a_round(monkeypatch):
    """Every other round is twice as slow for both cases: the medians' intervals are
    wide, the paired ratio is exactly 2 with no width at all."""
    drift = [1.0] + [1.0, 2.0] * 10  # the warm-up, then the rounds
    cases = _virtual(monkeypatch, {"a": _scaled(10.0, drift), "b": _scaled(20.0, drift)})
    result = _timed(cases, max_rounds=8, target=0.02, pair_with={"b": ["a"]})
    b = result["b"]
    assert (b.ratio.median, b.ratio.ci_low, b.ratio.ci_high) == (2.0, 2.0, 2.0)
    assert b.samples_ms == (20.0, 40.0) * 4 and b.median_ms == 30.0
    assert relative_halfwidth(*b.ci_ms, b.median_ms) == pytest.approx(1 / 3)
    assert b.rounds == 8 and not b.converged and b.noisy  # its time never converges


def test_a_steady_case_stops_at_min_rounds_and_a_noisy_one_runs_on(monkeypatch):
    steady, wobbly = _scaled(3.0, [1.0] * 40), _scaled(3.0, [1.0] + [1.0, 3.0] * 20)
    cases = _virtual(monkeypatch, {"steady": steady, "wobbly": wobbly})
    result = _timed(cases, min_rounds=6, max_rounds=9, target=0.02)
    # one case's wide interval keeps the rounds going for all (they are interleaved)
    assert result["steady"].rounds == result["wobbly"].rounds == 9
    assert result["steady"].converged and not result["wobbly"].converged
    alone = _timed(_virtual(monkeypatch, {"steady": steady}), min_rounds=6, max_rounds=9,
                   target=0.02)
    assert alone["steady"].rounds == 6 and alone["steady"].converged


@pytest.mark.parametrize("failure", [torch.OutOfMemoryError("CUDA out of memory"),
                                     RuntimeError("DefaultCPUAllocator: can't allocate memory"),
                                     MemoryError()])
def test_an_oom_case_is_a_status_and_the_others_still_time(failure):
    def fails():
        raise failure

    result = _timed({"ok": _sleeper(1), "big": fails}, max_rounds=6, pair_with={"ok": ["big"]})
    assert result["big"].status == "oom" and math.isnan(result["big"].median_ms)
    assert result["big"].as_row()["median_ms"] is None  # not measured: an empty cell
    assert result["ok"].status == "ok" and result["ok"].rounds == 6
    assert result["ok"].ratio is None  # its reference failed: no pairing, not a crash
    assert list(result) == ["ok", "big"]


@requires_cuda
def test_cuda_timing():
    gen = torch.Generator(device="cuda").manual_seed(4)
    q, k, v = (torch.randn(1, 2, 1024, 64, device="cuda", generator=gen) for _ in range(3))
    result = time_interleaved({"naive": lambda: naive_attention(q, k, v)}, device="cuda",
                              threads=1, max_rounds=6)
    assert result["naive"].status == "ok" and result["naive"].median_ms > 0
    assert "L2" in result["naive"].method


# ---------------------------------------------------------------- statistics at their edges


def test_the_median_not_the_mean_and_its_interval_on_known_samples():
    t = Timing((1.0, 2.0, 3.0, 4.0, 100.0, 5.0), "scheduled", "ok")
    assert t.median_ms == 3.5  # the mean would be 19.2
    assert t.ci_ms == (1.0, 100.0)  # n = 6: the extremes
    assert t.rounds == 6
    row = Timing((1.0, 2.0, 3.0), "m", "ok").as_row()  # three rounds: no 95 % interval
    assert row["ci_low_ms"] is None and row["ci_high_ms"] is None and row["median_ms"] == 2.0


@pytest.mark.parametrize(("samples", "iqr"), [
    ((1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0), 3.5),   # inclusive quartiles 2.75 and 6.25
    ((5.0, 1.0, 3.0, 2.0, 4.0), 2.0),                   # 2 and 4
    ((7.0,) * 6, 0.0),
])
def test_the_iqr_uses_inclusive_quartiles(samples, iqr):
    assert Timing(samples, "scheduled", "ok").iqr_ms == iqr


def test_a_failed_timing_reports_nothing_measured():
    t = Timing((), "scheduled", "oom", calls_per_timing=4)
    assert math.isnan(t.median_ms) and math.isnan(t.iqr_ms)
    assert all(math.isnan(x) for x in t.ci_ms)
    row = t.as_row()
    assert row == {"median_ms": None, "ci_low_ms": None, "ci_high_ms": None, "iqr_ms": None,
                   "rounds": 0, "converged": None, "noisy": None, "timing_method": "scheduled",
                   "ratio_to": None, "ratio": None, "ratio_ci_low": None,
                   "ratio_ci_high": None}
    assert t.process_row() == {"workers": None, "between_share": None,
                               "interval_method": None, "over_budget": None,
                               "process_sd": None, "ratio_process_sd": None}


def test_the_row_of_a_paired_timing():
    t = Timing((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), "m", "ok", converged=True, noisy=False,
               ratio=Ratio("naive", 0.5, 0.25, 0.75))
    assert t.as_row() == {"median_ms": 3.5, "ci_low_ms": 1.0, "ci_high_ms": 6.0,
                          "iqr_ms": 2.5, "rounds": 6, "converged": True, "noisy": False,
                          "timing_method": "m", "ratio_to": "naive", "ratio": 0.5,
                          "ratio_ci_low": 0.25, "ratio_ci_high": 0.75}


@pytest.mark.parametrize(("low", "high", "centre", "width"), [
    (9.0, 11.0, 10.0, 0.1), (10.0, 10.0, 10.0, 0.0), (1.0, 3.0, 4.0, 0.25),
    (math.nan, 1.0, 1.0, math.inf), (1.0, math.inf, 1.0, math.inf),
    (1.0, 2.0, 0.0, math.inf), (1.0, 2.0, -1.0, math.inf),
])
def test_relative_halfwidth(low, high, centre, width):
    assert relative_halfwidth(low, high, centre) == width


def test_paired_ratio_is_the_median_of_per_round_ratios_with_its_interval():
    a = [2.0, 4.0, 6.0, 8.0, 10.0, 36.0]
    b = [1.0, 2.0, 2.0, 2.0, 2.0, 4.0]
    assert measure.paired_ratio(a, b) == (3.5, 2.0, 9.0)  # ratios 2 2 3 4 5 9
    with pytest.raises(ValueError):
        measure.paired_ratio([1.0, 2.0], [1.0])


def test_noisy_and_converged_at_their_thresholds(monkeypatch):
    """The interval's half-width equal to the threshold is not noisy (noisy is wider than
    it), and equal to the target is converged (converged is within it) and ends the
    rounds."""
    schedule = [1.0, 0.9, 1.0, 1.0, 1.0, 1.0, 1.1]
    case = _virtual(monkeypatch, {"a": _scaled(10.0, schedule)})
    first = _timed(case, max_rounds=6)["a"]
    width = relative_halfwidth(*first.ci_ms, first.median_ms)
    assert width == pytest.approx(0.1)
    _virtual(monkeypatch, {"a": _scaled(10.0, schedule + [3.0, 0.2] * 5)})  # would widen it
    at = _timed(case, max_rounds=12, noisy_threshold=width, target=width)["a"]
    assert not at.noisy and at.converged and at.rounds == 6
    _virtual(monkeypatch, {"a": _scaled(10.0, schedule)})
    under = _timed(case, max_rounds=6, noisy_threshold=width * (1 - 1e-9),
                   target=width * (1 - 1e-9))["a"]
    assert under.noisy and not under.converged


def test_a_paired_ratio_wider_than_the_median_keeps_the_rounds_going(monkeypatch):
    """Each case alone is steady in its median; their per-round ratio is not."""
    cases = _virtual(monkeypatch, {"a": _scaled(1.0, [1.0] * 21),
                                   "b": _scaled(1.0, [1.0] + [1.0, 1.0, 2.0, 0.5] * 5)})
    result = _timed(cases, max_rounds=8, target=0.02, pair_with={"b": ["a"]})
    assert result["b"].rounds == 8 and not result["b"].converged and result["b"].noisy
    _virtual(monkeypatch, {"a": 0.001, "b": 0.001})
    alone = _timed(cases, max_rounds=8, target=0.02, pair_with={"b": ["a"]})
    assert alone["b"].rounds == 6 and alone["b"].converged


def test_the_reference_is_the_fastest_candidate_and_itself_gives_one(monkeypatch):
    """By time, not by name: the fast one sorts last."""
    cases = _virtual(monkeypatch, {"a_slow": 0.004, "z_fast": 0.002, "case": 0.008})
    result = _timed(cases, max_rounds=6,
                    pair_with={"case": ["a_slow", "z_fast"], "z_fast": ["z_fast"]})
    assert result["case"].ratio.ref == "z_fast" and result["case"].ratio.median == 4.0
    assert (result["case"].ratio.ci_low, result["case"].ratio.ci_high) == (4.0, 4.0)
    assert result["z_fast"].ratio == Ratio("z_fast", 1.0, 1.0, 1.0)
    assert result["a_slow"].ratio is None


def test_the_defaults(monkeypatch):
    """30 rounds at most, a ±2 % target, 2 ms per timing, on the CPU."""
    made: list[tuple] = []
    cases = _virtual(monkeypatch, {"w": _scaled(0.5, [1.0] + [1.0, 2.0] * 40)})
    virtual = measure.make_clock
    monkeypatch.setattr(measure, "make_clock", lambda fn, device, threads: (
        made.append((device, threads)), virtual(fn, device, threads))[1])
    wobbly = time_interleaved(cases, threads=3)["w"]
    assert wobbly.rounds == 30 and not wobbly.converged
    assert wobbly.calls_per_timing == 4  # ceil(2 ms / 0.5 ms)
    assert made == [("cpu", 3)]
    # a half-width of 1/3: not within the ±2 % target, wider than the 10 % noise threshold
    assert wobbly.noisy
    # a half-width of 5 %: neither converged nor noisy
    cases = _virtual(monkeypatch, {"m": _scaled(0.5, [1.0, 0.95, 1.0, 1.0, 1.0, 1.0, 1.05])})
    mild = time_interleaved(cases, threads=1, max_rounds=6)["m"]
    assert relative_halfwidth(*mild.ci_ms, mild.median_ms) == pytest.approx(0.05)
    assert not mild.converged and not mild.noisy


@pytest.mark.parametrize(("seconds", "warmup", "cap", "rounds"), [
    # a 2.5 s warm-up, then rounds of 2.5 and 3.5 s in turn. After round 8 26.5 s are spent
    # and the last round took 3.5: 30 s, exactly the cap, so round 9 runs (29 s); round 10
    # would end at 31.5 s and does not start
    ([2.5] + [2.5, 3.5] * 10, 1, 30.0, 9),
    (2.0, 2, 10.0, 3),  # warm-up 2 x 2 s, rounds of 2 s: the warm-up's 4 s leave three
])
def test_a_round_starts_only_if_it_fits_in_the_cap_warm_up_counted(monkeypatch, seconds,
                                                                   warmup, cap, rounds):
    cases = _virtual(monkeypatch, {"w": seconds})
    timing = _timed(cases, warmup=warmup, max_rounds=20, target=1e-9, time_cap_s=cap)["w"]
    assert timing.rounds == rounds and not timing.converged and not timing.over_budget


def test_calls_per_timing_fill_min_run_and_are_capped(monkeypatch):
    calls: list = []
    case = _virtual(monkeypatch, {"a": 0.0005}, calls)
    timing = _timed(case, min_run_s=0.002, max_rounds=6, warmup=3)["a"]
    # the warm-up: three single calls; then ceil(2 ms / 0.5 ms) = 4 calls per timing
    assert [n for _, n in calls] == [1, 1, 1] + [4] * 6 and timing.calls_per_timing == 4
    _virtual(monkeypatch, {"a": 0.005})
    slow = _timed(case, min_run_s=0.002, max_rounds=6)["a"]
    assert slow.calls_per_timing == 1
    _virtual(monkeypatch, {"a": 0.0})
    instant = _timed(case, min_run_s=0.002, max_rounds=6)["a"]
    assert instant.calls_per_timing == 1_000_000  # 2 ms at the 1 ns floor, capped


def test_progress_counts_warm_ups_then_rounds(monkeypatch):
    steps: list[tuple] = []
    cases = _virtual(monkeypatch, {"a": 0.001, "b": 0.001})
    _timed(cases, max_rounds=7, progress=lambda *a: steps.append(a))
    assert steps == [(1, 2, "warm-up a"), (2, 2, "warm-up b")] + \
        [(r, 7, f"round {r}") for r in range(1, 7)]


def test_a_failure_status_keeps_its_first_line_and_is_bounded():
    long = RuntimeError("x" * 500 + "\nsecond line")
    status = measure._failure_status(long)
    assert status == ("error: RuntimeError: " + "x" * 500)[:300] and len(status) == 300
    assert measure._failure_status(ValueError("bad\nmore")) == "error: ValueError: bad"
    assert measure._failure_status(KeyError()) == "error: KeyError: "
    assert measure._failure_status(MemoryError()) == "oom"


def test_a_case_failing_mid_rounds_is_an_error_and_the_others_time_on(monkeypatch):
    """The warm-up and two rounds succeed, the third fails: the case is its error (its
    calls per timing and clock's method kept, nothing measured); the other case times on."""
    cases = _virtual(monkeypatch, {"a": [0.0005] * 3 + [RuntimeError("lost the device\nmore")],
                                   "ok": 0.005})
    result = _timed(cases, min_run_s=0.002, max_rounds=6)
    timing = result["a"]
    assert timing.status == "error: RuntimeError: lost the device"
    assert timing.calls_per_timing == 4 and timing.samples_ms == () and timing.rounds == 0
    assert timing.method == "virtual" and math.isnan(timing.median_ms)
    assert result["ok"].status == "ok" and result["ok"].rounds == 6


# ---------------------------------------------------------------- budgets, on virtual time


def test_a_call_longer_than_the_cap_is_timed_a_bounded_number_of_times(monkeypatch):
    """A 300 s call (an ISA's slow fallback) against a 12 s cap: one warm-up call of the
    three asked, one timing, flagged over budget; the quick case beside it is timed too."""
    calls = []
    cases = _virtual(monkeypatch, {"slow": 300.0, "quick": 0.01}, calls)
    result = _timed(cases, warmup=3, max_rounds=20, time_cap_s=12.0)
    assert [c for c in calls if c[0] == "slow"] == [("slow", 1), ("slow", 1)]
    # reported in milliseconds per call: 300 s is 300,000 ms, not 300 nor 3e8
    assert result["slow"].over_budget and result["slow"].median_ms == 300_000.0
    assert not result["quick"].over_budget and result["quick"].rounds == 1
    assert measure.time.now < 2 * 300 + 1  # two calls of it, never minutes of repetition


@pytest.mark.parametrize(("df", "t"), [(1, 12.706), (2, 4.303), (4, 2.776), (13, 2.179),
                                       (30, 2.042), (31, 1.96)])
def test_t975(df, t):
    assert intervals.t975(df) == t


def test_the_interval_over_processes_predicts_another_run_of_as_many_processes():
    groups = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [4.0, 4.0, 4.0]]  # medians 2, 4, 4
    centre, low, high = intervals.process_interval(groups)
    logs = [math.log(2), math.log(4), math.log(4)]
    # the next run's mean of 3 log medians is as uncertain as this one's: sqrt(1/3 + 1/3)
    half = 4.303 * statistics.stdev(logs) * math.sqrt(1 / 3 + 1 / 3)
    assert centre == pytest.approx(math.exp(statistics.fmean(logs)))
    assert (low, high) == pytest.approx((centre * math.exp(-half), centre * math.exp(half)))
    centre, low, high = intervals.process_interval([[5.0, 1.0, 3.0]])  # one process
    assert centre == 3.0 and math.isnan(low) and math.isnan(high)


def test_the_between_process_share_on_known_groups():
    same = [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]  # identical processes: nothing between
    assert intervals.between_share(same) == 0.0
    apart = [[1.0, 1.0 + 1e-9], [10.0, 10.0 + 1e-8]]  # all the spread between processes
    assert intervals.between_share(apart) == pytest.approx(1.0)
    logs = [[math.log(x) for x in g] for g in ([1.0, 2.0], [3.0, 5.0])]
    within = statistics.fmean(statistics.variance(g) for g in logs)
    between = statistics.variance([statistics.fmean(g) for g in logs]) - within / 2
    assert intervals.between_share([[1.0, 2.0], [3.0, 5.0]]) == pytest.approx(
        between / (between + within))
    assert intervals.between_share([[1.0, 2.0]]) is None


def test_a_timing_over_processes_takes_its_interval_from_them():
    groups = ((10.0, 11.0, 10.0), (12.0, 12.0, 13.0), (11.0, 11.0, 11.0))
    samples = tuple(x for g in groups for x in g)
    # the between-process share: the paired ratio's where it has one, else the time's
    paired = Timing(samples, "m", "ok", groups=groups, ratio=Ratio("ref", 1.0, 0.9, 1.1, 0.42))
    assert paired.process_row()["between_share"] == 0.42
    t = Timing(samples, "m", "ok", groups=groups, ratio=Ratio("ref", 1.0, 0.9, 1.1))
    assert t.process_row()["between_share"] == intervals.between_share(groups) != 0.42
    assert t.workers == 3 and t.rounds == 9
    assert (t.median_ms, *t.ci_ms) == intervals.process_interval(groups)
    row = t.process_row()
    assert row["interval_method"] == "random_effects"
    logs = [math.log(statistics.median(g)) for g in t.per_process]
    assert row["process_sd"] == pytest.approx(statistics.stdev(logs))
    assert 0 < row["between_share"] <= 1


def _in_process(monkeypatch, seconds: dict[str, float], factory=None, jobs=None):
    """time_points with its workers run here, on virtual time, on points built by
    ``factory`` (default _virtual_cases). Returns ``jobs`` (each worker's job appended as it
    starts) and time_points on one thread, one warm-up, no minimum run per timing."""
    _virtual(monkeypatch, seconds)
    monkeypatch.setattr(workers, "time", measure.time)  # the stage's budget on that clock
    monkeypatch.setattr(workers, "_factory", lambda name: factory or _virtual_cases)
    jobs = [] if jobs is None else jobs

    def run_worker(job, log, names, worker):
        jobs.append(job)
        return workers._worker_job(job, None)

    def time_points(points, **options):
        return workers.time_points("virtual", points, **{
            "threads": 1, "warmup": 1, "min_run_s": 0.0, "run_worker": run_worker, **options})

    return jobs, time_points


def _virtual_cases(point):
    """A factory: a point is a list of labels; each case returns its label."""
    labels = list(point)
    return {"cases": {label: (lambda x=label: x) for label in labels},
            "pair_with": {label: [labels[0]] for label in labels},
            "meta": {label: {"impl": label} for label in labels}, "refused": [],
            "read": lambda label: {"kernel": f"k-{label}"}}


def test_time_points_share_the_budget_and_drop_the_last_points(monkeypatch):
    """Three workers, a 14 s stage budget, a 6 s point cap (2 s a worker). Worker 1 has
    4.67 s: the first point takes 1.8 s (its warm-up round and five timed rounds of 0.3 s,
    the rounds' maximum, fit in 2 s), the second is
    a 4 s call over its share (one warm-up call, one timing: 8 s, flagged), so the third
    finds no time left. Workers 2 and 3 (2.1 s each) expect the second point's 8 s and
    skip it, and start the third (not timed before) with what is left. So the first point
    has three processes, the second one, the third two; the budget holds exactly."""
    seconds = {"a": 0.1, "b": 0.2, "c": 4.0, "d": 0.05}
    jobs, time_points = _in_process(monkeypatch, seconds)
    first, slow, last = time_points([["a", "b"], ["c"], ["d"]], workers=3, rounds=5,
                                    budget_s=14.0, time_cap_s=6.0)
    assert first.timings["a"].workers == 3 and first.timings["b"].rounds == 15
    assert first.timings["b"].ratio.ref == "a"
    assert first.timings["b"].ratio.median == pytest.approx(2.0)
    assert first.readings == {"a": {"kernel": "k-a"}, "b": {"kernel": "k-b"}}
    assert slow.timings["c"].over_budget and slow.timings["c"].rounds == 1
    assert slow.timings["c"].workers == 1
    assert last.timings["d"].workers == 2 and last.dropped is None
    # worker 1 spent 9.8 s; 4.2 s left for two workers, each of which spends its 2.1 s
    assert [job["deadline_s"] for job in jobs] == pytest.approx([14 / 3, 2.1, 2.1])
    assert measure.time.now == pytest.approx(14.0)
    # each point read by the first worker that timed it: the third by worker 2
    assert [job["readings"] for job in jobs] == [[True] * 3, [False, False, True],
                                                 [False, False, False]]
    assert last.readings == {"d": {"kernel": "k-d"}}


def test_a_point_that_fits_no_worker_is_dropped_with_the_reason(monkeypatch):
    """A 1 s budget over two workers: the first point (5 s a call, longer than the 0.5 s
    worker 1 has: over budget) takes one warm-up call and one timing; worker 1 has no
    time left for the second point, and worker 2 none for either: the second point is
    dropped, and worker 2 is not even started."""
    jobs, time_points = _in_process(monkeypatch, {"a": 5.0, "b": 0.1})
    first, second = time_points([["a"], ["b"]], workers=2, rounds=3, budget_s=1.0,
                                time_cap_s=100.0)
    assert first.timings["a"].over_budget and first.timings["a"].rounds == 1
    assert second.dropped == {"status": "dropped", "cause": "budget", "budget_left_s": 0.0}
    assert len(jobs) == 1


def test_the_readings_stop_case_by_case_at_the_step_limit(monkeypatch):
    """A reading of 5 s a case (the profiler over a Python loop of thousands of kernels on
    an H200) and a step limit 3 s in: the first case is read, the second is not started
    (checked per case, not per point)."""
    def slow_reads(point):
        built = _virtual_cases(point)
        built["read"] = lambda label: (setattr(now, "now", now.now + 5.0),
                                       {"kernel": f"k-{label}"})[1]
        return built

    _, time_points = _in_process(monkeypatch, {"a": 0.01, "b": 0.01}, slow_reads)
    now = measure.time
    (point,) = time_points([["a", "b"]], workers=1, rounds=2, budget_s=100.0, time_cap_s=10.0,
                           stop_at=3.0)
    assert point.timings["a"].status == point.timings["b"].status == "ok"
    assert point.readings == {"a": {"kernel": "k-a"}}
    assert now.now < 3.0 + 5.0 + 1.0  # one case's reading past the limit, not the point's


def test_points_past_the_step_limit_are_stopped_and_those_before_it_kept(monkeypatch):
    """A stage given ``--limit-s`` (the GPU call's steps) keeps what it timed before the
    limit; the points it did not reach are rows "stopped", cause step_limit, not lost."""
    _, time_points = _in_process(monkeypatch, {"a": 1.0, "c": 1.0, "d": 1.0})
    first, *rest = time_points([["a"], ["c"], ["d"]], workers=2, rounds=2, budget_s=100.0,
                               time_cap_s=100.0, stop_at=1.5)
    assert first.timings["a"].status == "ok" and first.dropped is None
    assert [r.dropped for r in rest] == [workers.STOPPED] * 2
    assert workers.STOPPED["cause"] == "step_limit"


def test_time_points_in_real_worker_processes():
    """A real worker (steadied, a fresh interpreter) times a tiny point; test_stages.py's
    stages time theirs in two."""
    lines = []
    results = workers.time_points("tests.test_measure:_tiny_cases", [3], workers=1, rounds=2,
                                  budget_s=60.0, time_cap_s=20.0, threads=1, warmup=1,
                                  min_run_s=0.0, names=["tiny"],
                                  progress=lambda i, n, what: lines.append(f"{i}/{n} {what}"))
    timing = results[0].timings["add"]
    assert timing.status == "ok" and timing.workers == 1 and timing.rounds == 2
    assert results[0].readings["add"]["omp"] == "PASSIVE"  # steadied before torch loaded
    assert "1/1 tiny: worker 1/1, round 2" in lines
    assert not any("USDT" in line for line in lines)


def _tiny_cases(n):
    import os

    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    return {"cases": {"add": lambda: x.add(1.0)}, "pair_with": {},
            "meta": {"add": {}}, "refused": [],
            "read": lambda label: {"omp": os.environ.get("OMP_WAIT_POLICY")}}


def test_the_readings_follow_every_timing_of_their_worker(monkeypatch):
    """The profiler (the factory's ``read``) runs only in the first worker and only after
    all of that worker's timings, never between them (pytorch#144455: a profiler session
    can slow what runs after it)."""
    def cases(point):
        built = _virtual_cases(point)
        built["read"] = lambda label: events.append("read") or {}
        return built

    events = []  # "time", "read", and each worker's job as it starts
    _, time_points = _in_process(monkeypatch, {"a": 0.1, "b": 0.1}, cases, jobs=events)
    inner = measure.make_clock

    def make(fn, *args):
        clock = inner(fn, *args)
        timed = clock.seconds_per_call
        clock.seconds_per_call = lambda n: (events.append("time"), timed(n))[1]
        return clock

    monkeypatch.setattr(measure, "make_clock", make)
    time_points([["a"], ["b"]], workers=2, rounds=2, budget_s=100.0, time_cap_s=10.0)
    first, second = "".join("w" if isinstance(e, dict) else e[0] for e in events).split("w")[1:]
    assert first == "t" * 6 + "rr" and second == "t" * 6  # 2 warm-ups + 2 points x 2 rounds


def test_every_warm_up_round_runs_in_a_worker_short_of_time(monkeypatch):
    """Two cases of 0.6 s a call, two warm-up rounds, a 1.0 s cap: both warm-up rounds
    run (interleaved: a b a b), then the first timed round, which always runs: a worker
    short of time still times a heap laid out as the rounds lay it out, like the others."""
    calls: list = []
    cases = _virtual(monkeypatch, {"a": 0.6, "b": 0.6}, calls)
    result = _timed(cases, warmup=2, min_rounds=6, max_rounds=6, time_cap_s=1.0)
    assert [c[0] for c in calls] == list("abab") + list("ab")
    assert [result[x].rounds for x in "ab"] == [1, 1]
    assert not any(result[x].over_budget for x in "ab")


def test_a_case_failing_in_a_warm_up_call_is_a_status_and_the_others_go_on(monkeypatch):
    """z fails its first warm-up call, b its second (the calls after it would not): each is
    a failed timing (no samples, its clock's method), not called again; the others still
    get their warm-up calls in those rounds, which size their calls per timing (50 ms of
    10 and 20 ms calls: 5 and 3), and are timed as if the failed ones had not been there."""
    calls: list = []
    cases = _virtual(monkeypatch, {"z": [RuntimeError("no")], "a": 0.01, "c": 0.02,
                           "b": [0.01, RuntimeError("boom\nmore"), 0.01]}, calls)
    result = _timed(cases, warmup=2, min_run_s=0.05, min_rounds=6, max_rounds=6,
                    time_cap_s=100.0, pair_with={"a": ["b"]})
    assert calls[:4] == [("z", 1), ("a", 1), ("c", 1), ("b", 1)]
    assert (result["z"].samples_ms, result["z"].status) == ((), "error: RuntimeError: no")
    b = result["b"]
    assert (b.samples_ms, b.method, b.status) == ((), "virtual", "error: RuntimeError: boom")
    assert [c[0] for c in calls].count("b") == 2 and [c[0] for c in calls].count("z") == 1
    assert [result[x].rounds for x in "ac"] == [6, 6] and result["a"].ratio is None
    assert [result[x].calls_per_timing for x in "ac"] == [5, 3]


def test_ratio_groups_pair_process_by_process_and_round_by_round():
    assert measure.ratio_groups([[2.0, 6.0], [3.0]], [[1.0, 2.0], [3.0]]) == [[2.0, 3.0], [1.0]]
    with pytest.raises(ValueError):
        measure.ratio_groups([[2.0, 6.0]], [[1.0]])  # a round missing
    with pytest.raises(ValueError):
        measure.ratio_groups([[2.0], [1.0]], [[1.0]])  # a process missing


def test_a_call_exactly_as_long_as_the_cap_is_not_over_budget(monkeypatch):
    """The cap is a limit, not a strict one: a call of exactly the cap still gets all its
    warm-up calls and is not over budget."""
    calls: list = []
    cases = _virtual(monkeypatch, {"a": 1.0}, calls)
    timing = _timed(cases, warmup=2, min_run_s=2.0, min_rounds=6, max_rounds=6,
                    time_cap_s=1.0)["a"]
    # two warm-up calls, then the rounds' timings of two calls each
    assert calls[:3] == [("a", 1), ("a", 1), ("a", 2)] and not timing.over_budget


def killed_while_building(point):
    """A factory that dies the way an out-of-memory kill does."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_worker_drops_its_points_with_the_reason():
    """The out-of-memory killer's SIGKILL: the stage keeps the rest instead of crashing."""
    results = workers.time_points("tests.test_measure:killed_while_building", [1, 2],
                                  workers=1, rounds=2, budget_s=60, time_cap_s=10, threads=1)
    assert [r.dropped for r in results] == [{"status": "dropped", "cause": "killed",
                                             "budget_left_s": None}] * 2
