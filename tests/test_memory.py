"""Tests for inferlab.measurement.memory: peak extra bytes, what counts as out of memory,
and the memory cap on a CPU and, against an allocator-state model, on CUDA.

The CUDA cap rests on two rules of PyTorch's caching allocator (c10/cuda/
CUDACachingAllocator.cpp): a request that a cached free block can serve is served from it
without any check, and a new segment is refused when the memory already reserved plus its
size would pass ``fraction x total``. ``FakeAllocator`` keeps exactly that state and stands
in for ``torch.cuda``'s memory functions, so the scenarios that broke the cap (a cache left
by an earlier case, a fraction taken from reserved memory) run here.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from inferlab.measurement.memory import capped, is_oom, memory_cap, peak_extra_bytes
from tests.numerics import requires_cuda

GiB, MiB = 1 << 30, 1 << 20
TOTAL = 80 * GiB


class FakeAllocator:
    """Allocated, reserved and cached bytes, and the per-process fraction."""

    def __init__(self, in_use: int = 0, cached: tuple[int, ...] = ()):
        self.allocated = in_use
        self.cached = list(cached)          # free blocks held by the cache
        self.reserved = in_use + sum(cached)
        self.fraction = 1.0
        self.fractions_set: list[float] = []
        self.emptied = 0

    def malloc(self, size: int) -> int:
        fits = sorted(b for b in self.cached if b >= size)
        if fits:  # reused without a check against the fraction
            self.cached.remove(fits[0])
            self.allocated += fits[0]
            return fits[0]
        if self.reserved + size > self.fraction * TOTAL:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {size / GiB:.2f} GiB. Of the "
                f"allocated memory {self.allocated / GiB:.2f} GiB is allocated by PyTorch")
        self.reserved += size
        self.allocated += size
        return size

    def free(self, block: int) -> None:
        self.allocated -= block
        self.cached.append(block)

    # torch.cuda's functions
    def memory_allocated(self, device=None) -> int:
        return self.allocated

    def memory_reserved(self, device=None) -> int:
        return self.reserved

    def empty_cache(self) -> None:
        self.emptied += 1
        self.reserved -= sum(self.cached)
        self.cached.clear()

    def set_per_process_memory_fraction(self, fraction: float, device=None) -> None:
        assert 0.0 <= fraction <= 1.0, fraction
        self.fraction = fraction
        self.fractions_set.append(fraction)


@pytest.fixture
def allocator(monkeypatch):
    """A CUDA allocator holding 1 GiB in use and 8 GiB cached by an earlier case."""
    fake = FakeAllocator(in_use=1 * GiB, cached=(8 * GiB,))
    for name in ("memory_allocated", "memory_reserved", "empty_cache",
                 "set_per_process_memory_fraction"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: SimpleNamespace(total_memory=TOTAL))
    return fake


def _work(allocator: FakeAllocator, size: int):
    """A case that allocates ``size`` bytes and frees them again."""
    calls = []

    def fn():
        calls.append(1)
        allocator.free(allocator.malloc(size))
    return fn, calls


def test_cuda_cap_refuses_what_the_cache_would_have_served_and_is_lifted_after(allocator):
    fn, _ = _work(allocator, 4 * GiB)
    with pytest.raises(torch.OutOfMemoryError) as info:
        with memory_cap(2 * GiB, device="cuda"):
            fn()
    assert is_oom(info.value)
    assert allocator.fraction == 1.0
    assert allocator.reserved == allocator.allocated == 1 * GiB, "nothing left cached"


def test_cuda_cap_admits_what_fits_counting_memory_in_use_not_reserved(allocator):
    fn, calls = _work(allocator, 1 * GiB)
    with memory_cap(2 * GiB, device="cuda"):
        assert allocator.fraction * TOTAL == pytest.approx(3 * GiB)
        fn()
    assert calls == [1]


def test_cuda_cap_above_the_device_is_no_cap(allocator):
    with memory_cap(200 * GiB, device="cuda"):
        assert allocator.fraction == 1.0


def test_capped_on_cuda_tries_once_outside_the_timing_and_returns_fn_when_it_fits(allocator):
    fn, calls = _work(allocator, 1 * GiB)
    timed = capped(fn, 2 * GiB, device="cuda")
    assert timed is fn, "a case that fits is timed as it is, with no cap in the timed call"
    fractions_after_trial = list(allocator.fractions_set)
    for _ in range(5):
        timed()
    assert allocator.fractions_set == fractions_after_trial, "no cap entered while timed"
    assert len(calls) == 1 + 5


def test_capped_on_cuda_turns_a_case_over_the_cap_into_an_oom(allocator):
    fn, calls = _work(allocator, 4 * GiB)
    timed = capped(fn, 2 * GiB, device="cuda")
    with pytest.raises(torch.OutOfMemoryError, match="2.00 GiB cap") as info:
        timed()
    assert is_oom(info.value)
    assert calls == [1], "the case is not run again once it is known not to fit"
    assert allocator.fraction == 1.0


def test_capped_without_a_cap_is_fn(allocator):
    fn, _ = _work(allocator, 1 * GiB)
    assert capped(fn, None, device="cuda") is fn
    assert capped(fn, None, device="cpu") is fn


def test_capped_on_cpu_turns_a_case_over_the_cap_into_an_oom_on_every_call():
    def big():
        torch.empty(256 * MiB, dtype=torch.uint8).fill_(1)

    timed = capped(big, 64 * MiB, device="cpu")
    for _ in range(2):
        with pytest.raises(torch.OutOfMemoryError, match="64 MiB cap") as info:
            timed()
        assert is_oom(info.value)
    big()  # and no cap outside the timed calls


def test_capped_on_cpu_returns_fn_when_the_case_fits():
    calls = []

    def small():
        calls.append(1)
        return torch.empty(4 * MiB, dtype=torch.uint8).fill_(1)

    assert capped(small, 64 * MiB, device="cpu") is small
    assert calls, "the case ran once, outside the timing, to be measured against the cap"


# A heap left by earlier work in the process: glibc's mmap threshold raised to 24 MiB by
# one free, twenty 20 MiB tensors served from the heap, nineteen freed below the twentieth.
# A later request of any size is served from that free chunk, with no new address space,
# so an address-space limit alone lets it past the cap.
_FRAGMENTED_HEAP = """
import torch
from inferlab.measurement.memory import capped, is_oom, _proc_status_bytes
MiB = 1 << 20
t = torch.empty(24 * MiB, dtype=torch.uint8).fill_(0); del t
blocks = [torch.empty(20 * MiB, dtype=torch.uint8).fill_(0) for _ in range(20)]
last = blocks.pop()  # live above the others
before = _proc_status_bytes("VmSize")
del blocks
held = before - _proc_status_bytes("VmSize") < 64 * MiB
timed = capped(lambda: torch.empty(256 * MiB, dtype=torch.uint8).fill_(1), 64 * MiB, "cpu")
try:
    timed()
    print("fitted", held)
