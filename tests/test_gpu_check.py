"""The prepared GPU call (scripts/gpu-check.sh, docs/gpu-run.md) rehearsed on this CPU.

The dry run replays the GPU call's plan (inferlab.workflow.gpu_plan) in a temporary copy
of the repository: the stages of the declaration with the cuda blocks' points, workers,
rounds, budgets and step limits, timed by the simulated GPU clock (the chapter's times on
a virtual clock), with the carried wheels installed with pip --no-index and used by the
stages. Here it runs in a copy without .git (as the working tree travels). The $OUT checks
(issue 35 item 18), the $OUT checker and the lazy jsonschema import are tested alone.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from inferlab.core.layout import REPO_ROOT
from inferlab.core.pipeline import STAGES
from inferlab.workflow import gpu_plan
from inferlab.workflow.gpu_dry_run import SIMULATED_MACHINE
from tests.pipeline_repo import copy_repo

CHECK_OUT = REPO_ROOT / "scripts" / "check-out.py"


def _check_out(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK_OUT), str(out)], capture_output=True,
                          text=True, timeout=60)


def python312() -> str | None:
    """A CPython 3.12 that runs here, to import the device's cp312 wheels; else None."""
    for candidate in [shutil.which("python3.12"),
                      *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]:
        if candidate and subprocess.run([candidate, "-c", "pass"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def wheels(repo: Path) -> None:
    """gpu-wheels/ in the copy: this checkout's, else downloaded (skipped without PyPI)."""
    have = REPO_ROOT / "gpu-wheels"
    if list(have.glob("*.whl")) and list(have.glob("host/*.whl")):
        shutil.copytree(have, repo / "gpu-wheels")
        return
    made = subprocess.run(["bash", "scripts/gpu-wheels.sh"], cwd=repo, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable})
    if made.returncode == 3:
        pytest.skip(f"the registry cannot be reached to make gpu-wheels/: {made.stderr[-300:]}")
    assert made.returncode == 0, made.stderr


def script_env(out: Path, tmp: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    env.update(OUT=str(out), PYTHON=sys.executable, TMPDIR=str(tmp),
               GPU_CHECK_PY312=python312() or "python3.12-absent")
    return {**env, **extra}


def files_of(repo: Path) -> set[str]:
    return {str(p.relative_to(repo)) for p in repo.rglob("*")}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """One whole dry run in a copy of the repository: (repo, out, what ran, files before)."""
    base = tmp_path_factory.mktemp("dry-run")
    repo = copy_repo(base / "repo")
    wheels(repo)
    before = files_of(repo)
    (base / "tmp").mkdir()
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo,
                          env=script_env(base / "out", base / "tmp"), capture_output=True,
                          text=True, timeout=280)
    return repo, base / "out", done, before, base / "tmp"


def _member(out: Path, name: str) -> str:
    with tarfile.open(out / "evidence.tar.gz") as tar:
        return tar.extractfile(name).read().decode()


@pytest.mark.slow
def test_dry_run_replays_the_plan_and_returns_what_fits(dry_run):
    repo, out, done, _, _ = dry_run
    summary = (out / "summary.log").read_text()
    assert done.returncode == 0, summary + done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["evidence.tar.gz", "summary.log"]
    assert "OUT check: ok" in summary and "(no index)" in summary
    steps = [line.split() for line in _member(out, "logs/gpu-check/steps.txt").splitlines()]
    plan = gpu_plan.load_plan([repo / "profiles" / "book.yaml"])
    # every planned step in the plan's order (the tests are not run on a CPU), each checked
    # against its own clock. The backstop (`timeout`) counts real seconds: exit 0 says it
    # never fired. A stage's limit counts the script's clock (real + simulated GPU
    # seconds); the simulated GPU's share of a step never runs past it. Their sum is not
    # checked against the backstop: its real part is this CPU's input building and start-up
    # (on a GPU machine's 16 cores a fraction of it), which a busy neighbour doubles
    # (docs/attacks.md R7-2: 98 s against 95 beside a spin loop, 69 of them real)
    assert [s[0] for s in steps] == ["exactness"] + [s.name for s in plan.steps][:-2]
    for step, ran in zip(plan.steps, steps[1:], strict=False):
        fields = dict(f.split("=") for f in ran[1:])
        assert fields["timeout"] == str(step.timeout_s)
        assert fields["limit"] == str(step.limit_s or "-")
        assert fields["exit"] == "0", ran
        assert int(fields["real_seconds"]) <= step.timeout_s, ran
        if step.limit_s:
            assert int(fields["seconds"]) - int(fields["real_seconds"]) <= step.limit_s, ran


@pytest.mark.slow
def test_dry_run_artifacts_say_the_clock_was_simulated_and_hold_the_plans_points(dry_run):
    _, out, _, _, _ = dry_run
    key = SIMULATED_MACHINE
    with tarfile.open(out / "evidence.tar.gz") as tar:
        names = set(tar.getnames())
    for name in STAGES:
        assert f"results/{key}/{STAGES[name].artifact}" in names, name
    assert f"evidence/{key}/register.jsonl" in names
    prefill = list(csv.DictReader(io.StringIO(_member(out, f"results/{key}/prefill.csv"))))
    assert {int(r["T"]) for r in prefill} == {1024, 2048, 4096, 8192}
    timed = [r for r in prefill if r["status"] == "ok"]
    assert timed and all(r["timing_method"].startswith("SIMULATED") for r in timed)
    decode = list(csv.DictReader(io.StringIO(_member(out, f"results/{key}/decode.csv"))))
    assert {(int(r["cache_len"]), int(r["batch"])) for r in decode} == \
        {(n, b) for n in (4096, 16384, 65536) for b in (1, 8)}
    assert "NOT A MEASUREMENT" in _member(out, f"results/{key}/probe.json")
    sidecar = json.loads(_member(out, f"results/{key}/prefill.csv.prov.json"))
    assert '"simulated_gpu_clock": true' in json.dumps(sidecar)


@pytest.mark.slow
def test_dry_run_uses_the_carried_wheels_checks_exactness_and_leaves_nothing(dry_run):
    repo, out, _, before, tmp = dry_run
    preflight = _member(out, "logs/gpu-check/preflight.txt")
    carried = next(line for line in preflight.splitlines() if line.startswith("jsonschema from"))
    assert "/site-host/jsonschema/" in carried  # the stages' jsonschema: the carried wheel's
    rows = list(csv.DictReader(io.StringIO(_member(out, "logs/gpu-check/exactness.csv"))))
    assert any(r["status"] == "ok" for r in rows)
    assert not [r for r in rows if r["status"].startswith("error")]
    assert files_of(repo) == before, "the dry run left files in the checkout"
    assert list(tmp.iterdir()) == [] or all(p.name.startswith("torchinductor") for p in
                                            tmp.iterdir()), "its temporary folders stay"


def _short_dry_run(tmp_path: Path, **env: str) -> tuple[int, str, Path]:
    """The dry run in a fresh copy with ``env`` over the script's (no CPython 3.12):
    (exit status, summary.log, $OUT). For the runs that end early, by budget or refusal."""
    repo = copy_repo(tmp_path / "repo")
    wheels(repo)
    out = tmp_path / "out"
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo,
                          env=script_env(out, tmp_path, GPU_CHECK_PY312="python3.12-absent",
                                         **env),
                          capture_output=True, text=True, timeout=120)
    return done.returncode, (out / "summary.log").read_text(), out


