"""Clocks: how one timing of one case is taken, on a CPU or a GPU.

A clock wraps a zero-argument callable and answers ``seconds_per_call(number)``: the
time of ``number`` back-to-back calls divided by ``number``. ``method`` names how it
timed, for the artifact's provenance. ``inferlab.measure`` decides how many timings
are taken, in what order, and what they add up to.

CPU timings use ``torch.utils.benchmark.Timer`` with the thread count pinned, without
the extra untimed calls ``Timer.timeit`` adds before each block (our warm-up already
ran, and they would triple the time of the slow cases). CUDA timings use CUDA events with a
synchronize, or ``triton.testing.do_bench`` when Triton is importable (that one flushes
L2 before every call, so it measures a cold cache; the ``method`` string says which).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class _CpuClock:
    """Times one case with torch's Timer, thread count pinned."""

    method = "torch.utils.benchmark.Timer"

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


class _CudaClock:
    """Times one case on the GPU: do_bench (cold L2) if Triton is there, else CUDA events."""

    def __init__(self, fn: Callable[[], object], threads: int, min_run_s: float):
        self._fn = fn
        self._threads = threads
        self._rep_ms = max(min_run_s * 1e3, 1.0)
        try:
            from triton.testing import do_bench
        except ImportError:
            do_bench = None
        self._do_bench = do_bench
        self.method = ("triton.testing.do_bench (cold L2)" if do_bench
                       else "cuda-events (warm L2, not flushed)")

    def seconds_per_call(self, number: int) -> float:
        """Per-call seconds; with do_bench ``number`` is unused (it picks its own count)."""
        previous = torch.get_num_threads()
        torch.set_num_threads(self._threads)  # host-side work (launches) uses them too
        try:
            return self._time(number)
        finally:
            torch.set_num_threads(previous)

    def _time(self, number: int) -> float:
        if self._do_bench is not None:
            # do_bench repeats for about rep ms, flushing L2 before each call; median of those
            return self._do_bench(self._fn, warmup=0, rep=self._rep_ms,
                                  return_mode="median") / 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(number):
            self._fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / number


def make_clock(fn: Callable[[], object], device: str, threads: int, min_run_s: float):
    """The clock for ``device`` ("cpu" or "cuda")."""
    return _CpuClock(fn, threads) if device == "cpu" else _CudaClock(fn, threads, min_run_s)
