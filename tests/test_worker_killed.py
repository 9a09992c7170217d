"""A timing worker the kernel kills (the out-of-memory killer's SIGKILL) drops its points
with that reason; the stage keeps the rest instead of crashing (a worker of the 8,192-token
point was killed at 13.5 GB and the whole prefill stage, minutes of timings, was lost)."""

from __future__ import annotations

import os
import signal

from inferlab.measurement.workers import time_points


def killed_while_building(point):
    """A factory that dies the way an out-of-memory kill does."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_worker_drops_its_points_with_the_reason():
    results = time_points("tests.test_worker_killed:killed_while_building", [1, 2],
                          workers=1, rounds=2, budget_s=60, time_cap_s=10, threads=1)
    assert [r.dropped for r in results] == [{"status": "dropped", "cause": "killed",
                                             "budget_left_s": None}] * 2


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
    import subprocess
    import sys

    from inferlab.core.layout import REPO_ROOT

    out = subprocess.run([sys.executable, "-c", _HOLD_AND_RELEASE, str(REPO_ROOT)],
                         capture_output=True, text=True, timeout=120, check=True)
    held, released = map(float, out.stdout.split())
    assert held > 900 and released < held - 900, (held, released)
