"""Clocks: how one timing of one case is taken, on a CPU or a GPU.

A clock wraps a zero-argument callable and answers ``seconds_per_call(number)``: the
time of ``number`` calls divided by ``number``, making exactly ``number`` calls. Its
``method`` says how it timed, for the artifact's provenance, including the state of the
caches. ``inferlab.measurement.measure`` decides how many timings are taken, in what order, and
what they add up to.

CPU: ``torch.utils.benchmark.Timer`` with the thread count pinned, calls back to back
(caches warm), without the extra untimed calls ``Timer.timeit`` adds before each block
(our warm-up already ran, and they would triple the time of the slow cases).

CUDA: CUDA events around each call, and before each, outside the events:

1. L2 flushed by *reading* a buffer twice the L2 size (a sum into a preallocated
   scalar), so every call starts from a cold cache, as it would in a model whose other
   layers evicted its data. Zeroing the buffer instead (do_bench's way) would leave
   ~2x L2 of dirty lines for the timed kernel to write back.
2. The GPU held busy by ``torch.cuda._sleep`` for twice the host's launch time of the
   call, so the start event is reached only after the host has enqueued the whole call:
   the events time the kernels, not the Python launch path (a few-microsecond decode
   kernel behind tens of microseconds of launcher would otherwise be timed as its
   launcher). The launch is measured on the first call after each synchronize, when the
   launch queue is empty, and the cover follows the steady launches: the longest of the
   last LAUNCH_WINDOW measured, never the clock's very first call (a cuDNN case builds its
   plan there, ~0.4 s of host time, which pinned every later sleep at the cap: seconds of
   GPU time per timing that no cap saw). 10 ms before a steady launch is measured, at
   most 10 ms ever; a call whose launch takes over 5 ms is host-bound, and its time says
   so by itself.

Each timing also records its wall time per call (``last_wall_s``: the flush, the sleep,
the launch and the synchronize around the calls included), by which the harness sizes the
calls per timing: by the events' time, a 10 us decode kernel got 1,000 calls of ~110 us
wall each for a "10 ms" timing.

That is what ``triton.testing.do_bench`` measures, done here directly because do_bench
(1) runs a case at least eight times per timing whatever it is asked (one call, five to
estimate, one warm-up, one timed), which a slow case cannot afford in a short GPU slot,
and (2) in Triton 3.9 first compiles a C helper with the system's compiler; where that
fails, every timing would fail with it. This clock needs neither Triton nor a compiler.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable

import torch

DEVICES = ("cpu", "cuda")
# The L2 flush: reading a buffer this many times the L2 size evicts what the last call
# left there (do_bench uses 256 MB whatever the GPU; an H100/H200 has 50-60 MB of L2).
FLUSH_L2_MULTIPLE = 2
_FALLBACK_FLUSH_BYTES = 256 << 20
# The host's launch is covered by a GPU sleep of LAUNCH_COVER x its measured time plus
# LAUNCH_MARGIN_S, at most MAX_SLEEP_S (also the first call's, before any measurement).
LAUNCH_COVER, LAUNCH_MARGIN_S, MAX_SLEEP_S = 2.0, 20e-6, 10e-3
LAUNCH_WINDOW = 4  # the cover follows the longest of this many latest steady launches


class _CpuClock:
    """Times one case with torch's Timer, thread count pinned."""

    method = "torch.utils.benchmark.Timer"  # calls back to back: caches warm

    def __init__(self, fn: Callable[[], object], threads: int):
        from torch.utils.benchmark import Timer

        self._timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
        self._threads = threads
        self.last_wall_s: float | None = None  # calls back to back: their time is the wall

    def seconds_per_call(self, number: int) -> float:
        self.last_wall_s = self._seconds_per_call(number)
        return self.last_wall_s

    def _seconds_per_call(self, number: int) -> float:
        # Timer.timeit(number) first runs max(number // 100, 2) untimed calls; our own
        # warm-up already ran, so for the slow cases that would triple the stage's time.
        # Timer._timeit is the same measurement without them (torch 2.x); fall back if gone.
        from torch.utils.benchmark.utils.common import set_torch_threads

        timeit_only = getattr(self._timer, "_timeit", None)
        if timeit_only is None:
            return self._timer.timeit(number).times[0]
        with set_torch_threads(self._threads):
            return timeit_only(number) / number


