"""The prepared GPU run (scripts/gpu-check.sh, docs/gpu-run.md) rehearsed on this CPU.

The dry run installs the carried wheels with pip --no-index into an empty folder, runs
the smoke grid stage by stage without Snakemake in a copy of the repository (no .git, as
the working tree travels to the lent machine), and checks its own $OUT against what
comes back from there. The $OUT checker and the lazy jsonschema import are tested alone.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from inferlab.core.layout import REPO_ROOT
from tests.pipeline_repo import copy_repo

CHECK_OUT = REPO_ROOT / "scripts" / "check-out.py"


def _check_out(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK_OUT), str(out)], capture_output=True,
                          text=True, timeout=60)


def _python312() -> str | None:
    """A CPython 3.12 that runs here, to import the device's cp312 wheels; else None."""
    for candidate in [shutil.which("python3.12"),
                      *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]:
        if candidate and subprocess.run([candidate, "-c", "pass"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def _wheels(repo: Path) -> None:
    """gpu-wheels/ in the copy: this checkout's, else downloaded (skipped without PyPI)."""
    if (REPO_ROOT / "gpu-wheels").is_dir() and list((REPO_ROOT / "gpu-wheels").glob("*.whl")):
        shutil.copytree(REPO_ROOT / "gpu-wheels", repo / "gpu-wheels")
        return
    made = subprocess.run(["bash", "scripts/gpu-wheels.sh"], cwd=repo, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable})
    if made.returncode == 3:
        pytest.skip(f"the registry cannot be reached to make gpu-wheels/: {made.stderr[-300:]}")
    assert made.returncode == 0, made.stderr


@pytest.mark.slow
def test_dry_run_installs_only_carried_wheels_and_returns_what_fits(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    _wheels(repo)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable,
           "GPU_CHECK_SITE": str(tmp_path / "site"),
           "GPU_CHECK_PY312": _python312() or "python3.12-absent"}
    env.pop("GPU_CHECK_PARENT", None)
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=280)
    summary = (out / "summary.log").read_text()
    assert done.returncode == 0, summary + done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["evidence.tar.gz", "summary.log"]
    assert "OUT check: ok" in summary
    assert "(no index)" in summary  # the wheels were installed, not found elsewhere
    with tarfile.open(out / "evidence.tar.gz") as tar:
        names = tar.getnames()
    key = next(n.split("/")[1] for n in names if n.startswith("results/"))
    for stage in ("probe.json", "prefill.csv", "decode.csv", "claims.json"):
        assert f"results/{key}/{stage}" in names
    assert f"evidence/{key}/register.jsonl" in names
    for log in ("steps.txt", "preflight.txt", "install.log", "ncu-bytes.csv"):
        assert f"logs/gpu-check/{log}" in names
    installed = {p.name.split("-")[0] for p in (tmp_path / "site").glob("*.dist-info")}
    assert {"jsonschema", "referencing", "rpds_py", "jsonschema_specifications"} <= installed


def test_a_spent_budget_skips_steps_and_still_packs_and_fits(tmp_path):
    # 25 s leave no step its 15 s after the 20 s kept for a kill and the pack: every step
    # is skipped, and what ran (install, preflight) still comes back within the limits.
    repo = copy_repo(tmp_path / "repo")
    _wheels(repo)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "GPU_CHECK_BUDGET_S": "25",
           "GPU_CHECK_SITE": str(tmp_path / "site"), "GPU_CHECK_PY312": "python3.12-absent"}
    env.pop("GPU_CHECK_PARENT", None)
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    summary = (out / "summary.log").read_text()
    assert done.returncode == 1, summary
    assert "SKIP stage-probe" in summary and "SKIP ncu" in summary
    assert "import not checked" in summary  # no CPython 3.12: said, not hidden
    assert "OUT check: ok" in summary
    with tarfile.open(out / "evidence.tar.gz") as tar:
        names = tar.getnames()
    assert "logs/gpu-check/preflight.txt" in names and "logs/gpu-check/steps.txt" in names


def test_dry_run_refuses_without_carried_wheels(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable,
           "GPU_CHECK_SITE": str(tmp_path / "site")}
    env.pop("GPU_CHECK_PARENT", None)
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "scripts/gpu-wheels.sh" in (out / "summary.log").read_text()


def test_out_check_accepts_two_files(tmp_path):
    (tmp_path / "evidence.tar.gz").write_bytes(b"x" * 100)
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "summary.log").write_text("ok")
    done = _check_out(tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("OUT check: ok"), done.stdout


@pytest.mark.parametrize("make, problem", [
    (lambda out: [(out / f"f{i}.log").write_text("x") for i in range(9)], "9 files"),
    (lambda out: (out / "a" / "b" / "c").mkdir(parents=True)
     or (out / "a" / "b" / "c" / "f.log").write_text("x"), "folders deep"),
    (lambda out: (out / "gpu-run-cpu@smoke.tar.gz").write_text("x"), "a name outside"),
    (lambda out: (out / "big.bin").write_bytes(b"\0" * ((16 << 20) + 1)), "over 16 MiB"),
    (lambda out: (out / "link").symlink_to(out), "a link"),
])
def test_out_check_names_what_would_not_come_back(tmp_path, make, problem):
    make(tmp_path)
    done = _check_out(tmp_path)
    assert done.returncode == 1 and problem in done.stdout, done.stdout


def test_library_loads_without_jsonschema_and_a_check_says_how_to_install_it():
    code = """
import sys
sys.modules["jsonschema"] = None  # as on the lent GPU's image: not importable
from inferlab.evidence import artifacts
from inferlab.judging import claims
from inferlab.workflow import config  # noqa: F401  (no import at load)
try:
    config.validate_config({})
except ModuleNotFoundError as exc:
    print("ERROR", exc)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ERROR jsonschema is not importable" in done.stdout
    assert "gpu-wheels" in done.stdout
