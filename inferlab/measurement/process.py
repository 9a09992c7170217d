"""The process a stage runs in, settled before it computes: the allocator, OpenMP's
waiting, torch's threads and seed. Computing code of every stage (``pipeline.code_files``):
a change here can change every number, so it reruns every stage.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_NEVER, _TOP_PAD = -1, 256 << 20  # -1: never trim, mallopt(3) (2**31 - 1 would be 2 GiB)


def steady_process() -> dict:
    """Keep one run's timings like the next's (benchmarks/bimodal.py found the causes):

    * glibc: no mmap, no trimming (a trim threshold of -1, mallopt(3)), the heap grown
      256 MiB at a time, so freed buffers stay warm as a GPU's caching allocator keeps
      them. Otherwise whether a call's score matrix faulted on every page depended on what
      ran before it: naive attention at 256 tokens read 5 or 9 ms run to run, and at 4,096
      tokens a trimmed heap cost 393,216 page faults a call (1.1-3.1 s, not 0.75);
    * OpenMP threads waiting passively (unless the caller chose): spinning made two
      threads on a shared 2-vCPU VM up to 8x slower than one;
    * torch's CPU allocator asks for transparent huge pages for buffers of 2 MiB and more
      (``THP_MEM_ALLOC_ENABLE``, unless the caller chose): a decode step reads its whole
      cache once, and with 4 KiB pages it misses the TLB on every page, differently
      process to process (decode's ratios moved a median 1.4 % between runs with huge
      pages, 3.3 % without).

    Must run before torch loads OpenMP. Returns what was set, for the provenance.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    malloc = None
    try:
        libc = ctypes.CDLL("libc.so.6")
        if libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _NEVER) \
                and libc.mallopt(_M_TOP_PAD, _TOP_PAD):
            malloc = {"mmap_max": 0, "trim_threshold": _NEVER, "top_pad": _TOP_PAD}
    except OSError:  # not glibc: nothing to set
        pass
    return {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"],
            "THP_MEM_ALLOC_ENABLE": os.environ["THP_MEM_ALLOC_ENABLE"],
            "transparent_hugepage": _thp_mode(), "glibc_mallopt": malloc}


def _thp_mode() -> str | None:
    """The kernel's transparent huge page mode (always, madvise or never), None where
    it does not say."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.find("[") + 1:text.find("]")] if "[" in text else None


def release_freed_memory() -> bool:
    """Give the heap's free memory back to the kernel now (glibc ``malloc_trim(0)``), in a
    process that times nothing: the stage's own, after it checked which SDPA backends run
    (the math backend at 8,192 tokens leaves ~7 GB free but held, which steady_process
    never trims) and before its timing worker needs the memory. False without glibc."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def seed_and_threads(threads: int, seed: int) -> None:
    """torch's intra-op threads and its global seed, as the stage's config says."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
