"""Helpers for tests that run the real pipeline in a temporary copy of the repository.

``built`` is the one pipeline a test session runs: this project with the smoke sizes as its
book grid, for a fixed machine id, every stage made by ``snakemake --cores 1`` and
committed, as a fresh clone of this project finds its evidence (only much smaller). It is
built once per session, under a lock, by the first test that asks: only
tests/test_pipeline.py asks, and pytest-xdist gives a file to one worker (``--dist
loadfile``), so one worker builds it while the other runs the rest.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from inferlab.core.layout import REPO_ROOT
from inferlab.workflow.config import deep_merge

NOT_COPIED = {".git", ".venv", "results", "evidence", "report", "logs", ".snakemake"}
GIT = ["git", "-c", "user.name=inferlab tests", "-c", "user.email=tests@inferlab.invalid",
       "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"]


def copy_repo(dest: Path) -> Path:
    """The tracked and untracked-not-ignored files, without results of earlier runs."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    for rel in listed.stdout.splitlines():
        if rel.split("/")[0] in NOT_COPIED or not (REPO_ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, dest / rel)
    return dest


def env(repo: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(repo), "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1"}


def run(repo: Path, *args: str, module: str = "snakemake",
        timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m module args`` in ``repo``, with that copy's package first on the path."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=repo, env=env(repo),
                          capture_output=True, text=True, timeout=timeout)


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout


def commit(repo: Path, message: str = "evidence") -> None:
    """Commit everything in ``repo``, made a repository first if it is none."""
    if not (repo / ".git").exists():
        git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def jobs(dry_run: subprocess.CompletedProcess) -> set[str]:
    """Stage rules in a dry run's 'Job stats' table (not the 'all' target; empty when
    nothing is to be done)."""
    assert dry_run.returncode == 0, dry_run.stderr[-3000:]
    text = dry_run.stdout + dry_run.stderr
    table = text.split("Job stats:", 1)[1].split("total", 1)[0] if "Job stats:" in text else ""
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+\s*$", table, re.MULTILINE)} - {"all"}


# The one pipeline's machine id and results key: never this host's own
MACHINE = KEY = "test-box"


def _session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every xdist worker of this test session shares (pytest-xdist's own
    recipe: the parent of a worker's base temporary folder); without xdist, the base."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _build(dest: Path) -> Path:
    repo = copy_repo(dest)
    smoke = yaml.safe_load((repo / "profiles" / "smoke.yaml").read_text())
    smoke.pop("grid", None)  # the smoke sizes are this repository's book grid, but for
    smoke["prefill"]["cpu"]["sizes"] = [{"dtype": "float32", "T": [64, 96]}]  # one length:
    # a grid apart from the smoke profile's, which a test runs beside it
    book = deep_merge(yaml.safe_load((repo / "config.yaml").read_text()), smoke)
    book["machine"] = MACHINE
    (repo / "config.yaml").write_text(yaml.safe_dump(book, sort_keys=False))
    commit(repo, "code, with the smoke sizes as the book grid")
    made = run(repo, "--cores", "1")
    if made.returncode != 0:
        raise RuntimeError(made.stderr[-5000:])
    commit(repo)
    return repo


def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's one pipeline run (see the module docstring); a failed build fails
    every test that asks, with its stderr."""
    root = _session_root(tmp_path_factory)
    made, failed = root / "pipeline-shared" / "repo", root / "pipeline-shared.failed"
    with open(root / "pipeline-shared.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not made.is_dir() and not failed.exists():
            try:
                _build(root / "pipeline-shared" / "building").rename(made)
            except RuntimeError as exc:
                failed.write_text(str(exc))
    if failed.exists():
        pytest.fail(f"the session's pipeline run failed:\n{failed.read_text()}")
    return made


@contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. "1m") mounted at ``where`` (made here; root only; the
    test skips saying why when it cannot mount), unmounted afterwards: a disk that fills."""
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
