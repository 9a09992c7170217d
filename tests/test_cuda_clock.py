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
    clock.seconds_per_call(3)
    clock.seconds_per_call(2)
    first, *rest = fakes.sleeps()
    # nothing measured yet: the longest sleep; then twice the launch plus the margin
    assert first == pytest.approx(clocks.MAX_SLEEP_S)
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
