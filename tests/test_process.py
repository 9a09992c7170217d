"""The process a stage runs in (inferlab.measurement.process): freed buffers kept warm
(glibc neither trims nor maps them afresh), what was set recorded, and the heap given
back by the stage's own process before its timing worker needs the memory. Each runs in a
fresh interpreter: the settings must come before torch loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_steady_process_keeps_freed_buffers_warm_and_records_it():
    """benchmarks/bimodal.py's finding: glibc hands naive attention's freed score matrix
    back to the kernel, and the next call faults on every page again; a stage's process
    keeps it: ten calls after a warm-up of three fault at most two calls' worth of 16 MiB
    of scores (4,096 pages each) in all, where glibc as it comes faults 4,000 to 9,000
    pages a call, varying run to run (the bimodality itself, so it is not asserted)."""
    code = ("import resource\n"
            "from inferlab.workflow.runner import steady_process\n"
            "info = steady_process()\n"
            "import torch\n"
            "from inferlab.algorithms.attention import naive_attention\n"
            "q, k, v = (torch.randn(1, 4, 1024, 64) for _ in range(3))\n"
            "for _ in range(3):\n"
            "    naive_attention(q, k, v, True)\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "for _ in range(10):\n"
            "    naive_attention(q, k, v, True)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, info)\n")
    faults, info = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  check=True, cwd=ROOT).stdout.split(maxsplit=1)
    assert int(faults) <= 2 * 4096
    assert "'THP_MEM_ALLOC_ENABLE': '1'" in info
    assert "'OMP_WAIT_POLICY': 'PASSIVE'" in info and "trim_threshold" in info


def test_the_steady_process_keeps_buffers_warm_past_two_gib():
    """"No trimming" must hold for any size: naive attention at 4,096 tokens (12 heads)
    frees two 805 MB buffers a call, and a trim threshold of 2 GiB (mallopt's largest)
    made every call fault on all their pages again. Here a 2.5 GiB buffer is taken,
    touched, freed and taken again: the second time none of its pages may fault."""
    code = ("import ctypes, resource\n"
            "from inferlab.workflow.runner import steady_process\n"
            "assert steady_process()['glibc_mallopt']\n"
            "libc = ctypes.CDLL('libc.so.6')\n"
            "libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]\n"
            "libc.free.argtypes = [ctypes.c_void_p]\n"
            "n = 5 << 29  # 2.5 GiB\n"
            "for _ in range(2):\n"
            "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "    p = libc.malloc(n)\n"
            "    ctypes.memset(p, 1, n)\n"
            "    libc.free(p)\n"
            "    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    first, second = map(int, out)
    assert first >= 0.9 * (5 << 29) // 4096  # new pages the first time: faults are seen
    assert second <= 0.01 * first, out


_HOLD_AND_RELEASE = """
import resource, sys
sys.path.insert(0, sys.argv[1])
from inferlab.measurement.process import release_freed_memory, steady_process
steady_process()
import torch
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
x = torch.ones(256 << 20)  # 1 GiB, written
del x
held = rss_mib()
release_freed_memory()
print(held, rss_mib())
"""


def test_release_freed_memory_gives_a_steadied_heap_back():
    """steady_process keeps freed buffers (never trims); the stage's own process gives
    them back before its timing worker needs the memory."""
    out = subprocess.run([sys.executable, "-c", _HOLD_AND_RELEASE, str(ROOT)],
                         capture_output=True, text=True, timeout=120, check=True)
    held, released = map(float, out.stdout.split())
    assert held > 900 and released < held - 900, (held, released)
