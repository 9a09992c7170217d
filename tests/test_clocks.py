"""Tests for inferlab.measurement.clocks: how one timing is taken, on a CPU and (simulated) on a
GPU.

The GPU clock cannot run here, so CUDA's events, synchronize and the L2 flush buffer are
replaced by stand-ins on a fake clock: a call "takes" a set number of fake milliseconds,
the flush another, and the test checks what the clock did with them. No wall-clock time
is asserted.
"""

from __future__ import annotations

import sys

import pytest
import torch

from inferlab.measurement import clocks
from inferlab.measurement.clocks import make_clock
from inferlab.measurement.measure import time_interleaved

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                   reason="needs a CUDA device; this machine has none")
CALL_MS = 2.0
FLUSH_MS = 5.0


class FakeGpu:
    """A GPU timeline: the events record the fake time, the work advances it."""

    def __init__(self):
        self.now_ms = 0.0
        self.log: list[str] = []
        self.synchronized = 0

    def call(self):
        self.log.append("call")
        self.now_ms += CALL_MS

    def event_class(gpu):  # noqa: N805 - a class factory bound to this timeline
        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "an event that times must be created with enable_timing"
                self.at_ms = None

            def record(self):
                gpu.log.append("record")
                self.at_ms = gpu.now_ms

            def elapsed_time(self, end):
                return end.at_ms - self.at_ms

            def synchronize(self):
                gpu.synchronized += 1
        return Event


class FakeFlush:
    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu

    def flush(self):
        self.gpu.log.append("flush")
        self.gpu.now_ms += FLUSH_MS


@pytest.fixture
def gpu(monkeypatch) -> FakeGpu:
    """torch.cuda's events and synchronize on a fake timeline, a fake flush buffer."""
    fake = FakeGpu()
    monkeypatch.setattr(torch.cuda, "Event", fake.event_class())

    def synchronize(device=None):
        fake.synchronized += 1

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(clocks, "_flush_buffer", lambda: FakeFlush(fake))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: fake.log.append("sleep"))
    monkeypatch.setattr(clocks, "_sleep_cycles_per_s", lambda: 1e9)
    return fake


def _broken_do_bench(*args, **kwargs):
    # What Triton 3.9's do_bench raises when its driver helper (cuda_utils.c) cannot be
    # compiled: runtime.driver.active builds it on first use with the system's C compiler.
    raise RuntimeError("Failed to compile cuda_utils: fatal error: Python.h: No such file "
                       "or directory")


def test_gpu_clock_times_although_triton_cannot_build_its_helper(gpu, monkeypatch):
    testing = pytest.importorskip("triton.testing")
    monkeypatch.setattr(testing, "do_bench", _broken_do_bench)
    clock = make_clock(gpu.call, "cuda", threads=1, min_run_s=0.001)
    assert clock.seconds_per_call(1) == pytest.approx(CALL_MS / 1e3)
    assert "L2 flushed" in clock.method


