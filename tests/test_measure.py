"""Tests for the timing harness and the memory measurement (inferlab.measure, inferlab.memory).

Wall-clock assertions use generous bounds: a sleep of s ms must read at least s ms and
less than ten times that; orderings (a 6 ms case slower than a 1 ms case) and ratios of
sleeps carry the tests; the statistics are checked on known data.
"""

from __future__ import annotations

import math
import random
import statistics
import time

import pytest
import torch

from inferlab.measure import median_ci, relative_halfwidth, time_interleaved
from inferlab.memory import MemoryReading, is_oom, memory_cap, peak_extra_bytes

MiB = 1 << 20
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (CUDA events, max_memory_allocated)")


def _sleeper(ms: float):
    return lambda: time.sleep(ms / 1e3)


def _collapse(calls: list[str]) -> list[str]:
    """AAA BBB -> A B: torch's Timer adds untimed calls before each timing."""
    return [c for i, c in enumerate(calls) if i == 0 or calls[i - 1] != c]


def _naive_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    return torch.softmax(scores, dim=-1) @ v


def test_cases_run_interleaved_a_b_c_after_their_warm_ups():
    calls: list[str] = []
    cases = {name: (lambda n=name: calls.append(n)) for name in "ABC"}
    steps: list[tuple[int, int, str]] = []
    result = time_interleaved(cases, threads=1, min_rounds=6, max_rounds=6, min_run_s=0.0,
                              progress=lambda *a: steps.append(a))
    assert _collapse(calls) == list("ABC") * (1 + 6)  # warm-up A B C, then six rounds
    assert [s[2] for s in steps[:3]] == ["warm-up A", "warm-up B", "warm-up C"]
    assert [s[2] for s in steps[3:]] == [f"round {r}" for r in range(1, 7)]
    assert all(t.rounds == 6 and t.status == "ok" for t in result.values())


@pytest.mark.parametrize("ms", [2, 7])
def test_a_sleeper_reads_its_own_length_in_milliseconds(ms):
    timing = time_interleaved({"sleep": _sleeper(ms)}, threads=1, min_run_s=0.0,
                              max_rounds=6)["sleep"]
    # a sleep never ends early; scheduling adds a little, never a factor of ten
    assert ms <= timing.median_ms < 10 * ms
    assert ms <= timing.ci_ms[0] <= timing.median_ms <= timing.ci_ms[1]
    assert timing.method == "torch.utils.benchmark.Timer"


def test_statistics_of_known_sleeps_and_their_row():
    result = time_interleaved({"fast": _sleeper(1), "slow": _sleeper(6)}, threads=1,
                              min_run_s=0.0, max_rounds=8, pair_with={"slow": ["fast"]})
    fast, slow = result["fast"], result["slow"]
    assert slow.median_ms > fast.median_ms + 3.0
    assert fast.median_ms == statistics.median(fast.samples_ms)
    row = slow.as_row()
    assert set(row) == {"median_ms", "ci_low_ms", "ci_high_ms", "iqr_ms", "rounds",
                        "converged", "noisy", "timing_method", "ratio_to", "ratio",
                        "ratio_ci_low", "ratio_ci_high"}
    assert row["ratio_to"] == "fast" and fast.ratio is None
    assert row["ratio"] == statistics.median(
        [s / f for s, f in zip(slow.samples_ms, fast.samples_ms, strict=True)])


def test_calls_per_timing_grow_for_microsecond_calls():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, generator=gen)
    result = time_interleaved({"tiny": lambda: x.add(1.0), "ms": _sleeper(3)}, threads=1,
                              max_rounds=6, min_run_s=0.002)
    assert result["tiny"].calls_per_timing > 1
    assert result["ms"].calls_per_timing == 1
    assert result["tiny"].median_ms < result["ms"].median_ms


@pytest.mark.parametrize(("values", "expected"), [
    ([5.0, 1.0, 4.0, 2.0, 3.0, 6.0], (1.0, 6.0)),          # n = 6: min and max (96.9 %)
    (list(range(10, 0, -1)), (2, 9)),                        # n = 10: x(2), x(9) (97.9 %)
    ([1.0, 2.0, 3.0, 4.0, 5.0], (math.nan, math.nan)),       # n = 5: no 95 % interval
])
def test_median_ci_is_the_order_statistics_interval(values, expected):
    low, high = median_ci(values)
    assert (low, high) == expected or (math.isnan(low) and math.isnan(expected[0]))


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


