"""Tests for the timing harness and the memory measurement (inferlab.measure, inferlab.memory).

Wall-clock assertions use generous bounds: a sleep of s ms must read at least s ms and
far less than 20 s; orderings (a 6 ms case slower than a 1 ms case) carry the test.
"""

from __future__ import annotations

import math
import time

import pytest
import torch

from inferlab.measure import time_interleaved
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


@pytest.mark.parametrize("rounds", [1, 3])
def test_cases_run_interleaved_a_b_c(rounds):
    calls: list[str] = []
    cases = {name: (lambda n=name: calls.append(n)) for name in "ABC"}
    steps: list[tuple[int, int, str]] = []
    result = time_interleaved(cases, threads=1, rounds=rounds, timings_per_round=2,
                              min_run_s=0.0, progress=lambda *a: steps.append(a))
    # warm-up A B C, then A B C once per timing slot
    assert _collapse(calls) == list("ABC") * (1 + rounds * 2)
    assert [s[2] for s in steps[:3]] == ["warm-up A", "warm-up B", "warm-up C"]
    assert steps[-1][:2] == (rounds * 2 * 3, rounds * 2 * 3)
    assert all(t.n_timings == rounds * 2 and t.status == "ok" for t in result.values())


def test_statistics_of_known_sleeps():
    result = time_interleaved({"fast": _sleeper(1), "slow": _sleeper(6)}, threads=1,
                              rounds=2, timings_per_round=3, min_run_s=0.0)
    fast, slow = result["fast"], result["slow"]
    assert 1.0 <= fast.median_ms < 20_000
    assert slow.median_ms > fast.median_ms + 3.0
    for t in (fast, slow):
        assert t.n_timings == 6 and len(t.round_medians_ms) == 2
        assert 0 <= t.iqr_ms < 20_000
        assert min(t.round_medians_ms) <= t.median_ms <= max(t.round_medians_ms)
        assert t.round_spread == pytest.approx(
            max(t.round_medians_ms) / min(t.round_medians_ms) - 1)
        assert t.method == "torch.utils.benchmark.Timer"
    assert set(fast.as_row()) == {"median_ms", "iqr_ms", "n_timings", "round_spread", "noisy"}


def test_calls_per_timing_grow_for_microsecond_calls():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, generator=gen)
    result = time_interleaved({"tiny": lambda: x.add(1.0), "ms": _sleeper(3)}, threads=1,
                              rounds=1, timings_per_round=2, min_run_s=0.002)
    assert result["tiny"].calls_per_timing > 1
    assert result["ms"].calls_per_timing == 1
    assert result["tiny"].median_ms < result["ms"].median_ms


def test_a_round_that_is_slow_is_flagged_noisy():
    state = {"round": 0}

    def on_progress(i, n, label):
        if label.startswith("round "):
            state["round"] = int(label.split()[1].split("/")[0])

    def case():
        time.sleep(0.012 if state["round"] == 2 else 0.002)

    result = time_interleaved({"drifting": case}, threads=1, rounds=3, timings_per_round=3,
                              min_run_s=0.0, noisy_threshold=0.5, progress=on_progress)
    timing = result["drifting"]
    assert timing.round_medians_ms[1] > 2 * timing.round_medians_ms[0]
    assert timing.round_spread > 0.5 and timing.noisy


@pytest.mark.parametrize("failure", [torch.OutOfMemoryError("CUDA out of memory"),
                                     RuntimeError("DefaultCPUAllocator: can't allocate memory"),
                                     MemoryError()])
def test_an_oom_case_is_a_status_and_the_others_still_time(failure):
    def fails():
        raise failure

    result = time_interleaved({"ok": _sleeper(1), "big": fails}, threads=1, rounds=2,
                              timings_per_round=2, min_run_s=0.0)
    assert result["big"].status == "oom" and math.isnan(result["big"].median_ms)
    assert result["ok"].status == "ok" and result["ok"].n_timings == 4
    assert list(result) == ["ok", "big"]


def test_a_case_failing_mid_rounds_is_an_error_with_its_message():
    count = {"n": 0}

    def flaky():
        count["n"] += 1
        if count["n"] > 3:  # the warm-up and two timings of round one succeed
            raise RuntimeError("shape mismatch in round two")

    result = time_interleaved({"flaky": flaky, "ok": _sleeper(1)}, threads=1, rounds=2,
                              timings_per_round=2, min_run_s=0.0)
    assert result["flaky"].status == "error: RuntimeError: shape mismatch in round two"
    assert math.isnan(result["flaky"].median_ms)
    assert result["ok"].status == "ok" and result["ok"].n_timings == 4


@pytest.mark.parametrize("bad", [{"threads": 0}, {"rounds": 0}, {"warmup": 0},
                                 {"device": "tpu"}, {"noisy_threshold": 0.0}])
def test_bad_timing_arguments_name_the_argument(bad):
    kwargs = {"threads": 1, **bad}
    name, value = next(iter(bad.items()))
    with pytest.raises(ValueError, match=f"{name}={value!r}"):
        time_interleaved({"a": _sleeper(0)}, **kwargs)


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
