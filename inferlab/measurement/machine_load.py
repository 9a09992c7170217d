"""How busy the machine was while a stage ran, from the kernel's counters, recorded in the
provenance (``environment.load``) so that the report flags a run made beside a busy process.

``others_busy_cores``: the CPU time every other process used over the stage's wall time
(one busy process reads about 1.0, a quiet machine 0.0-0.2). ``steal_fraction``: the CPU
time the hypervisor gave other guests.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# a run beside a process using at least this many cores is "under load"
UNDER_LOAD_CORES = 0.5


def _stat() -> tuple[float, float, float] | None:
    """(busy, steal, total) seconds of all CPUs since boot, or None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    steal = ticks[7] if len(ticks) > 7 else 0
    total = sum(ticks[:8])
    return ((total - idle - steal) / _TICKS, steal / _TICKS, total / _TICKS)


def _ours() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def snapshot() -> dict:
    """The counters now, to hand to ``during`` when the stage has finished."""
    return {"wall": time.monotonic(), "stat": _stat(), "ours": _ours()}


def during(before: dict) -> dict:
    """What else the machine did since ``before``; a field is None where the kernel does
    not show it."""
    wall = time.monotonic() - before["wall"]
    now, then = _stat(), before["stat"]
    others = steal = None
    if now and then and wall > 0:
        others = max(0.0, (now[0] - then[0]) - (_ours() - before["ours"])) / wall
        total = now[2] - then[2]
        steal = (now[1] - then[1]) / total if total > 0 else 0.0
    try:
        loadavg = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        loadavg = None
    return {"others_busy_cores": None if others is None else round(others, 3),
            "steal_fraction": None if steal is None else round(steal, 4),
            "loadavg": loadavg,
            "under_load": None if others is None else others >= UNDER_LOAD_CORES}