def test_a_spent_budget_skips_steps_and_still_packs_and_fits(tmp_path):
    rc, summary, out = _short_dry_run(tmp_path, GPU_CHECK_BUDGET_S="5")
    assert rc == 1, summary
    assert "SKIP stage-probe" in summary and "SKIP ncu" in summary
    assert "import not checked" in summary  # no CPython 3.12: said, not hidden
    assert "OUT check: ok" in summary
    with tarfile.open(out / "evidence.tar.gz") as tar:
        names = tar.getnames()
    assert "logs/gpu-check/preflight.txt" in names and "logs/gpu-check/plan.txt" in names


def test_a_step_name_the_plan_does_not_have_is_refused_before_any_step(tmp_path):
    """Round five: GPU_CHECK_STAGES="probe prefil" (a typo) ran probe alone and ended
    "done, exit 0", the device call spent without prefill and without a word."""
    rc, summary, _ = _short_dry_run(tmp_path, GPU_CHECK_STAGES="probe prefil")
    assert rc == 2, summary
    assert "GPU_CHECK_STAGES names 'prefil', which is no step of the plan" in summary
    assert "stage-probe: exit" not in summary  # nothing ran


@pytest.mark.parametrize("budget", ["5000", "abc", "-3"])
def test_a_budget_above_the_plans_or_no_number_is_refused_before_any_step(tmp_path, budget):
    """Round five: GPU_CHECK_BUDGET_S=5000 was taken (the plan fits 435 s, the command's
    limit is 600 s); "abc" ended the script with no word after its preflight."""
    rc, summary, _ = _short_dry_run(tmp_path, GPU_CHECK_BUDGET_S=budget,
                                    GPU_CHECK_STAGES="probe")
    assert rc == 2, summary
    assert f"GPU_CHECK_BUDGET_S={budget}: it must be whole seconds, at most the plan's " \
        f"budget of {gpu_plan.SCRIPT_BUDGET_S}s" in summary
    assert "stage-probe: exit" not in summary


