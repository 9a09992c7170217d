"""The CUDA clock keeps the host off the timed path (inferlab.measurement.clocks, issue 19).

torch.cuda's events, synchronize and _sleep, the flush buffer and the host's clock are
replaced by stand-ins that write one log: the test checks the order of the steps around
each call, that the GPU sleep covers the host's launch as measured, and that the L2
flush reads its buffer instead of writing it.
"""

from __future__ import annotations

import pytest
import torch

from inferlab.measurement import clocks
from inferlab.measurement.clocks import make_clock

CYCLES_PER_S = 1e9  # a 1 GHz fake GPU: cycles = seconds x 1e9
LAUNCH_S = 50e-6    # the host's time to launch one call, on the fake host clock


class Fakes:
    def __init__(self):
        self.log: list[tuple] = []
        self.host_s = 0.0

    def call(self):
        self.log.append(("call",))
        self.host_s += LAUNCH_S

    def sleeps(self) -> list[float]:
        return [entry[1] / CYCLES_PER_S for entry in self.log if entry[0] == "sleep"]


@pytest.fixture
def fakes(monkeypatch) -> Fakes:
    fake = Fakes()

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self):
            fake.log.append(("record",))

        def elapsed_time(self, end):
            return 1.0

    class Flush:
        def flush(self):
            fake.log.append(("flush",))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: fake.log.append(("sync",)))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: fake.log.append(("sleep", cycles)))
    monkeypatch.setattr(clocks, "_flush_buffer", Flush)
    monkeypatch.setattr(clocks, "_sleep_cycles_per_s", lambda: CYCLES_PER_S)
    monkeypatch.setattr(clocks.time, "perf_counter", lambda: fake.host_s)
    return fake


def test_each_call_is_flush_sleep_start_call_end(fakes):
    make_clock(fakes.call, "cuda", threads=1, min_run_s=0.0).seconds_per_call(3)
    steps = [e[0] for e in fakes.log]
    assert steps == ["sync", *["flush", "sleep", "record", "call", "record"] * 3, "sync"]


def test_the_sleep_covers_the_measured_launch(fakes):
    clock = make_clock(fakes.call, "cuda", threads=1, min_run_s=0.0)
    clock.seconds_per_call(1)  # the clock's first call: not a steady launch
    clock.seconds_per_call(3)  # its first call's launch is measured (the queue empty)
    clock.seconds_per_call(2)
    first, second, *rest = fakes.sleeps()
    # nothing steady measured yet: the longest sleep; then twice the launch plus the margin
    assert [first, second] == pytest.approx([clocks.MAX_SLEEP_S] * 2)
    covered = clocks.LAUNCH_COVER * LAUNCH_S + clocks.LAUNCH_MARGIN_S
    assert rest == pytest.approx([covered] * 4)
    assert all(s > LAUNCH_S for s in rest)


def test_a_host_bound_launch_sleeps_at_most_the_cap(fakes, monkeypatch):
    slow = Fakes.call

    def call(self):
        slow(self)
        self.host_s += 0.5  # a plain-PyTorch loop: half a second of launches

    monkeypatch.setattr(Fakes, "call", call)
    make_clock(fakes.call, "cuda", threads=1, min_run_s=0.0).seconds_per_call(3)
    assert fakes.sleeps() == pytest.approx([clocks.MAX_SLEEP_S] * 3)


def test_the_flush_reads_its_buffer_and_writes_only_the_scalar():
    flush = clocks._L2Flush.__new__(clocks._L2Flush)  # CPU tensors stand for the GPU's
    flush.buffer = torch.rand(1000, generator=torch.Generator().manual_seed(0))
    flush.sink = torch.empty(())
    before = flush.buffer.clone()
    flush.flush()
    assert torch.equal(flush.buffer, before), "the flush must not write its buffer"
    assert flush.sink.item() == pytest.approx(before.sum().item(), rel=1e-5)


def test_the_cover_follows_steady_launches_not_the_first_call(fakes):
    # The first call of a cuDNN case builds its plan (~0.4 s of host time): sized from that,
    # every later sleep sat at its 10 ms cap, seconds of GPU time no cap saw.
    calls = []

    def call():
        fakes.call()
        calls.append(1)
        if len(calls) == 1:
            fakes.host_s += 0.4

    clock = make_clock(call, "cuda", threads=1, min_run_s=0.0)
    clock.seconds_per_call(1)  # the first warm-up call: the plan build
    clock.seconds_per_call(1)  # the second: a steady launch
    clock.seconds_per_call(3)
    covered = clocks.LAUNCH_COVER * LAUNCH_S + clocks.LAUNCH_MARGIN_S
    assert fakes.sleeps()[2:] == pytest.approx([covered] * 3, rel=1e-3)


def test_the_cover_rises_when_launches_do(fakes):
    slower = {"s": 0.0}

    def call():
        fakes.call()
        fakes.host_s += slower["s"]

    clock = make_clock(call, "cuda", threads=1, min_run_s=0.0)
    clock.seconds_per_call(1)
    clock.seconds_per_call(1)
    slower["s"] = 3 * LAUNCH_S  # a busy host: launches four times as long
    clock.seconds_per_call(1)   # measured here, covered from the next call on
    clock.seconds_per_call(1)
    assert fakes.sleeps()[-1] == pytest.approx(
        clocks.LAUNCH_COVER * 4 * LAUNCH_S + clocks.LAUNCH_MARGIN_S, rel=1e-3)


def test_the_clock_reports_the_wall_time_of_its_calls(fakes):
    clock = make_clock(fakes.call, "cuda", threads=1, min_run_s=0.0)
    seconds = clock.seconds_per_call(4)
    assert seconds == pytest.approx(1e-3)         # the events: 1 ms a call
    assert clock.last_wall_s == pytest.approx(LAUNCH_S)  # the host's clock: 50 us a call
