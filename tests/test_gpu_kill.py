"""The GPU call's dry run stopped and killed at seeded moments: whatever stops it, what
comes back in $OUT holds every point that was finished, and its registers verify.

A call can end three ways before its plan is done: a step reaches its limit (the stage
stops timing at a point boundary and writes what it measured), the call is sent SIGTERM
(the step running stops the same way, then the script packs), or everything is killed at
once (what comes back is the last pack, made after every step). The moments are drawn
from a seeded generator and reached by waiting for a state (a count of progress lines in
the running step's log), never by sleeping a wall-clock time.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from inferlab.core.layout import REPO_ROOT
from inferlab.workflow import gpu_plan
from inferlab.workflow.config import load_config
from inferlab.workflow.gpu_dry_run import SIMULATED_MACHINE
from tests.pipeline_repo import copy_repo
from tests.test_gpu_check import script_env, wheels

KEY = SIMULATED_MACHINE
POLL_S, WAIT_S = 0.05, 240


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = copy_repo(tmp_path_factory.mktemp("kill") / "repo")
    wheels(repo)
    return repo


def _start(repo: Path, tmp: Path, **env: str) -> subprocess.Popen:
    (tmp / "tmp").mkdir()
    return subprocess.Popen(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo,
                            env=script_env(tmp / "out", tmp / "tmp", GPU_CHECK_KEEP="1",
                                           GPU_CHECK_PY312="python3.12-absent", **env),
                            stdout=subprocess.DEVNULL, stderr=(tmp / "stderr").open("w"),
                            start_new_session=True)


def _work(tmp: Path) -> Path:
    """The dry run's copy of the repository (kept: GPU_CHECK_KEEP)."""
    return next((tmp / "tmp").glob("inferlab-gpu-check.*")) / "repo"


def _wait_for_lines(run: subprocess.Popen, tmp: Path, step: str, lines: int) -> None:
    """Until ``step``'s log in the run's work copy has ``lines`` progress lines."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert run.poll() is None, (tmp / "stderr").read_text()[-2000:]
        try:
            log = (_work(tmp) / "logs" / "gpu-check" / f"{step}.log").read_text()
        except (StopIteration, FileNotFoundError):
            log = ""
        if sum(line.startswith("[") for line in log.splitlines()) >= lines:
            return
        time.sleep(POLL_S)
    pytest.fail(f"{step} never wrote {lines} progress lines")


def _kill_session(run: subprocess.Popen) -> None:
    """SIGKILL to every process of the run's session (the script, timeout, the stage, its
    worker): all at once, as when the machine is taken back."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == run.pid:  # the session id (stat's 6th field)
            try:
                os.kill(int(stat.parent.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    run.wait(timeout=60)


def _unpack(tmp: Path) -> Path:
    dest = tmp / "returned"
    with tarfile.open(tmp / "out" / "evidence.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return dest


def _verified(root: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "inferlab", "verify", "--root", str(root)],
                          capture_output=True, text=True, timeout=120, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0 and f"OK {KEY}" in done.stdout, done.stdout + done.stderr


def _rows(root: Path, stage: str) -> list[dict]:
    path = root / "results" / KEY / f"{stage}.csv"
    return list(csv.DictReader(io.StringIO(path.read_text()))) if path.exists() else []


def _entries(root: Path) -> list[str]:
    register = root / "evidence" / KEY / "register.jsonl"
    return register.read_text().splitlines() if register.exists() else []


def _stage(entry: str) -> str:
    """The stage of a register entry, from its artifact's path."""
    return Path(json.loads(entry)["path"]).name.split(".")[0]


@pytest.mark.slow
def test_steps_at_their_limits_write_partial_artifacts_and_the_next_run_on_them(tmp_path):
    # The cuda budgets of prefill and decode cut to 1 s: the plan gives them --limit-s 8
    # and 10, where prefill's first worker needs ~25 s of the simulated clock for its four
    # points; those it does not reach are rows "stopped", 8,192 tokens (the last) among
    # them. The series and traffic stages then run on what there is.
    repo = copy_repo(tmp_path / "repo")
    wheels(repo)
    config = repo / "config.yaml"
    text = config.read_text()
    for budget in ("    budget_s: 65\n", "budget_s: 35, min_run_ms: 2}"):
        assert budget in text
        text = text.replace(budget, budget.replace(budget.split()[1].rstrip(","), "1"), 1)
    config.write_text(text)
    raw = load_config([repo / "profiles" / "book.yaml"], base=config)
    limits = {s.stage: s.limit_s for s in gpu_plan.plan(raw).steps}
    assert limits["prefill"] <= 10 and limits["decode"] <= 12
    run = _start(repo, tmp_path, GPU_CHECK_STAGES="probe prefill decode series traffic")
    assert run.wait(timeout=WAIT_S) == 0, (tmp_path / "out" / "summary.log").read_text()
    returned = _unpack(tmp_path)
    _verified(returned)
    rows = _rows(returned, "prefill")
    assert {int(r["T"]) for r in rows} == {1024, 2048, 4096, 8192}  # every point, as rows
    stopped = [r for r in rows if r["status"] == "stopped"]
    assert stopped and {r["cause"] for r in stopped} == {"step_limit"}
    assert "8192" in {r["T"] for r in stopped}
    assert [_stage(e) for e in _entries(returned)] == \
        ["probe", "prefill", "decode", "series", "traffic"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1])
def test_a_call_stopped_by_sigterm_returns_every_finished_point(repo, tmp_path, seed):
    lines = random.Random(seed).randint(1, 80)  # within decode's first worker (~90 lines)
    run = _start(repo, tmp_path, GPU_CHECK_STAGES="probe decode")
    _wait_for_lines(run, tmp_path, "stage-decode", lines)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=WAIT_S) == 1
    summary = (tmp_path / "out" / "summary.log").read_text()
    assert "stopped by a signal" in summary, summary
    returned = _unpack(tmp_path)
    _verified(returned)
    rows = _rows(returned, "decode")
    assert rows, f"the stopped decode step wrote nothing: {summary}"
    assert {(r["cache_len"], r["batch"]) for r in rows} == \
        {(str(n), str(b)) for n in (4096, 16384, 65536) for b in (1, 8)}
    assert {r["status"] for r in rows} <= {"ok", "unavailable", "stopped"}
    assert {r["cause"] for r in rows if r["status"] == "stopped"} <= {"step_limit"}
    # what the work copy holds is what came back: nothing finished was lost
    assert _rows(_work(tmp_path), "decode") == rows
    assert _entries(_work(tmp_path)) == _entries(returned)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2])
def test_a_call_killed_at_once_returns_every_step_that_ended(repo, tmp_path, seed):
    lines = random.Random(seed).randint(1, 200)
    run = _start(repo, tmp_path, GPU_CHECK_STAGES="probe decode")
    _wait_for_lines(run, tmp_path, "stage-decode", lines)
    _kill_session(run)
    returned = _unpack(tmp_path)
    _verified(returned)
    ended = (returned / "logs" / "gpu-check" / "steps.txt").read_text()
    assert "stage-probe exit=0" in ended and "stage-decode" not in ended
    on_disk, back = _entries(_work(tmp_path)), _entries(returned)
    assert back and on_disk[:len(back)] == back  # the returned register: what was on disk
    assert {_stage(e) for e in on_disk[len(back):]} <= {"decode"}
    assert _stage(back[-1]) == "probe"
