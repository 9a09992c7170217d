"""The whole Snakemake pipeline on the smoke profile, in a temporary copy of the repository.

One module-scoped run (``smoke``) is shared; a test that changes the tree works on its own
copy of that run (``smoke_copy``), .snakemake/ metadata included.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from inferlab import artifacts, layout, pipeline
from inferlab.layout import REPO_ROOT
from inferlab.pipeline import STAGES
from inferlab.register import Register

pytestmark = pytest.mark.slow

MACHINE = "test-smoke"
KEY = f"{MACHINE}@smoke"  # the smoke profile is its own grid: never the book evidence
SMOKE = ["--configfile", "profiles/smoke.yaml", "--config", f"machine={MACHINE}"]
NOT_COPIED = {".git", ".venv", "results", "evidence", "report", "logs", ".snakemake"}
ALL_JOBS = {*STAGES, "report"}


def _copy_repo(dest: Path) -> Path:
    """The tracked and untracked-not-ignored files, without results of earlier runs."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    for rel in listed.stdout.splitlines():
        if rel.split("/")[0] in NOT_COPIED or not (REPO_ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, dest / rel)
    return dest


def _env(repo: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(repo), "PYTHONUNBUFFERED": "1"}


def _run(repo: Path, *args: str, module: str = "snakemake") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=repo, env=_env(repo),
                          capture_output=True, text=True, timeout=600)


def _jobs(dry_run: subprocess.CompletedProcess) -> set[str]:
    """Stage rules in a dry run's 'Job stats' table (not the 'all' target; empty when
    nothing is to be done)."""
    assert dry_run.returncode == 0, dry_run.stderr[-3000:]
    text = dry_run.stdout + dry_run.stderr
    table = text.split("Job stats:", 1)[1].split("total", 1)[0] if "Job stats:" in text else ""
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+\s*$", table, re.MULTILINE)} - {"all"}


def _versions(repo: Path, key: str = KEY) -> dict[str, int]:
    return {s: len(Register(repo, key).history(s)) for s in STAGES}


def _tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    repo = _copy_repo(tmp_path_factory.mktemp("smoke") / "repo")
    started = time.perf_counter()
    result = _run(repo, "--cores", "1", *SMOKE)
    assert result.returncode == 0, result.stderr[-5000:]
    print(f"smoke pipeline: {time.perf_counter() - started:.1f} s")
    return repo


@pytest.fixture
def smoke_copy(smoke, tmp_path) -> Path:
    return Path(shutil.copytree(smoke, tmp_path / "repo", symlinks=True))


# --------------------------------------------------------------------------- one run


@pytest.mark.parametrize("stage", STAGES)
def test_artifact_exists_and_validates(smoke, stage):
    path = layout.artifact_path(smoke, KEY, stage)
    content = path.read_bytes()
    artifacts.validate(stage, content)
    sidecar = json.loads(layout.sidecar_path(path).read_text())
    assert sidecar["sha256"] == hashlib.sha256(content).hexdigest()
    assert sidecar["provenance"]["machine"] == MACHINE
    assert sidecar["provenance"]["grid"] == "smoke"
    assert f"machine={MACHINE}" in sidecar["provenance"]["command"]
    assert set(sidecar["provenance"]["code_files"]) == set(pipeline.code_files(stage))
    # the threads of the run follow --cores: one here
    assert sidecar["provenance"]["environment"]["host"]["torch_threads"] == 1


def test_report_is_written(smoke):
    assert (smoke / "report" / "index.html").stat().st_size > 0


def test_register_matches_retained_copies(smoke):
    register = Register(smoke, KEY)
    assert register.verify() == []
    for entry in register.entries():
        copy = register.copy_path(entry["sha256"])
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == entry["sha256"]
    assert _run(smoke, "verify", module="inferlab").returncode == 0


def test_every_stage_has_one_version(smoke):
    assert _versions(smoke) == dict.fromkeys(STAGES, 1)


