"""Clocks: how one timing of one case is taken, on a CPU or a GPU.

A clock wraps a zero-argument callable and answers ``seconds_per_call(number)``: the
time of ``number`` calls divided by ``number``, making exactly ``number`` calls. Its
``method`` says how it timed, for the artifact's provenance, including the state of the
caches. ``inferlab.measure`` decides how many timings are taken, in what order, and
what they add up to.

CPU: ``torch.utils.benchmark.Timer`` with the thread count pinned, calls back to back
(caches warm), without the extra untimed calls ``Timer.timeit`` adds before each block
(our warm-up already ran, and they would triple the time of the slow cases).

CUDA: CUDA events around each call, with L2 flushed before each (a buffer twice the L2
size zeroed, outside the events), so every call starts from a cold cache, as it would
in a model whose other layers evicted its data. That is what ``triton.testing.do_bench``
measures, done here directly because do_bench (1) runs a case at least eight times per
timing whatever it is asked (one call, five to estimate, one warm-up, one timed), which
a slow case cannot afford in a short GPU slot, and (2) in Triton 3.9 first compiles a C
helper with the system's compiler; where that fails, every timing would fail with it.
This clock needs neither Triton nor a compiler.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

DEVICES = ("cpu", "cuda")
# The L2 flush: zeroing a buffer this many times the L2 size evicts what the last call
# left there (do_bench zeroes 256 MB whatever the GPU; an H100/H200 has 50 MB of L2).
FLUSH_L2_MULTIPLE = 2
_FALLBACK_FLUSH_BYTES = 256 << 20


class _CpuClock:
    """Times one case with torch's Timer, thread count pinned."""

    method = "torch.utils.benchmark.Timer"  # calls back to back: caches warm

    def __init__(self, fn: Callable[[], object], threads: int):
        from torch.utils.benchmark import Timer

        self._timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
        self._threads = threads

    def seconds_per_call(self, number: int) -> float:
        # Timer.timeit(number) first runs max(number // 100, 2) untimed calls; our own
        # warm-up already ran, so for the slow cases that would triple the stage's time.
        # Timer._timeit is the same measurement without them (torch 2.x); fall back if gone.
        from torch.utils.benchmark.utils.common import set_torch_threads

        timeit_only = getattr(self._timer, "_timeit", None)
        if timeit_only is None:
            return self._timer.timeit(number).times[0]
        with set_torch_threads(self._threads):
            return timeit_only(number) / number


@functools.cache
def _flush_buffer() -> torch.Tensor:
    """One buffer per process on the current GPU, FLUSH_L2_MULTIPLE times its L2."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2_bytes = getattr(props, "L2_cache_size", 0) or _FALLBACK_FLUSH_BYTES
    return torch.empty(FLUSH_L2_MULTIPLE * l2_bytes // 4, dtype=torch.int32, device="cuda")


class _CudaClock:
    """Times one case on the GPU: CUDA events around each call, L2 flushed before each."""

    method = (f"cuda events around each call, L2 flushed before each ({FLUSH_L2_MULTIPLE}x "
              "its size zeroed, outside the events: caches cold)")
    # Events are reused in batches of this many calls (a synchronize between batches,
    # outside the events), so a timing of 10^5 microsecond calls holds 2 x 1024 events.
    BATCH = 1024

    def __init__(self, fn: Callable[[], object], threads: int):
        self._fn = fn
        self._threads = threads
        self._flush = _flush_buffer()
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def seconds_per_call(self, number: int) -> float:
        """Mean of ``number`` calls, each timed alone between two events after a flush."""
        previous = torch.get_num_threads()
        torch.set_num_threads(self._threads)  # host-side work (launches) uses them too
        try:
            total_ms, left = 0.0, number
            while left > 0:
                total_ms += self._batch_ms(min(left, self.BATCH))
                left -= self.BATCH
        finally:
            torch.set_num_threads(previous)
        return total_ms / 1e3 / number

    def _batch_ms(self, calls: int) -> float:
        while len(self._events) < calls:
            self._events.append((torch.cuda.Event(enable_timing=True),
                                 torch.cuda.Event(enable_timing=True)))
        events = self._events[:calls]
        torch.cuda.synchronize()
        for start, end in events:
            self._flush.zero_()
            start.record()
            self._fn()
            end.record()
        torch.cuda.synchronize()
        return sum(start.elapsed_time(end) for start, end in events)


def make_clock(fn: Callable[[], object], device: str, threads: int, min_run_s: float):
    """The clock for ``device`` ("cpu" or "cuda"). ``min_run_s`` is the harness's business
    (how many calls a timing needs); a clock makes exactly the calls it is asked for."""
    if device not in DEVICES:
        raise ValueError(f"device={device!r} has no clock; expected one of {list(DEVICES)}")
    return _CpuClock(fn, threads) if device == "cpu" else _CudaClock(fn, threads)
