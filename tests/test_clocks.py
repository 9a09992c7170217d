"""Tests for inferlab.measurement.clocks: how one timing is taken, on a CPU and (simulated)
on a GPU.

The GPU clock cannot run here, so torch.cuda's events, synchronize and _sleep, the L2
flush buffer and the host's clock are replaced by stand-ins on a fake timeline: a call
takes CALL_MS of GPU time and LAUNCH_S of host time, the flush FLUSH_MS, and every step
is logged: the tests check the steps' order, what is timed and what the GPU sleep covers,
never wall-clock time.
"""

from __future__ import annotations

import sys

import pytest
import torch

from inferlab.measurement import clocks, measure
from inferlab.measurement.clocks import make_clock
from inferlab.measurement.measure import time_interleaved
from tests.numerics import requires_cuda

CALL_MS, FLUSH_MS = 2.0, 5.0
LAUNCH_S = 50e-6    # the host's time to launch one call
CYCLES_PER_S = 1e9  # a 1 GHz fake GPU: cycles = seconds x 1e9
COVERED = clocks.LAUNCH_COVER * LAUNCH_S + clocks.LAUNCH_MARGIN_S


class FakeGpu:
    """A GPU timeline (the events record it, the work advances it) and a host clock."""

    def __init__(self):
        self.now_ms, self.host_s = 0.0, 0.0
        self.log: list[str] = []
        self.slept: list[float] = []

    def call(self):
        self.log.append("call")
        self.now_ms += CALL_MS
        self.host_s += LAUNCH_S

    def sleep(self, cycles):
        self.log.append("sleep")
        self.slept.append(cycles / CYCLES_PER_S)

    def flush(self):
        self.log.append("flush")
        self.now_ms += FLUSH_MS


@pytest.fixture
def gpu(monkeypatch) -> FakeGpu:
    fake = FakeGpu()

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing, "an event that times must be created with enable_timing"
            self.at_ms = None

        def record(self):
            fake.log.append("record")
            self.at_ms = fake.now_ms

        def elapsed_time(self, end):
            return end.at_ms - self.at_ms

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: fake.log.append("sync"))
    monkeypatch.setattr(torch.cuda, "_sleep", fake.sleep)
    monkeypatch.setattr(clocks, "_flush_buffer", lambda: fake)
    monkeypatch.setattr(clocks, "_sleep_cycles_per_s", lambda: CYCLES_PER_S)
    monkeypatch.setattr(clocks.time, "perf_counter", lambda: fake.host_s)
    return fake


@pytest.mark.parametrize("number", [1, 7])
def test_gpu_clock_makes_exactly_the_calls_asked_each_flush_sleep_start_call_end(gpu, number):
    # A slow case is timed with one call per timing: do_bench ran a call at least 8 times.
    seconds = make_clock(gpu.call, "cuda", threads=1).seconds_per_call(number)
    assert gpu.log == ["sync", *["flush", "sleep", "record", "call", "record"] * number,
                       "sync"]
    assert seconds == pytest.approx(CALL_MS / 1e3)  # the flush is outside the events