def test_gpu_clock_needs_no_triton(gpu, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    monkeypatch.setitem(sys.modules, "triton.testing", None)
    clock = make_clock(gpu.call, "cuda", threads=1, min_run_s=0.001)
    assert clock.seconds_per_call(3) == pytest.approx(CALL_MS / 1e3)


@pytest.mark.parametrize("number", [1, 2, 7])
def test_gpu_clock_makes_exactly_the_calls_asked_each_after_a_flush(gpu, number):
    # A slow case is timed with one call per timing: do_bench ran a call at least 8 times
    # (one, five to estimate, one warm-up, one timed) whatever it was asked.
    clock = make_clock(gpu.call, "cuda", threads=1, min_run_s=0.001)
    seconds = clock.seconds_per_call(number)
    assert gpu.log.count("call") == number
    assert gpu.log == ["flush", "sleep", "record", "call", "record"] * number
    # the flush is outside the events: only the calls are timed
    assert seconds == pytest.approx(CALL_MS / 1e3)
    assert gpu.synchronized >= 2, "synchronised before the first event and after the last"


def test_gpu_clock_sets_and_restores_threads(gpu):
    before = torch.get_num_threads()
    seen = []
    clock = make_clock(lambda: seen.append(torch.get_num_threads()), "cuda", threads=1,
                       min_run_s=0.001)
    clock.seconds_per_call(2)
    assert seen == [1, 1]
    assert torch.get_num_threads() == before


def test_harness_on_gpu_clock_records_the_method_and_the_calls(gpu):
    calls = []
    timings = time_interleaved({"a": lambda: calls.append(gpu.call())}, device="cuda",
                               threads=1, min_rounds=6, max_rounds=6, warmup=1,
                               min_run_s=0.0)
    timing = timings["a"]
    assert timing.status == "ok"
    assert timing.median_ms == pytest.approx(CALL_MS)
    assert "L2 flushed" in timing.method
    # one warm-up call and one call per round: min_run_s=0 asks for no more
    assert len(calls) == 1 + 6


def test_cpu_clock_makes_exactly_the_calls_asked():
    calls = []
    clock = make_clock(lambda: calls.append(1), "cpu", threads=1, min_run_s=0.0)
    assert clock.seconds_per_call(5) > 0
    assert len(calls) == 5


def test_make_clock_rejects_an_unknown_device():
    with pytest.raises(ValueError, match="device='tpu'"):
        make_clock(lambda: None, "tpu", threads=1, min_run_s=0.0)


@requires_cuda
def test_real_gpu_clock_flushes_l2_and_times_a_copy():
    src = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    clock = make_clock(lambda: dst.copy_(src), "cuda", threads=1, min_run_s=0.001)
    seconds = clock.seconds_per_call(3)
    assert 0 < seconds < 1.0
    buffer = clocks._flush_buffer().buffer  # the tensor the flush reads
    assert buffer.numel() * buffer.element_size() >= \
        torch.cuda.get_device_properties(0).L2_cache_size


def test_gpu_clock_reuses_its_events_in_batches(gpu, monkeypatch):
    made = []
    event_class = torch.cuda.Event

    def counting_event(enable_timing=False):
        made.append(1)
        return event_class(enable_timing=enable_timing)

    monkeypatch.setattr(torch.cuda, "Event", counting_event)
    monkeypatch.setattr(clocks._CudaClock, "BATCH", 4)
    clock = make_clock(gpu.call, "cuda", threads=1, min_run_s=0.001)
    assert clock.seconds_per_call(10) == pytest.approx(CALL_MS / 1e3)
    assert clock.seconds_per_call(3) == pytest.approx(CALL_MS / 1e3)
    assert gpu.log.count("call") == 13
    assert len(made) == 2 * 4, "one batch of event pairs, reused"


class WallClock:
    """A clock whose call takes 10 us on the GPU's events but 110 us of wall time (the
    flush, the sleep and the launch around it)."""

    method = "fake"

    def __init__(self, *args, **kwargs):
        self.calls = 0
        self.last_wall_s = None

    def seconds_per_call(self, number):
        self.calls += number
        self.last_wall_s = 110e-6
        return 10e-6


def test_calls_per_timing_are_sized_by_wall_time(monkeypatch):
    from inferlab.measurement import measure

    monkeypatch.setattr(measure, "make_clock", lambda *a, **k: WallClock())
    timing = time_interleaved({"decode": lambda: None}, threads=1, min_rounds=6,
                              max_rounds=6, warmup=1, min_run_s=0.010)["decode"]
    # 10 ms of wall is 91 calls of 110 us; by kernel time it was 1,000 (110 ms a timing)
    assert timing.calls_per_timing == 91


def test_the_cpu_clock_sizes_as_before(monkeypatch):
    # On a CPU the timed calls are the wall time: the calls per timing are what they were.
    clock = make_clock(lambda: None, "cpu", threads=1, min_run_s=0.0)
    seconds = clock.seconds_per_call(10)
    assert clock.last_wall_s == seconds
