"""The dry run's config and its exactness check (inferlab.workflow.gpu_dry_run)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

from inferlab.core.layout import REPO_ROOT
from inferlab.workflow import gpu_dry_run
from inferlab.workflow.config import effective_config, load_config, resolve_grid

BOOK = [REPO_ROOT / "profiles" / "book.yaml"]


def test_the_simulated_config_is_the_plans_grid_on_a_cpu_under_another_key():
    raw = load_config(BOOK)
    sim = gpu_dry_run.simulated_config(raw)
    assert sim["device"] == "cpu" and sim["machine"] == gpu_dry_run.SIMULATED_MACHINE
    for stage in ("prefill", "decode"):
        gpu = effective_config(raw, stage, "cuda")[stage]
        cpu = effective_config(sim, stage, "cpu")[stage]
        shrunk = set(gpu_dry_run.SHRINK[stage])
        assert {k: v for k, v in cpu.items() if k not in shrunk} == \
            {k: v for k, v in gpu.items() if k not in shrunk}
        assert cpu["heads"] == 1
    assert effective_config(sim, "prefill", "cpu")["timing"] == \
        {**effective_config(raw, "prefill", "cuda")["timing"]}
    assert resolve_grid(sim, "cpu") is not None  # never the CPU's book grid


def test_exactness_checks_the_cheapest_under_the_interpreter_and_says_why_not_the_rest(tmp_path):
    out = tmp_path / "exactness.csv"
    code = ("import sys; from pathlib import Path; from inferlab.workflow import gpu_dry_run;"
            "from inferlab.workflow.config import load_config;"
            "gpu_dry_run.exactness(load_config([sys.argv[1]]), Path(sys.argv[2]), most_tiles=70)")
    done = subprocess.run([sys.executable, "-c", code, str(BOOK[0]), str(out)], cwd=REPO_ROOT,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out.open()))
    assert rows[0]["status"] == "ok" and int(rows[0]["tiles"]) <= 70
    assert all(r["status"].startswith("not checked in the dry run") for r in rows[1:])
    kernels = {r["kernel"] for r in rows}
    assert kernels == {"triton_flash", "triton_decode"}
