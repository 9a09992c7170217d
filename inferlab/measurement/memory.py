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

DEVICES = ("cpu", "cuda")
_PROC_STATUS = Path("/proc/self/status")
_PROC_CLEAR_REFS = Path("/proc/self/clear_refs")
_OOM_TEXTS = ("can't allocate memory", "out of memory", "defaultcpuallocator")


@dataclass(frozen=True)
class MemoryReading:
    """Peak bytes allocated during a call beyond what was allocated before it.

    ``rss_hwm_delta_bytes`` is the process resident high-water mark's rise during the
    call, a cross-check from the operating system (None where it cannot be read). The
    mark can only rise; where it could not be reset first it reads 0 whenever the call
    stayed below an earlier peak, so it is a lower bound, never the measurement.
    """

    peak_extra_bytes: int
    method: str
    rss_hwm_delta_bytes: int | None


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` is an out-of-memory failure (CPU or CUDA, typed or by message)."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXTS)


def check_device(device: str) -> str:
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not supported; expected one of {list(DEVICES)}")
    return device


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


def _proc_status_bytes(key: str) -> int | None:
    """A ``kB`` field of /proc/self/status in bytes (Linux), else None."""
    try:
        for line in _PROC_STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_rss_high_water() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        _PROC_CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def _cpu_allocation_peak_bytes(fn: Callable[[], object], on_profile=None) -> int:
    """Max of the running sum of allocations minus frees during ``fn``, from the profiler.

    torch's own profiler parser reads these the same way: ``[memory]`` events of the kineto
    results, ``nbytes()`` positive for an allocation and negative for a free.
    """
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
    reset = _reset_rss_high_water()
    hwm_before = _proc_status_bytes("VmHWM")
    peak = _cpu_allocation_peak_bytes(fn, on_profile)
    hwm_after = _proc_status_bytes("VmHWM")
    delta = None if hwm_before is None or hwm_after is None else hwm_after - hwm_before
    suffix = "reset before the call" if reset else "not reset: 0 when below an earlier peak"
    return MemoryReading(peak, f"torch.profiler allocation trace (RSS high-water {suffix})",
                         delta)


def _cuda_peak_extra(fn: Callable[[], object]) -> MemoryReading:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    return MemoryReading(int(peak), "torch.cuda.max_memory_allocated", None)


def peak_extra_bytes(fn: Callable[[], object], device: str = "cpu",
                     on_profile: Callable[[object], object] | None = None) -> MemoryReading:
    """Peak bytes allocated while ``fn()`` runs beyond what was allocated before it.

    The inputs ``fn`` closes over are allocated before, so they are not counted; what
    ``fn`` returns is counted (it was allocated during the call). Call it after a warm-up
    (e.g. after ``time_interleaved``) so one-time lazy allocations are not counted.
    Exceptions from ``fn`` (an out-of-memory included) propagate so the caller can record
    the status. On a CPU the reading is a profiler session; ``on_profile(prof)`` is
    handed it when it ends (the stage names the kernel from the same call).
    """
    if not callable(fn):
        raise ValueError(f"fn={fn!r} is not callable")
    if check_device(device) == "cuda":
        return _cuda_peak_extra(fn)
    return _cpu_peak_extra(fn, on_profile)


@contextlib.contextmanager
def memory_cap(cap_bytes: int | None, device: str = "cpu") -> Iterator[None]:
    """Inside the block, allocating more than ``cap_bytes`` beyond current use fails like a
    real out-of-memory (so an OOM row can be produced on a machine that has the memory).

    CPU: lowers the address-space limit (RLIMIT_AS) to the current VmSize + cap, restored
    on exit; it caps virtual memory, so threads started inside the block also count, and
    memory the allocator already holds does not: glibc serves a request of any size from
    a free chunk of its heap (memory freed earlier in the process) without new address
    space. So on CPU this is a guard for the machine (a size far over the cap fails
    instead of being swapped or killed), not an exact cap: ``capped`` adds the exact
    check, from the profiler's allocation trace.
    CUDA: see ``_cuda_cap``. It synchronizes and empties the allocator's cache, so it must
    not be entered inside a timed call: time ``capped(fn, ...)`` instead. None = no cap.
    """
    check_device(device)
    if cap_bytes is None:
        yield
        return
    _check_count("cap_bytes", cap_bytes, 1)
    if device == "cuda":
        yield from _cuda_cap(cap_bytes)
        return
    yield from _cpu_address_space_cap(cap_bytes)


def _cuda_cap(cap_bytes: int) -> Iterator[None]:
    """The caching allocator (c10/cuda/CUDACachingAllocator.cpp) serves a request from a
    cached free block without any check, and refuses a new segment only when reserved
    memory plus its size would pass ``fraction x total``. So: empty the cache first (no
    cached block can slip past the cap), set the fraction to (bytes in use + cap) / total
    (reserved memory is in-use memory then, up to the free space of live segments), and
    on exit set it back to 1.0 and empty the cache again, so that blocks freed inside,
    after an out-of-memory too, go back to the device. Exact to the allocator's rounding
    (2 MiB; 20 MiB segments for requests of 1-10 MiB).
    """
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    fraction = min(1.0, (torch.cuda.memory_allocated() + cap_bytes) / total)
    torch.cuda.set_per_process_memory_fraction(fraction)
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


def capped(fn: Callable[[], object], cap_bytes: int | None,
           device: str = "cpu") -> Callable[[], object]:
    """``fn`` as a harness should time it under a cap of ``cap_bytes`` (None: ``fn``).

    A call's allocations do not change from one call to the next, and the cap's set-up
    must not be timed (on CUDA it synchronizes and empties the cache), so ``fn`` is
    tried now, outside the timing. If it fits, ``fn`` itself is returned and timed
    without a cap; if not, a function that raises that out-of-memory error again, so the
    harness records ``oom`` without running a case known not to fit.
    CUDA: one call under ``memory_cap``, which the caching allocator enforces exactly.
    CPU: an address-space limit is not exact (glibc reuses memory its heap holds, see
    ``memory_cap``), so the try is a warm-up call under ``memory_cap`` (a size far over
    the cap fails there, and one-time lazy allocations are made), then a second call,
    outside it, whose peak extra bytes the profiler's allocation trace counts whatever
    the heap holds: a peak over the cap is the out-of-memory.
    """
    check_device(device)
    if cap_bytes is None:
        return fn
    try:
        with memory_cap(cap_bytes, device):
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
        # Not under the address-space limit: the profiler's start-up would be refused.
        peak = _cpu_allocation_peak_bytes(fn) if device == "cpu" else 0
    except Exception as exc:  # noqa: BLE001 - any other failure recurs in the harness
        if not is_oom(exc):
            return fn
        # Keep the message, not the exception: its traceback holds the case's tensors.
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


def _cpu_address_space_cap(cap_bytes: int) -> Iterator[None]:
    vm_size = _proc_status_bytes("VmSize")
    if vm_size is None:
        raise ValueError("memory_cap on CPU needs /proc/self/status (Linux); pass "
                         "cap_bytes=None on this system")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    new_soft = vm_size + cap_bytes
    if hard != resource.RLIM_INFINITY:
        new_soft = min(new_soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (new_soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
