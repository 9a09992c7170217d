"""A single-node Slurm cluster for tests (the session fixture ``slurm_cluster``; docs/slurm.md
shows its use), and helpers to run a workflow through it.

The fixture skips (with the reason) when Slurm, munge, MariaDB or the Snakemake Slurm plugin
is not installed, or when not root; it never installs anything (LOCAL_SLURM_NO_INSTALL=1).
It starts the cluster with ``tools/local-slurm.sh start DIR`` and stops it at the end of the
session, unless the cluster in DIR was already running, in which case it leaves it running.
DIR is ``$INFERLAB_SLURM_DIR`` or /tmp/inferlab-slurm (the script's default).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "local-slurm.sh"
DEFAULT_DIR = "/tmp/inferlab-slurm"
START_TIMEOUT_S = 180

# What the script runs, and the Debian package that brings it.
BINARIES = {"sbatch": "slurm-client", "sacct": "slurm-client", "slurmctld": "slurmctld",
            "slurmd": "slurmd", "slurmdbd": "slurmdbd", "munged": "munge",
            "mariadbd": "mariadb-server"}
PLUGIN_MODULE = "snakemake_executor_plugin_slurm"

# "Job 2 has been submitted with SLURM jobid 7 (log: .../slurm/rule_prepare/7.log)."
_SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
_RULE_DIR = re.compile(r"/(?:rule|group)_([A-Za-z_][A-Za-z0-9_]*)/")


def _which(name: str) -> str | None:
    """``shutil.which``, also looking in the sbin folders a non-login PATH may lack."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")


def missing_requirements() -> str | None:
    """Why the local cluster cannot run here, or None when it can."""
    reasons = []
    missing = [f"{b} (apt package {p})" for b, p in BINARIES.items() if _which(b) is None]
    if missing:
        reasons.append("not installed: " + ", ".join(missing))
    if importlib.util.find_spec(PLUGIN_MODULE) is None:
        reasons.append(f"snakemake-executor-plugin-slurm is not installed for {sys.executable}")
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        reasons.append("not root on Linux (tools/local-slurm.sh runs the daemons as root)")
    return "; ".join(reasons) or None


def submitted_jobs(log: str) -> dict[str, list[str]]:
    """``{rule: [slurm job id, ...]}`` from the submission lines of a Snakemake log."""
    jobs: dict[str, list[str]] = {}
    for match in _SUBMITTED.finditer(log):
        job_id, log_path = match.groups()
        rule = _RULE_DIR.search(log_path)
        if rule is None:
            raise ValueError(f"no rule_<name>/ folder in the Slurm log path {log_path!r}")
        jobs.setdefault(rule.group(1), []).append(job_id)
    return jobs


@dataclass
class WorkflowRun:
    """One ``snakemake --executor slurm`` run: its command, exit status, log and wall time."""

    command: list[str]
    returncode: int
    log: str
    wall_s: float

    def slurm_jobs(self) -> dict[str, list[str]]:
        return submitted_jobs(self.log)

    def describe(self, tail: int = 60) -> str:
        lines = self.log.splitlines()[-tail:]
        return f"$ {' '.join(self.command)}\n(exit {self.returncode})\n" + "\n".join(lines)


@dataclass
class SlurmCluster:
    """A running local cluster: its state folder and an environment for its clients."""

    state_dir: str
    env: dict[str, str] = field(repr=False)
    started_here: bool

    def run_snakemake(self, workdir: Path, profile: Path, *args: str,
                      timeout: float = 600) -> WorkflowRun:
        """Run ``snakemake --executor slurm --workflow-profile PROFILE ARGS`` in ``workdir``."""
        command = [sys.executable, "-m", "snakemake", "--executor", "slurm",
                   "--workflow-profile", str(profile), *args]
        t0 = time.monotonic()
        proc = subprocess.run(command, cwd=workdir, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return WorkflowRun(command, proc.returncode, proc.stdout, time.monotonic() - t0)

    def job_records(self, job_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """``{job id: {State, Partition, AllocTRES, ExitCode, JobName}}``, from ``sacct``,
        or from ``scontrol show job`` (State and Partition only) if accounting does not answer.
        """
        if not job_ids:
            return {}
        fields = ["JobID", "JobName", "State", "Partition", "AllocTRES", "ExitCode"]
        proc = subprocess.run(
            ["sacct", "-X", "-P", "-n", "-j", ",".join(job_ids), "-o", ",".join(fields)],
            env=self.env, capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            records = {}
            for line in proc.stdout.splitlines():
                values = line.split("|")
                if len(values) == len(fields):
                    records[values[0]] = dict(zip(fields, values, strict=True))
            return records
        records = {}
        for job_id in job_ids:
            show = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=self.env,
                                  capture_output=True, text=True, timeout=30)
            pairs = dict(tok.split("=", 1) for tok in show.stdout.split() if "=" in tok)
            if "JobState" in pairs:
                records[job_id] = {"JobID": job_id, "State": pairs["JobState"],
                                   "Partition": pairs.get("Partition", "")}
        return records


def _script(command: str, state_dir: str, env: dict[str, str],
            timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), command, state_dir], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A local single-node Slurm cluster (partitions ``cpu`` and ``gpu``, one fake GPU)."""
    reason = missing_requirements()
    if reason:
        pytest.skip(f"no local Slurm cluster: {reason}")
    state_dir = os.environ.get("INFERLAB_SLURM_DIR", DEFAULT_DIR)
    env = {**os.environ, "SLURM_CONF": f"{state_dir}/etc/slurm.conf",
           "LOCAL_SLURM_NO_INSTALL": "1"}
    # One session at a time on the cluster (its ports are fixed): a second test session on
    # this host (two clones' `make test` side by side) waits here, instead of finding the
    # cluster running and losing it when the first session stops it under its jobs.
    with _session_lock(f"{state_dir}.lock"):
        yield from _cluster(state_dir, env)


_HELD: dict[str, list] = {}  # lock path -> [open file, users]


@contextmanager
def _session_lock(path: str) -> Iterator[None]:
    """An exclusive lock on ``path`` for as long as any fixture of this process uses the
    cluster: each test module that imports ``slurm_cluster`` has a session fixture of its
    own, and a second flock of the same file in one process would wait for the first."""
    if path not in _HELD:
        held = open(path, "a")  # noqa: SIM115 - closed by the last user
        fcntl.flock(held, fcntl.LOCK_EX)
        _HELD[path] = [held, 0]
    _HELD[path][1] += 1
    try:
        yield
    finally:
        _HELD[path][1] -= 1
        if not _HELD[path][1]:
            _HELD.pop(path)[0].close()


def _cluster(state_dir: str, env: dict[str, str]) -> Iterator[SlurmCluster]:
    """The cluster at ``state_dir``: started (and stopped after) unless already running."""
    already_running = _script("status", state_dir, env, timeout=30).returncode == 0
    if not already_running:
        start = _script("start", state_dir, env)
        if start.returncode != 0:
            pytest.fail(f"tools/local-slurm.sh start {state_dir} failed "
                        f"(exit {start.returncode}):\n{start.stdout}")
    try:
        yield SlurmCluster(state_dir, env, started_here=not already_running)
    finally:
        if not already_running:
            stop = _script("stop", state_dir, env, timeout=120)
            if stop.returncode != 0:
                print(f"tools/local-slurm.sh stop {state_dir} failed:\n{stop.stdout}",
                      file=sys.stderr)