def test_dry_run_refuses_without_carried_wheels(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    out = tmp_path / "out"
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo,
                          env=script_env(out, tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "scripts/gpu-wheels.sh" in (out / "summary.log").read_text()


# --------------------------------------------------------------- $OUT (issue 35 item 18)


def _refused(tmp_path, out: str) -> subprocess.CompletedProcess:
    repo = copy_repo(tmp_path / "repo")
    done = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo,
                          env=script_env(Path(out), tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "nothing was run" in done.stderr
    assert not list(tmp_path.glob("inferlab-gpu-check.*")), "it went on before $OUT was checked"
    return done


def test_a_non_empty_out_is_refused_and_left_as_it_was(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "evidence.tar.gz").write_text("from an earlier call")
    done = _refused(tmp_path, str(out))
    assert "is not empty" in done.stderr and "evidence.tar.gz" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["evidence.tar.gz"]
    assert (out / "evidence.tar.gz").read_text() == "from an earlier call"


def _unwritable_empty_folder(tmp_path) -> Path:
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    for candidate in sorted(glob.glob("/sys/kernel/*/")):  # root writes anywhere but sysfs
        path = Path(candidate)
        try:
            if not any(path.iterdir()) and not os.access(path / "x", os.F_OK):
                probe = subprocess.run(["touch", str(path / "probe")], capture_output=True)
                if probe.returncode != 0:
                    return path
        except OSError:
            continue
    pytest.skip("running as root with no empty read-only folder to use as $OUT")


def test_a_read_only_out_fails_before_any_step(tmp_path):
    done = _refused(tmp_path, str(_unwritable_empty_folder(tmp_path)))
    assert "is not writable" in done.stderr


def test_a_relative_out_is_refused(tmp_path):
    done = _refused(tmp_path, "out")
    assert "is relative" in done.stderr and "absolute" in done.stderr


def test_two_runs_at_once_install_into_folders_of_their_own(tmp_path):
    # The wheels' default folder was /tmp/inferlab-site for every run, removed at each start.
    repo = copy_repo(tmp_path / "repo")
    wheels(repo)
    runs, results = [], {}
    for i in range(2):
        env = script_env(tmp_path / f"out{i}", tmp_path, GPU_CHECK_STAGES="none",
                         GPU_CHECK_PY312="python3.12-absent")
        runs.append(threading.Thread(target=lambda i=i, env=env: results.__setitem__(
            i, subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=120))))
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    sites = []
    for i in range(2):
        summary = (tmp_path / f"out{i}" / "summary.log").read_text()
        assert results[i].returncode == 0, summary + results[i].stderr[-1500:]
        sites.append(re.search(r"wheels into (\S+/site)\b", summary).group(1))
    assert sites[0] != sites[1]
    assert not any(Path(s).exists() for s in sites), "a run's folder outlived it"


# --------------------------------------------------------------- the $OUT checker


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
