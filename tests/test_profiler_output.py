"""Quiet output: a profiled region prints nothing of the profiler's own (issue 18).

Kineto wrote ``USDT:... profiler_start`` / ``profiler_stop`` to stderr around every
profiled region; the main job's output and the stage logs were mostly those lines. Run in
a fresh interpreter: Kineto reads its log level once, when a process first profiles.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Every profiled region of the library: the kernel name, the CPU memory peak, the model
# stage's operation count and FLOPs.
PROFILED = """
import torch
from inferlab.measurement.kernel_names import kernel_that_ran
from inferlab.measurement.memory import peak_extra_bytes
from inferlab.stages import model
q = torch.randn(1, 2, 64, 16)
print(kernel_that_ran(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q)))
print(peak_extra_bytes(lambda: q @ q.transpose(-1, -2)).peak_extra_bytes)
print(model._kernel_ops(lambda: q @ q.transpose(-1, -2)))
"""


def test_profiled_regions_print_no_usdt_lines():
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", PROFILED], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "aten::" in done.stdout  # the regions did run under the profiler
    usdt = [line for line in output.splitlines() if "USDT" in line]
    assert usdt == [], f"{len(usdt)} profiler lines, e.g. {usdt[0]!r}"