class _ScheduledClock:
    """A clock whose r-th timing reads base_ms x drift[r] (r = 0 is the warm-up): the
    harness's statistics on known numbers, free of this machine's noise."""

    method = "scheduled"

    def __init__(self, base_ms: float, drift: list[float]):
        self.base_ms, self.drift, self.calls = base_ms, drift, 0

    def seconds_per_call(self, number: int) -> float:
        factor = self.drift[min(self.calls, len(self.drift) - 1)]
        self.calls += 1
        return self.base_ms * factor / 1e3


def test_pairing_cancels_drift_shared_by_a_round(monkeypatch):
    """Every other round is twice as slow for both cases: the medians' intervals are
    wide, the paired ratio is exactly 2 with no width at all."""
    drift = [1.0] + [1.0, 2.0] * 10
    bases = {"a": 10.0, "b": 20.0}
    monkeypatch.setattr("inferlab.measure.make_clock",
                        lambda fn, device, threads, min_run_s: _ScheduledClock(fn(), drift))
    result = time_interleaved({k: (lambda v=v: v) for k, v in bases.items()}, threads=1,
                              min_run_s=0.0, max_rounds=8, target=0.02,
                              pair_with={"b": ["a"]})
    b = result["b"]
    assert (b.ratio.median, b.ratio.ci_low, b.ratio.ci_high) == (2.0, 2.0, 2.0)
    assert b.samples_ms == (20.0, 40.0) * 4 and b.median_ms == 30.0
    assert relative_halfwidth(*b.ci_ms, b.median_ms) == pytest.approx(1 / 3)
    assert b.rounds == 8 and not b.converged and b.noisy  # its time never converges


def test_a_steady_case_stops_at_min_rounds_and_a_noisy_one_runs_on(monkeypatch):
    schedules = {"steady": [1.0] * 40, "wobbly": [1.0] + [1.0, 3.0] * 20}
    monkeypatch.setattr("inferlab.measure.make_clock",
                        lambda fn, device, threads, min_run_s: _ScheduledClock(3.0, fn()))
    result = time_interleaved({k: (lambda v=v: v) for k, v in schedules.items()}, threads=1,
                              min_run_s=0.0, min_rounds=6, max_rounds=9, target=0.02,
                              time_cap_s=60)
    # one case's wide interval keeps the rounds going for all (they are interleaved)
    assert result["steady"].rounds == result["wobbly"].rounds == 9
    assert result["steady"].converged and not result["wobbly"].converged
    alone = time_interleaved({"steady": lambda: [1.0] * 40}, threads=1, min_run_s=0.0,
                             min_rounds=6, max_rounds=9, target=0.02)
    assert alone["steady"].rounds == 6 and alone["steady"].converged


def test_the_time_cap_stops_after_min_rounds():
    result = time_interleaved({"a": _sleeper(2)}, threads=1, min_run_s=0.0, min_rounds=6,
                              max_rounds=500, target=1e-9, time_cap_s=0.001)
    assert result["a"].rounds == 6 and not result["a"].converged


@pytest.mark.parametrize("failure", [torch.OutOfMemoryError("CUDA out of memory"),
                                     RuntimeError("DefaultCPUAllocator: can't allocate memory"),
                                     MemoryError()])
def test_an_oom_case_is_a_status_and_the_others_still_time(failure):
    def fails():
        raise failure

    result = time_interleaved({"ok": _sleeper(1), "big": fails}, threads=1, max_rounds=6,
                              min_run_s=0.0, pair_with={"ok": ["big"]})
    assert result["big"].status == "oom" and math.isnan(result["big"].median_ms)
    assert result["big"].as_row()["median_ms"] is None  # not measured: an empty cell
    assert result["ok"].status == "ok" and result["ok"].rounds == 6
    assert result["ok"].ratio is None  # its reference failed: no pairing, not a crash
    assert list(result) == ["ok", "big"]


def test_a_case_failing_mid_rounds_is_an_error_with_its_message():
    count = {"n": 0}

    def flaky():
        count["n"] += 1
        if count["n"] > 3:  # the warm-up and two rounds succeed
            raise RuntimeError("shape mismatch in round three")

    result = time_interleaved({"flaky": flaky, "ok": _sleeper(1)}, threads=1, max_rounds=6,
                              min_run_s=0.0)
    assert result["flaky"].status == "error: RuntimeError: shape mismatch in round three"
    assert math.isnan(result["flaky"].median_ms)
    assert result["ok"].status == "ok" and result["ok"].rounds == 6


