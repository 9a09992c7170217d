"""The whole Snakemake pipeline on the smoke profile, in a temporary copy of the repository.

The module works on its own copy (``smoke``) of the session's one smoke run
(``pipeline_repo.smoke_repo``, which tests/test_browser.py copies too); a test that changes
the tree works on its own copy of that (``smoke_copy``), .snakemake/ metadata included.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from inferlab.core import layout, pipeline
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register
from tests.pipeline_repo import (
    SMOKE,
    SMOKE_MACHINE,
    env,
    git,
    jobs,
    run,
    small_tmpfs,
    smoke_repo,
    tree_hashes,
    versions,
)

pytestmark = pytest.mark.slow

MACHINE = SMOKE_MACHINE
KEY = f"{MACHINE}@smoke"  # the smoke profile is its own grid: never the book evidence
ALL_JOBS = {*STAGES, "report"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    return smoke_repo(tmp_path_factory, tmp_path_factory.mktemp("smoke") / "repo")


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
    assert set(sidecar["provenance"]["bookkeeping_files"]) == \
        set(pipeline.bookkeeping_files(stage))
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
    assert run(smoke, "verify", module="inferlab").returncode == 0


def test_every_stage_has_one_version(smoke):
    assert versions(smoke, KEY) == dict.fromkeys(STAGES, 1)


def test_lint_is_clean(smoke):
    result = run(smoke, "--lint", *SMOKE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_noop_rerun_does_nothing(smoke):
    before = layout.register_path(smoke, KEY).read_bytes()
    result = run(smoke, "--cores", "1", *SMOKE)
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
    result = run(smoke, "--cores", "1", "--configfile", str(configfile),
                  "--config", "machine=test-bad")
    assert result.returncode != 0
    assert named in result.stdout + result.stderr
    assert "Error validating config file" in result.stdout + result.stderr
    assert not any(p.name.startswith("test-bad") for p in (smoke / "results").iterdir())


# --------------------------------------------------------------------------- reruns


def test_forcerun_prefill_reruns_it_and_what_reads_it(smoke):
    """Only the plan: test_interrupted_forced_rerun_is_rerun_next_time runs it (its rerun
    adds one version to exactly these stages and keeps the register's history)."""
    assert jobs(run(smoke, "--dry-run", "--forcerun", "prefill", *SMOKE)) == {
        "prefill", "series", "traffic", "claims", "manuscript", "report"}


@pytest.mark.parametrize(("code_file", "reruns"), [
    ("inferlab/algorithms/attention.py", ALL_JOBS - {"probe"}),
    ("inferlab/measurement/measure.py", ALL_JOBS - {"correctness"}),
    ("inferlab/algorithms/traffic.py", ALL_JOBS - {"probe", "prefill"}),
    ("inferlab/presentation/report.py", {"report"}),
])
def test_code_change_reruns_exactly_its_stages(smoke_copy, code_file, reruns):
    with open(smoke_copy / code_file, "a") as f:
        f.write("\n# a change\n")
    assert jobs(run(smoke_copy, "--dry-run", *SMOKE)) == reruns


def test_an_edited_check_reruns_the_claims_and_an_edited_note_does_not(smoke_copy):
    """claims.yaml reruns claims and manuscript by the content they compute from (a
    param), not by its time: the last run's params are in .snakemake/, as here."""
    path = smoke_copy / "claims.yaml"
    text = path.read_text(encoding="utf-8")
    note = "    note: >-\n      "
    path.write_text(text.replace(note, note + "Reworded. ", 1), encoding="utf-8")
    assert jobs(run(smoke_copy, "--dry-run", *SMOKE)) == {"report"}
    assert "expect: {max: 2}" in text
    path.write_text(text.replace("expect: {max: 2}", "expect: {max: 3}", 1), encoding="utf-8")
    assert jobs(run(smoke_copy, "--dry-run", *SMOKE)) == {"claims", "manuscript", "report"}


def test_second_machine_writes_only_its_folders(smoke_copy):
    before = {d: tree_hashes(smoke_copy / d / KEY) for d in ("results", "evidence")}
    result = run(smoke_copy, "--cores", "1", "probe", "--configfile", "profiles/smoke.yaml",
                  "--config", "machine=test-other")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {d: tree_hashes(smoke_copy / d / KEY) for d in before} == before
    assert layout.artifact_path(smoke_copy, "test-other@smoke", "probe").is_file()
    assert layout.keys(smoke_copy) == ["test-other@smoke", KEY]
    assert versions(smoke_copy, "test-other@smoke")["probe"] == 1


def test_another_key_missing_a_stage_still_gets_the_report(smoke_copy):
    """A key from an older checkout with fewer stages: the report still runs (a missing
    input would make Snakemake skip it silently while report/index.html exists)."""
    for folder in ("results", "evidence"):
        shutil.copytree(smoke_copy / folder / KEY, smoke_copy / folder / "test-old@smoke")
    for path in (smoke_copy / "results" / "test-old@smoke").glob("model.csv*"):
        path.unlink()
    assert "report" in jobs(run(smoke_copy, "--dry-run", "--forcerun", "report", *SMOKE))


def test_interrupted_stage_leaves_nothing_and_rerun_completes(smoke_copy, tmp_path):
    """SIGKILL of a stage that has measured everything and not yet written: nothing is
    registered or left in results/, and a rerun completes. It is killed at a defined
    point (``INFERLAB_HOLD``), not when a progress line happens to be read."""
    key, marker = KEY, tmp_path / "held"
    path = layout.artifact_path(smoke_copy, key, "prefill")
    before, had = path.read_bytes(), versions(smoke_copy, key)
    command = [sys.executable, "-m", "inferlab", "stage", "prefill", "--machine", MACHINE,
               "--configfile", "profiles/smoke.yaml"]
    proc = subprocess.Popen(command, cwd=smoke_copy, text=True,
                            env={**env(smoke_copy), "INFERLAB_HOLD": f"prefill:{marker}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert _held(proc, marker), proc.stderr.read()[-3000:] if proc.poll() is not None \
            else "not held in time"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == before and versions(smoke_copy, key) == had
    assert not list(path.parent.glob(".*.tmp"))
    rerun = run(smoke_copy, "stage", "prefill", "--machine", MACHINE, "--configfile",
                 "profiles/smoke.yaml", module="inferlab")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert versions(smoke_copy, key)["prefill"] == had["prefill"] + 1
    assert Register(smoke_copy, key).verify() == []


# --------------------------------------------------------------------------- adopt


def _fresh_clone(smoke_copy: Path) -> Path:
    """No .snakemake/, benchmarks/out/ or logs/ (all git-ignored), checkout mtimes in no
    useful order (results look older than the code), and the evidence committed: adopt
    trusts only a register that git vouches for (issue 23)."""
    for ignored in (".snakemake", "benchmarks/out", "logs"):
        shutil.rmtree(smoke_copy / ignored)
    for p in (smoke_copy / "results").rglob("*"):
        os.utime(p, (1, 1))
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "evidence"]):
        git(smoke_copy, *args)
    return smoke_copy


ADOPT = ["adopt", "--machine", MACHINE, "--configfile", "profiles/smoke.yaml"]


def test_adopt_marks_current_results_up_to_date(smoke_copy):
    repo = _fresh_clone(smoke_copy)
    adopt = run(repo, *ADOPT, module="inferlab")
    assert adopt.returncode == 0 and adopt.stdout.count("adopted (current)") == len(STAGES)
    assert jobs(run(repo, "--dry-run", *SMOKE)) <= {"report"}
    stamps = [p.stat().st_mtime for p in (repo / "results" / KEY).iterdir()]
    assert max(stamps) <= time.time()  # never in the future (Snakemake's clock-skew check)


def test_a_dry_run_before_adopt_does_not_make_every_stage_rerun(smoke, smoke_copy):
    """R8-13: ``snakemake -n`` in a fresh clone makes an empty .snakemake/metadata/; adopt
    then said "Snakemake already tracks these results", adopted nothing, and the next run
    redid every stage (5 minutes, new register versions). Only a record of this key's
    artifacts means Snakemake tracks them."""
    repo = _fresh_clone(smoke_copy)
    assert jobs(run(repo, "--dry-run", *SMOKE)) >= {"probe", "prefill", "report"}
    assert (repo / ".snakemake" / "metadata").is_dir()
    adopt = run(repo, *ADOPT, module="inferlab")
    assert adopt.returncode == 0 and adopt.stdout.count("adopted (current)") == len(STAGES), \
        adopt.stdout
    assert jobs(run(repo, "--dry-run", *SMOKE)) <= {"report"}
    again = run(smoke, *ADOPT, module="inferlab")  # the run that made them: tracked (and
    # adopt changes nothing there)
    assert again.returncode == 0 and "Snakemake already tracks" in again.stdout, again.stdout


def test_adopt_reruns_an_edited_artifact_and_downstream(smoke_copy):
    repo = _fresh_clone(smoke_copy)
    with open(layout.artifact_path(repo, KEY, "prefill"), "a") as f:
        f.write("edited\n")
    adopt = run(repo, *ADOPT, module="inferlab")
    assert "prefill: will rerun" in adopt.stdout and "series: will rerun" in adopt.stdout
    assert jobs(run(repo, "--dry-run", *SMOKE)) == {"prefill", "series", "traffic", "claims",
                                                    "manuscript", "report"}


# --------------------------------------------------------------------------- faults


def _held(proc: subprocess.Popen, marker: Path, timeout_s: float = 300) -> bool:
    """Wait until the stage is held before its write (``INFERLAB_HOLD``: the marker file
    exists), or the process ended; True when held. A state, not a line: nothing races."""
    deadline = time.monotonic() + timeout_s
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return marker.exists()


def _ctrl_c_as_a_terminal_has_it() -> None:
    """SIGINT back to its default in the child: a suite started in the background (``cmd
    &`` in a script, as CI and the stress benchmark may) inherits it ignored, and the
    Ctrl-C of the test would then be lost (the run held for ever)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_interrupted_forced_rerun_is_rerun_next_time(smoke_copy, tmp_path):
    """Ctrl-C while a forced prefill runs: Snakemake has already deleted prefill.csv. The
    next run must make it again (it once said "Nothing to be done"), and verify must say
    that a registered artifact is missing. The Ctrl-C lands at a defined point: the
    stage holds after computing, before writing (``INFERLAB_HOLD``), until the signal."""
    marker = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", "--forcerun",
                             "prefill", *SMOKE], cwd=smoke_copy,
                            env={**env(smoke_copy), "INFERLAB_HOLD": f"prefill:{marker}"},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_ctrl_c_as_a_terminal_has_it)
    artifact = layout.artifact_path(smoke_copy, KEY, "prefill")
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        assert _held(proc, marker), "".join(seen)[-4000:]
        os.killpg(proc.pid, signal.SIGINT)  # the terminal sends it to the whole group
        proc.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, "".join(seen)[-4000:]
    assert not artifact.exists(), "".join(seen)[-4000:]  # the state the issue found
    assert "prefill" in jobs(run(smoke_copy, "--dry-run", *SMOKE))
    check = run(smoke_copy, "verify", module="inferlab")
    assert check.returncode == 1
    assert f"results/{KEY}/prefill.csv: missing, but the register has version 1" in check.stdout
    register = layout.register_path(smoke_copy, KEY)
    before = register.read_text().splitlines()
    again = run(smoke_copy, "--cores", "1", *SMOKE)
    assert again.returncode == 0, again.stderr[-3000:]
    # prefill reruns; the stages downstream of it (traffic, claims, manuscript ...) rerun;
    # the rest do not
    assert versions(smoke_copy, KEY) == {
        s: 2 if s == "prefill" or "prefill" in pipeline.upstream(s) else 1 for s in STAGES}
    assert artifact.is_file() and register.read_text().splitlines()[:len(before)] == before
    assert Register(smoke_copy, KEY).verify() == []
    assert run(smoke_copy, "verify", module="inferlab").returncode == 0


def test_recorded_command_reruns_its_stage_alone(smoke):
    """The reproduce command in a sidecar targets its stage (not `all`) and forces it."""
    sidecar = layout.sidecar_path(layout.artifact_path(smoke, KEY, "prefill"))
    command = json.loads(sidecar.read_text())["provenance"]["command"].split()
    assert command[:2] == ["snakemake", "prefill"]
    assert jobs(run(smoke, "--dry-run", *command[1:])) == {"prefill"}


def test_tampered_input_stops_the_stages_that_read_it(smoke_copy):
    """With .snakemake/ present an edited prefill.csv looks newer than traffic.csv, so
    Snakemake reruns traffic and claims; they must refuse to compute from it."""
    before = versions(smoke_copy, KEY)
    artifact = layout.artifact_path(smoke_copy, KEY, "prefill")
    artifact.write_text(artifact.read_text().replace(",ok,", ",ok ,", 1))
    result = run(smoke_copy, "--cores", "1", *SMOKE)
    assert result.returncode != 0
    assert f"stage input results/{KEY}/prefill.csv cannot be trusted" in result.stderr
    assert "matches no registered version of prefill" in result.stderr
    assert versions(smoke_copy, KEY) == before  # nothing computed from it was registered


def test_nonfinite_input_names_its_file_and_row(smoke_copy):
    """A registered prefill version with an infinite time: the series fails naming where."""
    from inferlab.evidence.provenance import write_artifact

    artifact = layout.artifact_path(smoke_copy, KEY, "prefill")
    lines = artifact.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[1].rstrip("\n").split(",")
    cells[header.index("median_ms")] = "inf"
    lines[1] = ",".join(cells) + "\n"
    prov = json.loads(layout.sidecar_path(artifact).read_text())["provenance"]
    write_artifact(smoke_copy, KEY, "prefill", "".join(lines).encode(),
                   config=prov["config"], code_files=[smoke_copy / f for f in prov["code_files"]],
                   inputs=[smoke_copy / f for f in prov["inputs"]], seed=prov["seed"],
                   command=prov["command"], environment=prov["environment"])
    stage = ["--machine", MACHINE, "--configfile", "profiles/smoke.yaml"]
    result = run(smoke_copy, "stage", "series", *stage, module="inferlab")
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"results/{KEY}/prefill.csv line 2 (impl=" in result.stderr
    assert "median_ms=inf" in result.stderr
    # claims would now judge prefill version 2 beside what was computed from version 1:
    # refused, naming the stale input (issue 35, item 7)
    claims = run(smoke_copy, "stage", "claims", *stage, module="inferlab")
    assert claims.returncode == 2, claims.stderr[-2000:]
    assert f"computed from another version of results/{KEY}/prefill.csv" in claims.stderr


@pytest.fixture
def full_disk(tmp_path):
    """An 8 MiB tmpfs at tmp_path/disk (root only)."""
    with small_tmpfs(tmp_path / "disk", "8m") as mount:
        yield mount


def test_full_disk_fails_the_stage_and_keeps_the_register(smoke, full_disk):
    """One free page left: the stage exits non-zero naming the full disk, and the
    register and results/ are exactly as before (the issue: exit 0, a torn line)."""
    repo = Path(shutil.copytree(smoke, full_disk / "repo", symlinks=True, ignore=(
        shutil.ignore_patterns(".snakemake", "logs", "benchmarks"))))
    register = layout.register_path(repo, KEY)
    results = tree_hashes(repo / "results" / KEY)
    before = register.read_bytes()
    free = os.statvfs(full_disk)
    filler = full_disk / "filler"
    filler.write_bytes(b"\0" * (free.f_bavail * free.f_frsize - free.f_frsize))
    assert os.statvfs(full_disk).f_bavail == 1
    result = run(repo, "stage", "traffic", "--machine", MACHINE, "--configfile",
                 "profiles/smoke.yaml", module="inferlab")
    assert result.returncode == 1, result.stderr[-2000:]
    assert "No space left on device" in result.stderr.splitlines()[-1]
    assert "wrote" not in result.stderr
    assert register.read_bytes() == before
    assert tree_hashes(repo / "results" / KEY) == results  # no temp file, no backup left
    check = run(repo, "verify", module="inferlab")
    assert check.returncode == 0, check.stdout


def test_after_a_kill_the_next_plain_run_reruns_the_incomplete_job(tmp_path):
    """What a Ctrl-C or SIGKILL leaves (.snakemake/incomplete markers on a stage's outputs,
    as a killed run of the smoke grid left them) must not stop the next plain run."""
    import base64

    from tests.pipeline_repo import copy_repo, run

    repo = copy_repo(tmp_path / "repo")
    artifact = repo / "results" / f"{MACHINE}@smoke" / "correctness.csv"
    marks = repo / ".snakemake" / "incomplete"
    marks.mkdir(parents=True)
    artifact.parent.mkdir(parents=True)
    for path in (artifact, layout.sidecar_path(artifact)):
        path.write_text("left by the killed run\n")
        rel = path.relative_to(repo).as_posix().encode()
        (marks / base64.b64encode(rel).decode()).write_text("")
    dry = run(repo, "correctness", "-n", "--cores", "1", "--configfile", "profiles/smoke.yaml",
              "--config", f"machine={MACHINE}")
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-2000:]
    assert "IncompleteFilesException" not in dry.stdout + dry.stderr
    assert "rule correctness" in dry.stdout + dry.stderr