except Exception as exc:
    print("oom" if is_oom(exc) else repr(exc), held)
"""


def test_capped_on_cpu_holds_when_the_heap_holds_freed_memory():
    done = subprocess.run([sys.executable, "-c", _FRAGMENTED_HEAP], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    outcome, held = done.stdout.split()
    if held != "True":
        pytest.skip("this allocator returned the freed blocks to the system, so the heap "
                    "holds nothing a request could reuse (not glibc's malloc?)")
    assert outcome == "oom", "a 256 MiB case passed a 64 MiB cap from memory the heap held"


def test_capped_rejects_an_unknown_device():
    with pytest.raises(ValueError, match="device='tpu'"):
        capped(lambda: None, 1, device="tpu")


@requires_cuda
def test_real_cuda_cap_after_a_cached_block_and_peak_memory():
    block = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
    del block  # 2 GiB now cached by the allocator
    fn = lambda: torch.empty(1 * GiB, dtype=torch.uint8, device="cuda")  # noqa: E731
    with pytest.raises(torch.OutOfMemoryError), memory_cap(256 << 20, device="cuda"):
        fn()
    assert capped(fn, 2 * GiB, device="cuda") is fn
    assert peak_extra_bytes(fn, device="cuda").peak_extra_bytes >= 1 * GiB


@pytest.mark.parametrize("n", [384, 1000])
def test_peak_extra_bytes_reads_a_known_allocation_and_not_the_inputs(n):
    gen = torch.Generator().manual_seed(n)
    reading = peak_extra_bytes(lambda: torch.randn(n, n, generator=gen))
    assert reading.peak_extra_bytes == pytest.approx(4 * n * n, rel=0.10)
    assert "profiler" in reading.method
    assert reading.rss_hwm_delta_bytes is None or reading.rss_hwm_delta_bytes >= 0
    big_input = torch.randn(2048, 2048, generator=gen)  # 16 MiB allocated before the call
    assert peak_extra_bytes(lambda: big_input.sum()).peak_extra_bytes < 1 * MiB


def test_naive_attention_shows_its_score_matrix():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 1024, 64, generator=gen) for _ in range(3))
    reading = peak_extra_bytes(lambda: torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v)
    assert reading.peak_extra_bytes >= 2 * 1024 * 1024 * 4  # (B*H, T, T) fp32 scores


_CAP_IN_A_FRESH_PROCESS = """
import torch
from inferlab.measurement.memory import is_oom, memory_cap
MiB = 1 << 20
with memory_cap(64 * MiB):
    try:
        torch.empty(512 * MiB, dtype=torch.uint8)
        refused = "no"
    except Exception as exc:
        refused = "oom" if is_oom(exc) else repr(exc)
    small = torch.empty(8 * MiB, dtype=torch.uint8)  # within the cap: still fine
after = torch.empty(512 * MiB, dtype=torch.uint8).numel() == 512 * MiB
with memory_cap(None):
    none = torch.empty(256 * MiB, dtype=torch.uint8).numel() == 256 * MiB
print(refused, small.numel() == 8 * MiB, after, none)
"""


def test_memory_cap_makes_a_too_big_allocation_fail_like_an_oom():
    """In a fresh process: memory a process's heap already holds free (from earlier tests
    in this one) serves requests without the address-space limit."""

    done = subprocess.run([sys.executable, "-c", _CAP_IN_A_FRESH_PROCESS],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["oom", "True", "True", "True"], done.stdout


@pytest.mark.parametrize(("exc", "oom"), [
    (torch.OutOfMemoryError("x"), True), (MemoryError(), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"), True),
    (RuntimeError("[enforce fail] DefaultCPUAllocator: boom"), True),
    (RuntimeError("shape mismatch"), False), (ValueError("out of range"), False),
    (KeyError("memory"), False)])
def test_is_oom_tells_out_of_memory_from_other_errors(exc, oom):
    assert is_oom(exc) is oom