def test_gpu_clock_needs_no_triton(gpu, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    monkeypatch.setitem(sys.modules, "triton.testing", None)
    clock = make_clock(gpu.call, "cuda", threads=1)
    assert clock.seconds_per_call(3) == pytest.approx(CALL_MS / 1e3)
    assert "L2 flushed" in clock.method


def test_gpu_clock_sets_and_restores_threads(gpu):
    before = torch.get_num_threads()
    seen = []
    make_clock(lambda: seen.append(torch.get_num_threads()), "cuda", threads=1
               ).seconds_per_call(2)
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_harness_on_gpu_clock_records_the_method_and_the_calls(gpu):
    calls = []
    timing = time_interleaved({"a": lambda: calls.append(gpu.call())}, device="cuda",
                              threads=1, min_rounds=6, max_rounds=6, warmup=1,
                              min_run_s=0.0)["a"]
    assert timing.status == "ok" and timing.median_ms == pytest.approx(CALL_MS)
    assert "L2 flushed" in timing.method
    assert len(calls) == 1 + 6  # one warm-up call and one call per round


def test_gpu_clock_reuses_its_events_in_batches(gpu, monkeypatch):
    made = []
    event_class = torch.cuda.Event

    def counting_event(enable_timing=False):
        made.append(1)
        return event_class(enable_timing=enable_timing)

    monkeypatch.setattr(torch.cuda, "Event", counting_event)
    monkeypatch.setattr(clocks._CudaClock, "BATCH", 4)
    clock = make_clock(gpu.call, "cuda", threads=1)
    assert clock.seconds_per_call(10) == pytest.approx(CALL_MS / 1e3)
    assert clock.seconds_per_call(3) == pytest.approx(CALL_MS / 1e3)
    assert gpu.log.count("call") == 13
    assert len(made) == 2 * 4, "one batch of event pairs, reused"


def _launching(gpu: FakeGpu, extra_s):
    """A clock over calls whose n-th (from 1) takes ``extra_s(n)`` more host time."""
    def call():
        gpu.call()
        gpu.host_s += extra_s(gpu.log.count("call"))

    return make_clock(call, "cuda", threads=1)


def test_the_sleep_covers_the_measured_launch(gpu):
    clock = make_clock(gpu.call, "cuda", threads=1)
    clock.seconds_per_call(1)  # the clock's first call: not a steady launch
    clock.seconds_per_call(3)  # its first call's launch is measured (the queue empty)
    clock.seconds_per_call(2)
    first, second, *rest = gpu.slept
    # nothing steady measured yet: the longest sleep; then twice the launch plus the margin
    assert [first, second] == pytest.approx([clocks.MAX_SLEEP_S] * 2)
    assert rest == pytest.approx([COVERED] * 4)


def test_a_host_bound_launch_sleeps_at_most_the_cap(gpu):
    clock = _launching(gpu, lambda n: 0.5)  # a plain-PyTorch loop: 0.5 s of launches
    clock.seconds_per_call(1)
    clock.seconds_per_call(3)
    assert gpu.slept == pytest.approx([clocks.MAX_SLEEP_S] * 4)


def test_the_cover_follows_steady_launches_not_the_first_call(gpu):
    # The first call of a cuDNN case builds its plan (~0.4 s of host time): sized from that,
    # every later sleep sat at its 10 ms cap, seconds of GPU time no cap saw.
    clock = _launching(gpu, lambda n: 0.4 if n == 1 else 0.0)
    clock.seconds_per_call(1)  # the first warm-up call: the plan build
    clock.seconds_per_call(1)  # the second: a steady launch
    clock.seconds_per_call(3)
    assert gpu.slept[2:] == pytest.approx([COVERED] * 3, rel=1e-3)


def test_the_cover_rises_when_launches_do(gpu):
    # a busy host from the third call: launches four times as long, measured in that call
    # and covered from the next on
    clock = _launching(gpu, lambda n: 3 * LAUNCH_S if n >= 3 else 0.0)
    for _ in range(4):
        clock.seconds_per_call(1)
    assert gpu.slept[-1] == pytest.approx(
        clocks.LAUNCH_COVER * 4 * LAUNCH_S + clocks.LAUNCH_MARGIN_S, rel=1e-3)


def test_the_clock_reports_the_wall_time_of_its_calls(gpu):
    clock = make_clock(gpu.call, "cuda", threads=1)
    assert clock.seconds_per_call(4) == pytest.approx(CALL_MS / 1e3)  # the events
    assert clock.last_wall_s == pytest.approx(LAUNCH_S)  # the host's clock: 50 us a call


def test_the_flush_reads_its_buffer_and_writes_only_the_scalar():
    flush = clocks._L2Flush.__new__(clocks._L2Flush)  # CPU tensors stand for the GPU's
    flush.buffer = torch.rand(1000, generator=torch.Generator().manual_seed(0))
    flush.sink = torch.empty(())
    before = flush.buffer.clone()
    flush.flush()
    assert torch.equal(flush.buffer, before), "the flush must not write its buffer"
    assert flush.sink.item() == pytest.approx(before.sum().item(), rel=1e-5)


class WallClock:
    """A call of 10 us on the GPU's events but 110 us of wall time (the flush, the sleep
    and the launch around it)."""

    method = "fake"
    last_wall_s = None

    def seconds_per_call(self, number):
        self.last_wall_s = 110e-6
        return 10e-6


def test_calls_per_timing_are_sized_by_wall_time(monkeypatch):
    monkeypatch.setattr(measure, "make_clock", lambda *a, **k: WallClock())
    timing = time_interleaved({"decode": lambda: None}, threads=1, min_rounds=6,
                              max_rounds=6, warmup=1, min_run_s=0.010)["decode"]
    # 10 ms of wall is 91 calls of 110 us; by kernel time it was 1,000 (110 ms a timing)
    assert timing.calls_per_timing == 91


def test_cpu_clock_makes_exactly_the_calls_asked_and_they_are_its_wall_time():
    calls = []
    clock = make_clock(lambda: calls.append(1), "cpu", threads=1)
    seconds = clock.seconds_per_call(5)
    assert seconds > 0 and len(calls) == 5
    assert clock.last_wall_s == seconds


def test_make_clock_rejects_an_unknown_device():
    with pytest.raises(ValueError, match="device='tpu'"):
        make_clock(lambda: None, "tpu", threads=1)


@requires_cuda
def test_real_gpu_clock_flushes_l2_and_times_a_copy():
    src = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds = make_clock(lambda: dst.copy_(src), "cuda", threads=1).seconds_per_call(3)
    assert 0 < seconds < 1.0
    buffer = clocks._flush_buffer().buffer  # the tensor the flush reads
    assert buffer.numel() * buffer.element_size() >= \
        torch.cuda.get_device_properties(0).L2_cache_size