class _L2Flush:
    """A buffer FLUSH_L2_MULTIPLE times the L2, read (summed into a scalar) to flush."""

    def __init__(self, l2_bytes: int):
        self.buffer = torch.ones(FLUSH_L2_MULTIPLE * l2_bytes // 4, device="cuda")
        self.sink = torch.empty((), device="cuda")

    def flush(self) -> None:
        torch.sum(self.buffer, dim=0, out=self.sink)  # reads it all, writes 4 bytes


@functools.cache
def _flush_buffer() -> _L2Flush:
    """One flush buffer per process on the current GPU."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return _L2Flush(getattr(props, "L2_cache_size", 0) or _FALLBACK_FLUSH_BYTES)


@functools.cache
def _sleep_cycles_per_s() -> float:
    """GPU clock cycles per second of ``torch.cuda._sleep``, measured with events once."""
    cycles = 1 << 22  # ~2 ms at the H200's 1.98 GHz
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles // 16)  # the first launch loads the kernel
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) / 1e3)


class _CudaClock:
    """Times one case on the GPU: CUDA events around each call; before each, L2 flushed
    by a read and the GPU kept busy until the host has launched the call."""

    method = (f"cuda events around each call; before each, outside the events, L2 flushed "
              f"by reading {FLUSH_L2_MULTIPLE}x its size (caches cold) and the GPU held by "
              f"torch.cuda._sleep for {LAUNCH_COVER:g}x the host's launch time (at most "
              f"{MAX_SLEEP_S * 1e3:g} ms), so the host's launch is not timed")
    # Events are reused in batches of this many calls (a synchronize between batches,
    # outside the events), so a timing of 10^5 microsecond calls holds 2 x 1024 events.
    BATCH = 1024

    def __init__(self, fn: Callable[[], object], threads: int):
        self._fn = fn
        self._threads = threads
        self._flush = _flush_buffer()
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        # the host's launch of one call with the queue empty, the latest steady ones
        self._launches: collections.deque[float] = collections.deque(maxlen=LAUNCH_WINDOW)
        self._called = False  # the first call ever (plan builds, first touches) is not steady
        self.last_wall_s: float | None = None

    def seconds_per_call(self, number: int) -> float:
        """Mean of ``number`` calls, each timed alone between two events after a flush;
        ``last_wall_s`` becomes the wall time per call of this timing."""
        previous = torch.get_num_threads()
        torch.set_num_threads(self._threads)  # host-side work (launches) uses them too
        started = time.perf_counter()
        try:
            total_ms, left = 0.0, number
            while left > 0:
                total_ms += self._batch_ms(min(left, self.BATCH))
                left -= self.BATCH
        finally:
            torch.set_num_threads(previous)
        self.last_wall_s = (time.perf_counter() - started) / number
        return total_ms / 1e3 / number

    def _sleep_cycles(self) -> int:
        if not self._launches:
            seconds = MAX_SLEEP_S
        else:
            seconds = min(MAX_SLEEP_S, LAUNCH_COVER * max(self._launches) + LAUNCH_MARGIN_S)
        return int(seconds * _sleep_cycles_per_s())

    def _batch_ms(self, calls: int) -> float:
        while len(self._events) < calls:
            self._events.append((torch.cuda.Event(enable_timing=True),
                                 torch.cuda.Event(enable_timing=True)))
        events = self._events[:calls]
        torch.cuda.synchronize()
        for i, (start, end) in enumerate(events):
            self._flush.flush()
            torch.cuda._sleep(self._sleep_cycles())
            host_t0 = time.perf_counter()
            start.record()
            self._fn()
            end.record()
            if i == 0:  # right after the synchronize: the launch queue was empty
                launch_s = time.perf_counter() - host_t0
                if self._called:
                    self._launches.append(launch_s)
                self._called = True
        torch.cuda.synchronize()
        return sum(start.elapsed_time(end) for start, end in events)


def make_clock(fn: Callable[[], object], device: str, threads: int, min_run_s: float):
    """The clock for ``device`` ("cpu" or "cuda"). ``min_run_s`` is the harness's business
    (how many calls a timing needs); a clock makes exactly the calls it is asked for."""
    if device not in DEVICES:
        raise ValueError(f"device={device!r} has no clock; expected one of {list(DEVICES)}")
    return _CpuClock(fn, threads) if device == "cpu" else _CudaClock(fn, threads)
