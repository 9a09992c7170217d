"""Clocks: how one timing of one case is taken, on a CPU or a GPU.

A clock wraps a zero-argument callable and answers ``seconds_per_call(number)``: the time
of exactly ``number`` calls over ``number``; ``last_wall_s`` is that timing's wall time
per call, by which the harness (``measure``) sizes its calls per timing. ``method`` says
how it timed, for the rows.

CPU: ``torch.utils.benchmark.Timer``, thread count pinned, calls back to back (caches
warm), without the untimed calls ``Timer.timeit`` adds before each block (our warm-up
already ran, and they would triple the time of the slow cases).

CUDA: CUDA events around each call and, before each, outside the events:

1. L2 flushed by *reading* a buffer twice its size, so every call starts cold, as in a
   model whose other layers evicted its data (zeroing it, do_bench's way, would leave
   ~2x L2 of dirty lines for the timed kernel to write back);
2. the GPU held by ``torch.cuda._sleep`` for twice the host's launch time of the call, so
   the events time the kernels, not the Python launcher (a few-microsecond decode kernel
   would otherwise be timed as its launcher). The launch is measured on the first call
   after each synchronize (queue empty); the cover follows the longest of the last
   ``LAUNCH_WINDOW`` steady launches, never the clock's first call (a cuDNN plan build,
   ~0.4 s, would pin every later sleep at the cap), at most ``MAX_SLEEP_S``.

That is ``triton.testing.do_bench``'s measurement, done directly: do_bench calls a case at
least eight times a timing, which a slow case cannot afford in a short GPU slot, and in
Triton 3.9 first compiles a C helper, without which every timing would fail.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable

import torch

DEVICES = ("cpu", "cuda")
# do_bench reads 256 MB whatever the GPU; an H100/H200 has 50-60 MB of L2
FLUSH_L2_MULTIPLE = 2
_FALLBACK_FLUSH_BYTES = 256 << 20
# the sleep: LAUNCH_COVER x the launch + LAUNCH_MARGIN_S, at most MAX_SLEEP_S (also before
# any launch is measured)
LAUNCH_COVER, LAUNCH_MARGIN_S, MAX_SLEEP_S = 2.0, 20e-6, 10e-3
LAUNCH_WINDOW = 4


def check_device(device: str) -> str:
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not supported; expected one of {list(DEVICES)}")
    return device


class _CpuClock:
    """Times one case with torch's Timer, thread count pinned."""

    method = "torch.utils.benchmark.Timer"

    def __init__(self, fn: Callable[[], object], threads: int):
        from torch.utils.benchmark import Timer

        self._timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
        self._threads = threads
        self.last_wall_s: float | None = None

    def seconds_per_call(self, number: int) -> float:
        from torch.utils.benchmark.utils.common import set_torch_threads

        # Timer._timeit: Timer.timeit without its untimed calls (torch 2.x)
        with set_torch_threads(self._threads):
            self.last_wall_s = self._timer._timeit(number) / number
        return self.last_wall_s


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
    # events reused in batches of this many calls, a synchronize between batches
    BATCH = 1024

    def __init__(self, fn: Callable[[], object], threads: int):
        self._fn = fn
        self._threads = threads
        self._flush = _flush_buffer()
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._launches: collections.deque[float] = collections.deque(maxlen=LAUNCH_WINDOW)
        self._called = False  # the first call ever (plan builds, first touches) is not steady
        self.last_wall_s: float | None = None

    def seconds_per_call(self, number: int) -> float:
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
        seconds = MAX_SLEEP_S if not self._launches else \
            min(MAX_SLEEP_S, LAUNCH_COVER * max(self._launches) + LAUNCH_MARGIN_S)
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
                if self._called:
                    self._launches.append(time.perf_counter() - host_t0)
                self._called = True
        torch.cuda.synchronize()
        return sum(start.elapsed_time(end) for start, end in events)


def make_clock(fn: Callable[[], object], device: str, threads: int):
    """The clock for ``device`` ("cpu" or "cuda"); it makes exactly the calls asked for."""
    return _CudaClock(fn, threads) if check_device(device) == "cuda" else _CpuClock(fn, threads)
