"""Helpers for tests that run the real pipeline in a temporary copy of the repository.

``copy_repo`` copies the tracked and untracked-not-ignored files without earlier results;
``run`` runs ``python -m snakemake`` (or another module) there with that copy's package
first on the path; ``jobs`` reads the stage jobs of a dry run; ``book_repo`` makes a git
repository whose book grid is the smoke grid, with its evidence made and committed, as a
fresh clone of this project would find it (only much smaller).
"""

from __future__ import annotations

import fcntl
import hashlib
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
from inferlab.core.pipeline import STAGES
from inferlab.evidence.register import Register
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
    return subprocess.run([sys.executable, "-m", module, *args], cwd=repo, env=env(repo),
                          capture_output=True, text=True, timeout=timeout)


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout


def jobs(dry_run: subprocess.CompletedProcess) -> set[str]:
    """Stage rules in a dry run's 'Job stats' table (not the 'all' target; empty when
    nothing is to be done)."""
    assert dry_run.returncode == 0, dry_run.stderr[-3000:]
    text = dry_run.stdout + dry_run.stderr
    table = text.split("Job stats:", 1)[1].split("total", 1)[0] if "Job stats:" in text else ""
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+\s*$", table, re.MULTILINE)} - {"all"}


def versions(repo: Path, key: str) -> dict[str, int]:
    return {s: len(Register(repo, key).history(s)) for s in STAGES}


def tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def book_repo(dest: Path) -> Path:
    """A git repository of this project whose config.yaml *is* the smoke grid, with its
    evidence (results/, evidence/, report/) made by ``snakemake --cores 1`` for the
    machine detected here, traffic run twice (so the register has a tail to delete), and
    everything committed."""
    repo = copy_repo(dest)
    smoke = yaml.safe_load((repo / "profiles" / "smoke.yaml").read_text())
    smoke.pop("grid", None)  # the smoke sizes are this repository's book grid, but for
    smoke["prefill"]["cpu"]["sizes"] = [{"dtype": "float32", "T": [64, 96]}]  # one length:
    book = deep_merge(yaml.safe_load((repo / "config.yaml").read_text()), smoke)  # a grid
    # apart from the smoke profile
    (repo / "config.yaml").write_text(yaml.safe_dump(book, sort_keys=False))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "code, with the smoke sizes as the book grid")
    for args in (["--cores", "1"], ["--cores", "1", "--forcerun", "traffic"]):
        made = run(repo, *args)
        assert made.returncode == 0, made.stderr[-5000:]
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "evidence")
    return repo


# The smoke pipeline as the tests run it: its own machine id, so its key never meets this
# host's (test-smoke@smoke).
SMOKE_MACHINE = "test-smoke"
SMOKE = ["--configfile", "profiles/smoke.yaml", "--config", f"machine={SMOKE_MACHINE}"]


def _session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every xdist worker of this test session shares (pytest-xdist's own
    recipe: the parent of a worker's base temporary folder); without xdist, the base."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def smoke_repo(tmp_path_factory: pytest.TempPathFactory, dest: Path) -> Path:
    """A copy at ``dest`` of the repository after one ``snakemake --cores 1`` of the smoke
    profile (every rule; .snakemake/ metadata and mtimes kept). The run is made once per
    session under a lock, by the first module that asks; the others wait for it and copy
    it. A failed run is recorded and fails every module that asks, with its stderr."""
    root = _session_root(tmp_path_factory)
    made, failed = root / "smoke-shared" / "repo", root / "smoke-shared.failed"
    with open(root / "smoke-shared.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not made.is_dir() and not failed.exists():
            repo = copy_repo(root / "smoke-shared" / "building")
            result = run(repo, "--cores", "1", *SMOKE)
            if result.returncode != 0:
                failed.write_text(result.stderr[-5000:])
            else:
                repo.rename(made)
    if failed.exists():
        pytest.fail(f"the shared smoke pipeline run failed:\n{failed.read_text()}")
    return Path(shutil.copytree(made, dest, symlinks=True))


def book_key(repo: Path) -> str:
    """The one results key of a ``book_repo``: the machine id detected here."""
    (key,) = [p.name for p in (repo / "results").iterdir()]
    return key


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
