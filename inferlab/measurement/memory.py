"""The one memory measurement: peak extra bytes of a call, a cap that turns a size that
does not fit into an ``oom`` result (``memory_cap``, and ``capped`` for a call to be
timed), and what counts as out of memory.

Peak extra memory is what ``fn`` allocated beyond what existed before it (the inputs
are excluded): on CPU from the profiler's allocation trace, on CUDA from
``max_memory_allocated``.
"""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from inferlab.measurement.clocks import check_device

_PROC_STATUS = Path("/proc/self/status")
_OOM_TEXTS = ("can't allocate memory", "out of memory", "defaultcpuallocator")


@dataclass(frozen=True)
class MemoryReading:
    """Peak bytes allocated during a call beyond what was allocated before it.

    ``rss_hwm_delta_bytes``: the process's resident high-water mark's rise during the
    call, a cross-check from the operating system (None where unreadable); where the mark
    could not be reset first it is a lower bound, never the measurement.
    """

    peak_extra_bytes: int
    method: str
    rss_hwm_delta_bytes: int | None


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` is an out-of-memory failure (CPU or CUDA, typed or by message)."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXTS)


def _proc_status_bytes(key: str) -> int | None:
    """A ``kB`` field of /proc/self/status in bytes (Linux), else None."""
    try:
        for line in _PROC_STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _cpu_allocation_peak_bytes(fn: Callable[[], object], on_profile=None) -> int:
    """Max of the running sum of allocations minus frees during ``fn``, read as torch's
    own profiler parser reads them: the kineto results' ``[memory]`` events, ``nbytes()``
    positive for an allocation and negative for a free."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    from inferlab.measurement.kernel_names import quiet_profile

    with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    if on_profile is not None:
        on_profile(prof)
    host = (DeviceType.CPU, DeviceType.MKLDNN, DeviceType.IDEEP)
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() in host]
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        running += event.nbytes()
        peak = max(peak, running)
    return peak


def _cpu_peak_extra(fn: Callable[[], object], on_profile=None) -> MemoryReading:
    try:  # reset VmHWM to the current RSS (Linux >= 4.0)
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    hwm_before = _proc_status_bytes("VmHWM")
    peak = _cpu_allocation_peak_bytes(fn, on_profile)
    hwm_after = _proc_status_bytes("VmHWM")
    delta = None if hwm_before is None or hwm_after is None else hwm_after - hwm_before
    suffix = "reset before the call" if reset else "not reset: 0 when below an earlier peak"
    return MemoryReading(peak, f"torch.profiler allocation trace (RSS high-water {suffix})",
                         delta)


def peak_extra_bytes(fn: Callable[[], object], device: str = "cpu",
                     on_profile: Callable[[object], object] | None = None) -> MemoryReading:
    """Peak bytes allocated while ``fn()`` runs beyond what was allocated before it.

    The inputs ``fn`` closes over are not counted; what it returns is. Call it after a
    warm-up so one-time lazy allocations are not counted. Exceptions (an out-of-memory
    included) propagate. On a CPU the reading is a profiler session, handed to
    ``on_profile(prof)`` when it ends (the stage names the kernel from the same call).
    """
    if check_device(device) == "cpu":
        return _cpu_peak_extra(fn, on_profile)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    return MemoryReading(int(peak), "torch.cuda.max_memory_allocated", None)


@contextlib.contextmanager
def memory_cap(cap_bytes: int | None, device: str = "cpu") -> Iterator[None]:
    """Inside the block, allocating more than ``cap_bytes`` beyond current use fails like a
    real out-of-memory (so an OOM row can be produced on a machine that has the memory).
    None: no cap.

    CPU: the address-space limit (RLIMIT_AS) lowered to the current VmSize + cap, restored
    on exit. It caps virtual memory (threads started inside count too), and glibc serves a
    request of any size from a free chunk its heap already holds without new address
    space: a guard for the machine, not an exact cap (``capped`` adds the exact check).

    CUDA: the caching allocator (c10/cuda/CUDACachingAllocator.cpp) serves a request from
    a cached free block without any check, and refuses a new segment only when reserved
    memory plus its size would pass ``fraction x total``. So the cache is emptied first,
    the fraction set to (bytes in use + cap) / total, and on exit set back to 1.0 and the
    cache emptied again (blocks freed inside, after an out-of-memory too, go back to the
    device). Exact to the allocator's rounding (2 MiB; 20 MiB segments for requests of
    1-10 MiB). It synchronizes: never enter it inside a timed call (``capped``).
    """
    check_device(device)
    if cap_bytes is None:
        yield
    elif device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(
            min(1.0, (torch.cuda.memory_allocated() + cap_bytes) / total))
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
            torch.cuda.empty_cache()
    else:
        vm_size = _proc_status_bytes("VmSize")
        if vm_size is None:
            raise ValueError("memory_cap on CPU needs /proc/self/status (Linux); set "
                             "prefill.memory_cap_gib to null on this system")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        new_soft = vm_size + cap_bytes
        if hard != resource.RLIM_INFINITY:
            new_soft = min(new_soft, hard)
        resource.setrlimit(resource.RLIMIT_AS, (new_soft, hard))
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def capped(fn: Callable[[], object], cap_bytes: int | None,
           device: str = "cpu") -> Callable[[], object]:
    """``fn`` as a harness should time it under a cap of ``cap_bytes`` (None: ``fn``).

    A call's allocations do not change from one call to the next, and the cap's set-up
    must not be timed, so ``fn`` is tried now: if it fits, ``fn`` itself is returned and
    timed without a cap; if not, a function that raises that out-of-memory error again,
    so the harness records ``oom`` without running a case known not to fit.
    CUDA: one call under ``memory_cap``, which the caching allocator enforces exactly.
    CPU: a warm-up call under ``memory_cap`` (a size far over the cap fails there), then a
    second call outside it whose peak the profiler's allocation trace counts whatever the
    heap holds: a peak over the cap is the out-of-memory.
    """
    check_device(device)
    if cap_bytes is None:
        return fn
    try:
        with memory_cap(cap_bytes, device):
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
        # outside the address-space limit: the profiler's start-up would be refused
        peak = _cpu_allocation_peak_bytes(fn) if device == "cpu" else 0
    except Exception as exc:  # noqa: BLE001 - any other failure recurs in the harness
        if not is_oom(exc):
            return fn
        # keep the message, not the exception: its traceback holds the case's tensors
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        message = f"over the {_size(cap_bytes)} cap: {first}"
    else:
        if peak <= cap_bytes:
            return fn
        message = f"over the {_size(cap_bytes)} cap: a peak of {_size(peak)} allocated"

    def over_cap():
        raise torch.OutOfMemoryError(message)
    return over_cap


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