@pytest.mark.parametrize("bad", [{"threads": 0}, {"warmup": 0}, {"min_rounds": 5},
                                 {"max_rounds": 3}, {"device": "tpu"}, {"target": 0},
                                 {"noisy_threshold": 0.0}, {"time_cap_s": -1}])
def test_bad_timing_arguments_name_the_argument(bad):
    kwargs = {"threads": 1, **bad}
    name, value = next(iter(bad.items()))
    with pytest.raises(ValueError, match=f"{name}={value!r}"):
        time_interleaved({"a": _sleeper(0)}, **kwargs)


def test_pairing_with_an_unknown_case_is_refused():
    with pytest.raises(ValueError, match="pair_with"):
        time_interleaved({"a": _sleeper(0)}, threads=1, pair_with={"a": ["nope"]})


def test_empty_cases_are_rejected():
    with pytest.raises(ValueError, match="cases"):
        time_interleaved({}, threads=1)


@pytest.mark.parametrize("n", [384, 1000])
def test_peak_extra_bytes_reads_a_known_allocation(n):
    gen = torch.Generator().manual_seed(n)
    reading = peak_extra_bytes(lambda: torch.randn(n, n, generator=gen))
    assert isinstance(reading, MemoryReading)
    assert reading.peak_extra_bytes == pytest.approx(4 * n * n, rel=0.10)
    assert "profiler" in reading.method
    assert reading.rss_hwm_delta_bytes is None or reading.rss_hwm_delta_bytes >= 0


def test_peak_extra_bytes_excludes_the_inputs():
    gen = torch.Generator().manual_seed(2)
    big_input = torch.randn(2048, 2048, generator=gen)  # 16 MiB allocated before the call
    reading = peak_extra_bytes(lambda: big_input.sum())
    assert reading.peak_extra_bytes < 1 * MiB


def test_naive_attention_shows_its_score_matrix():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 1024, 64, generator=gen) for _ in range(3))
    reading = peak_extra_bytes(lambda: _naive_attention(q, k, v))
    assert reading.peak_extra_bytes >= 2 * 1024 * 1024 * 4  # (B*H, T, T) fp32 scores


def test_memory_cap_makes_a_too_big_allocation_fail_like_an_oom():
    with memory_cap(64 * MiB):
        with pytest.raises(Exception) as info:
            torch.empty(512 * MiB, dtype=torch.uint8)
        small = torch.empty(8 * MiB, dtype=torch.uint8)  # within the cap: still fine
    assert is_oom(info.value)
    assert torch.empty(512 * MiB, dtype=torch.uint8).numel() == 512 * MiB
    assert small.numel() == 8 * MiB


def test_memory_cap_none_is_no_cap():
    with memory_cap(None):
        assert torch.empty(256 * MiB, dtype=torch.uint8).numel() == 256 * MiB


@pytest.mark.parametrize("cap", [0, -5, 1.5])
def test_memory_cap_rejects_bad_caps(cap):
    with pytest.raises(ValueError, match=f"cap_bytes={cap!r}"):
        with memory_cap(cap):
            pass


@pytest.mark.parametrize("exc", [torch.OutOfMemoryError("x"), MemoryError(),
                                 RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"),
                                 RuntimeError("[enforce fail] DefaultCPUAllocator: boom")])
def test_is_oom_recognises_out_of_memory(exc):
    assert is_oom(exc)


@pytest.mark.parametrize("exc", [RuntimeError("shape mismatch"), ValueError("out of range"),
                                 KeyError("memory")])
def test_is_oom_rejects_other_errors(exc):
    assert not is_oom(exc)


@needs_cuda
def test_cuda_timing_and_peak_memory():
    gen = torch.Generator(device="cuda").manual_seed(4)
    q, k, v = (torch.randn(1, 2, 1024, 64, device="cuda", generator=gen) for _ in range(3))
    result = time_interleaved({"naive": lambda: _naive_attention(q, k, v)}, device="cuda",
                              threads=1, rounds=2, timings_per_round=2)
    assert result["naive"].status == "ok" and result["naive"].median_ms > 0
    assert "L2" in result["naive"].method
    reading = peak_extra_bytes(lambda: _naive_attention(q, k, v), device="cuda")
    assert reading.peak_extra_bytes >= 2 * 1024 * 1024 * 4


@needs_cuda
def test_cuda_memory_cap():
    with memory_cap(64 * MiB, device="cuda"):
        with pytest.raises(Exception) as info:
            torch.empty(1024 * MiB, dtype=torch.uint8, device="cuda")
    assert is_oom(info.value)