def test_lint_is_clean(smoke):
    result = _run(smoke, "--lint", *SMOKE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_noop_rerun_does_nothing(smoke):
    before = layout.register_path(smoke, KEY).read_bytes()
    result = _run(smoke, "--cores", "1", *SMOKE)
    assert result.returncode == 0 and "Nothing to be done" in result.stdout + result.stderr
    assert layout.register_path(smoke, KEY).read_bytes() == before


# --------------------------------------------------------------------------- bad config

BAD_CONFIGS = [
    ({"bogus": 1}, "bogus"),
    ({"seed": "many"}, "seed"),
    ({"prefill": {"cpu": {"sizes": [{"dtype": "float32", "T": [512, -5]}]}}}, "sizes"),
    ({"correctness": {"cpu": {"dtypes": ["float8"]}}}, "float8"),
    ({"decode": {"backends": ["triton"]}}, "triton"),
]


@pytest.mark.parametrize(("bad", "named"), BAD_CONFIGS, ids=lambda x: str(x)[:30])
def test_bad_config_fails_before_any_stage(smoke, tmp_path, bad, named):
    configfile = tmp_path / "bad.yaml"
    configfile.write_text(yaml.safe_dump(bad))
    result = _run(smoke, "--cores", "1", "--configfile", str(configfile),
                  "--config", "machine=test-bad")
    assert result.returncode != 0
    assert named in result.stdout + result.stderr
    assert "Error validating config file" in result.stdout + result.stderr
    assert not any(p.name.startswith("test-bad") for p in (smoke / "results").iterdir())


# --------------------------------------------------------------------------- reruns


def test_forcerun_prefill_adds_one_version_downstream(smoke_copy):
    register = layout.register_path(smoke_copy, KEY)
    before = register.read_text().splitlines()
    result = _run(smoke_copy, "--cores", "1", "--forcerun", "prefill", *SMOKE)
    assert result.returncode == 0, result.stderr[-3000:]
    # prefill reruns; traffic and claims read it, so they rerun; the rest do not
    assert _versions(smoke_copy) == {"probe": 1, "correctness": 1, "prefill": 2,
                                     "decode": 1, "traffic": 2, "model": 1, "claims": 2}
    assert register.read_text().splitlines()[:len(before)] == before
    assert Register(smoke_copy, KEY).verify() == []


@pytest.mark.parametrize(("code_file", "reruns"), [
    ("inferlab/attention.py", ALL_JOBS - {"probe"}),
    ("inferlab/measure.py", ALL_JOBS - {"correctness"}),
    ("inferlab/traffic.py", ALL_JOBS - {"probe", "prefill"}),
    ("inferlab/report.py", {"report"}),
])
def test_code_change_reruns_exactly_its_stages(smoke_copy, code_file, reruns):
    with open(smoke_copy / code_file, "a") as f:
        f.write("\n# a change\n")
    assert _jobs(_run(smoke_copy, "--dry-run", *SMOKE)) == reruns


def test_second_machine_writes_only_its_folders(smoke_copy):
    before = {d: _tree_hashes(smoke_copy / d / KEY) for d in ("results", "evidence")}
    result = _run(smoke_copy, "--cores", "1", "probe", "--configfile", "profiles/smoke.yaml",
                  "--config", "machine=test-other")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {d: _tree_hashes(smoke_copy / d / KEY) for d in before} == before
    assert layout.artifact_path(smoke_copy, "test-other@smoke", "probe").is_file()
    assert layout.keys(smoke_copy) == ["test-other@smoke", KEY]
    assert _versions(smoke_copy, "test-other@smoke")["probe"] == 1


def test_interrupted_stage_leaves_nothing_and_rerun_completes(smoke_copy):
    slow = ["--set", "prefill.cpu.sizes=[{dtype: float32, T: [512, 1024, 2048]}]",
            "--set", "timing.min_rounds=20", "--set", "timing.max_rounds=40"]
    key = f"{MACHINE}@slow"  # a grid of its own, seeded with a copy of the smoke evidence
    shutil.copytree(smoke_copy / "results" / KEY, smoke_copy / "results" / key)
    shutil.copytree(smoke_copy / "evidence" / KEY, smoke_copy / "evidence" / key)
    path = layout.artifact_path(smoke_copy, key, "prefill")
    before, versions = path.read_bytes(), _versions(smoke_copy, key)
    command = [sys.executable, "-m", "inferlab", "stage", "prefill", "--machine", MACHINE,
               "--configfile", "profiles/smoke.yaml", "--set", "grid=slow", *slow]
    proc = subprocess.Popen(command, cwd=smoke_copy, env=_env(smoke_copy), text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for line in proc.stderr:  # kill it once it is measuring
            if line.startswith("[prefill] 1/"):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == before and _versions(smoke_copy, key) == versions
    assert not list(path.parent.glob(".*.tmp"))
    rerun = _run(smoke_copy, "stage", "prefill", "--machine", MACHINE, "--configfile",
                 "profiles/smoke.yaml", "--set", "grid=slow", "--set",
                 "prefill.cpu.sizes=[{dtype: float32, T: [64]}]", module="inferlab")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _versions(smoke_copy, key)["prefill"] == versions["prefill"] + 1
    assert Register(smoke_copy, key).verify() == []


# --------------------------------------------------------------------------- adopt


def _fresh_clone(smoke_copy: Path) -> Path:
    """No .snakemake/, benchmarks/out/ or logs/ (all git-ignored), and checkout mtimes
    in no useful order: results look older than the code."""
    for ignored in (".snakemake", "benchmarks/out", "logs"):
        shutil.rmtree(smoke_copy / ignored)
    for p in (smoke_copy / "results").rglob("*"):
        os.utime(p, (1, 1))
    return smoke_copy


ADOPT = ["adopt", "--machine", MACHINE, "--configfile", "profiles/smoke.yaml"]


def test_adopt_marks_current_results_up_to_date(smoke_copy):
    repo = _fresh_clone(smoke_copy)
    adopt = _run(repo, *ADOPT, module="inferlab")
    assert adopt.returncode == 0 and adopt.stdout.count("adopted (current)") == len(STAGES)
    assert _jobs(_run(repo, "--dry-run", *SMOKE)) <= {"report"}
    stamps = [p.stat().st_mtime for p in (repo / "results" / KEY).iterdir()]
    assert max(stamps) <= time.time()  # never in the future (Snakemake's clock-skew check)


def test_adopt_reruns_an_edited_artifact_and_downstream(smoke_copy):
    repo = _fresh_clone(smoke_copy)
    with open(layout.artifact_path(repo, KEY, "prefill"), "a") as f:
        f.write("edited\n")
    adopt = _run(repo, *ADOPT, module="inferlab")
    assert "prefill: will rerun" in adopt.stdout and "traffic: will rerun" in adopt.stdout
    jobs = _jobs(_run(repo, "--dry-run", *SMOKE))
    assert jobs == {"prefill", "traffic", "claims", "report"}
