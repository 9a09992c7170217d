"""The whole pipeline as its users run it: Snakemake over every stage, a fresh clone's
``make setup evidence``, another grid or machine beside the book evidence, runs stopped by
a kill or a Ctrl-C, a full disk, and another machine's evidence derived here.

Every test works on a clone or copy of the session's one pipeline run
(``pipeline_repo.built``: the smoke sizes as the book grid, machine ``test-box``,
committed), and all of them share one xdist group, so it is built once.
"""

from __future__ import annotations

import base64
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
import torch
import yaml

from inferlab.core import layout, pipeline
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register, load_evidence, write_artifact
from inferlab.evidence.verify import cli_verify
from inferlab.presentation import audit
from inferlab.workflow.cli import main as cli_main
from tests.pipeline_repo import KEY, MACHINE, built, copy_repo, env, git, jobs, run, small_tmpfs

VENV = Path(sys.prefix)
REPO = layout.REPO_ROOT


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The session's pipeline run itself: read, never changed."""
    return built(tmp_path_factory)


@pytest.fixture
def clone(repo, tmp_path) -> Path:
    """What ``git clone`` of the run gives: the committed tree, no .snakemake/."""
    git(tmp_path, "clone", "-q", str(repo), str(tmp_path / "clone"))
    return tmp_path / "clone"


@pytest.fixture
def copy(repo, tmp_path) -> Path:
    """The tree as the run left it, .snakemake/ metadata and mtimes included."""
    return Path(shutil.copytree(repo, tmp_path / "copy", symlinks=True))


def versions(repo: Path, key: str) -> dict[str, int]:
    """stage -> how many versions the register keeps (measured stages only)."""
    return {s: len(Register(repo, key).history(s)) for s in STAGES if STAGES[s].measured}


def tree_hashes(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- one run


def test_every_artifact_validates_and_records_what_made_it(repo):
    for stage in STAGES:
        path = layout.artifact_path(repo, KEY, stage)
        artifacts.validate(stage, path.read_bytes())
        prov = json.loads(layout.sidecar_path(path).read_text())["provenance"]
        assert (prov["machine"], prov["grid"], prov["stage"]) == (MACHINE, None, stage)
        assert prov["command"].startswith(f"snakemake {stage} --cores 1 --forcerun {stage}")
        assert set(prov["code_files"]) == set(pipeline.code_files(stage))
        assert set(prov["bookkeeping_files"]) == set(pipeline.bookkeeping_files(stage))
        assert prov["environment"]["host"]["torch_threads"] == 1  # --cores 1: one thread
    assert layout.report_path(repo).stat().st_size > 0


def test_the_register_keeps_each_measured_stage_once_and_verify_is_clean(repo, capsys):
    assert versions(repo, KEY) == {s: 1 for s in STAGES if STAGES[s].measured}
    assert cli_verify(repo) == 0, capsys.readouterr().out


def test_lint_is_clean(repo):
    result = run(repo, "--lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bad_config_fails_before_any_stage(copy, tmp_path):
    configfile = tmp_path / "bad.yaml"  # every bad value: tests/test_config.py
    configfile.write_text(yaml.safe_dump({"prefill": {"cpu": {"sizes": [
        {"dtype": "float32", "T": [512, -5]}]}}}))
    result = run(copy, "--cores", "1", "--configfile", str(configfile),
                 "--config", "machine=test-bad")
    assert result.returncode != 0 and "invalid config" in result.stderr
    assert "config key prefill.cpu.sizes[0].T[1]: -5" in result.stderr
    assert "Traceback" not in result.stderr and layout.keys(copy) == [KEY]


# --------------------------------------------------------------------------- a fresh clone


def _make(repo: Path, *targets: str) -> subprocess.CompletedProcess:
    """The Makefile's targets in ``repo``, with this venv and its setup stamp satisfied."""
    stamp = repo.parent / f"{repo.name}.stamp"
    stamp.touch()  # newer than the clone's pyproject.toml: setup has nothing to do
    return subprocess.run(["make", *targets, f"VENV={VENV}", f"STAMP={stamp}", "CORES=1"],
                          cwd=repo, env=env(repo), capture_output=True, text=True,
                          timeout=600)


def test_make_evidence_on_a_fresh_clone_adopts_the_committed_evidence_twice(clone):
    """The README's first command in a fresh clone, after a ``snakemake -n`` (which makes an
    empty .snakemake/metadata/: adopt must still adopt, since only a record of this key's
    artifacts means Snakemake tracks them), then again: every stage adopted, nothing rerun,
    the checkout as committed."""
    register = layout.register_path(clone, KEY).read_bytes()
    assert jobs(run(clone, "--dry-run")) >= {"probe", "prefill", "report"}
    first = _make(clone, "setup", "evidence")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    assert first.stdout.count("adopted (current)") == len(STAGES), first.stdout
    assert layout.register_path(clone, KEY).read_bytes() == register  # no stage reran
    second = _make(clone, "setup", "evidence")
    assert second.returncode == 0, second.stderr[-4000:]
    assert "Nothing to be done" in second.stdout + second.stderr
    assert git(clone, "status", "--porcelain", "--", "results", "evidence") == ""
    stamps = [p.stat().st_mtime for p in (clone / "results" / KEY).iterdir()]
    assert max(stamps) <= time.time()  # never in the future (Snakemake's clock-skew check)
    # What Snakemake compares by its records, not by mtimes, still reruns an adopted stage:
    # a moved bound of a claim (params.computed_from), a stage's config (params.config).
    claims = (clone / "claims.yaml").read_text()
    (clone / "claims.yaml").write_text(claims.replace("between: [13, 23]", "between: [12, 23]"))
    assert jobs(run(clone, "--dry-run")) == {"claims", "manuscript", "report"}
    (clone / "claims.yaml").write_text(claims)
    assert jobs(run(clone, "--dry-run", "--config", "seed=7")) >= {"probe", "prefill", "decode"}


def test_another_grid_and_machine_write_only_their_folders(clone):
    """The smoke profile (another grid) and another machine id beside the book evidence:
    each writes its own key's folders, the book evidence stays as committed."""
    before = {d: tree_hashes(clone / d / KEY) for d in ("results", "evidence")}
    smoke = run(clone, "--cores", "1", "probe", "--configfile", "profiles/smoke.yaml",
                "--config", "machine=test-other")
    assert smoke.returncode == 0, smoke.stderr[-4000:]
    assert {d: tree_hashes(clone / d / KEY) for d in before} == before
    assert layout.keys(clone) == [KEY, "test-other@smoke"]
    assert versions(clone, "test-other@smoke")["probe"] == 1
    assert git(clone, "status", "--porcelain", "--", "results", "evidence") == \
        "?? evidence/test-other@smoke/\n?? results/test-other@smoke/\n"


def test_another_key_missing_a_stage_still_gets_the_report(copy):
    """A key from an older checkout with fewer stages: the report still runs (a missing
    input would make Snakemake skip it silently while report/index.html exists)."""
    for folder in ("results", "evidence"):
        shutil.copytree(copy / folder / KEY, copy / folder / "test-old")
    for path in (copy / "results" / "test-old").glob("model.csv*"):
        path.unlink()
    assert "report" in jobs(run(copy, "--dry-run", "--forcerun", "report"))


def test_the_recorded_command_reruns_its_stage_alone(repo):
    sidecar = layout.sidecar_path(layout.artifact_path(repo, KEY, "prefill"))
    command = json.loads(sidecar.read_text())["provenance"]["command"].split()
    assert command[:2] == ["snakemake", "prefill"]
    assert jobs(run(repo, "--dry-run", *command[1:])) == {"prefill"}


def test_an_edited_claims_json_is_marked_by_verify_claims_and_audit(clone, capsys):
    path = layout.artifact_path(clone, KEY, "claims")
    data = json.loads(path.read_text())
    data["claims"][0].update(verdict="reproduced", value=1.24)
    path.write_text(json.dumps(data, indent=2))
    assert cli_verify(clone) == 1
    assert "claims.json is not the file its sidecar describes" in capsys.readouterr().out
    assert cli_main(["--root", str(clone), "claims"]) == 1
    out = capsys.readouterr().out
    assert f"{KEY} !" in out and "MISMATCH claims:" in out
    evidence = load_evidence(clone, KEY, "claims")
    assert audit.integrity(clone, KEY, evidence)["status"] == "MISMATCH"


# --------------------------------------------------------------------------- interrupted


def _held(proc: subprocess.Popen, marker: Path, timeout_s: float = 300) -> bool:
    """Wait until the stage is held before its write (``INFERLAB_HOLD``: the marker file
    exists), or the process ended; True when held. A state, not a line: nothing races."""
    deadline = time.monotonic() + timeout_s
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return marker.exists()


def test_a_killed_stage_leaves_nothing_and_the_rerun_completes(copy, tmp_path):
    """SIGKILL of a measured stage that has computed everything and not yet written: no
    version is registered, results/ is as it was, and a rerun completes. It is killed at
    a defined point (``INFERLAB_HOLD``), not when a progress line happens to be read."""
    marker, path = tmp_path / "held", layout.artifact_path(copy, KEY, "model")
    before, had = path.read_bytes(), versions(copy, KEY)
    proc = subprocess.Popen([sys.executable, "-m", "inferlab", "stage", "model"], cwd=copy,
                            env={**env(copy), "INFERLAB_HOLD": f"model:{marker}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert _held(proc, marker), proc.stderr.read()[-3000:] if proc.poll() is not None \
            else "not held in time"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == before and versions(copy, KEY) == had
    rerun = run(copy, "stage", "model", module="inferlab")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert versions(copy, KEY)["model"] == had["model"] + 1
    assert Register(copy, KEY).problems() == []


def _ctrl_c_as_a_terminal_has_it() -> None:
    """SIGINT back to its default in the child: a suite started in the background inherits
    it ignored, and the Ctrl-C of the test would then be lost (the run held for ever)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_ctrl_c_during_a_forced_rerun_is_made_good_by_the_next_run(copy, tmp_path,
                                                                    capsys):
    """Ctrl-C while a forced stage runs: Snakemake has already deleted its artifact. The
    next plain run must make it again, and verify must name the missing file meanwhile.
    The Ctrl-C lands where the stage holds after computing, before writing."""
    marker = tmp_path / "held"
    proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", "--forcerun",
                             "model"], cwd=copy,
                            env={**env(copy), "INFERLAB_HOLD": f"model:{marker}"},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_ctrl_c_as_a_terminal_has_it)
    artifact = layout.artifact_path(copy, KEY, "model")
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
    assert proc.returncode != 0 and not artifact.exists(), "".join(seen)[-4000:]
    assert "model" in jobs(run(copy, "--dry-run"))
    assert cli_verify(copy) == 1
    assert f"results/{KEY}/model.csv or its sidecar is missing" in capsys.readouterr().out
    lines = layout.register_path(copy, KEY).read_text().splitlines()
    again = run(copy, "--cores", "1", "model")  # the next run (of what reads it too: the
    assert again.returncode == 0, again.stderr[-3000:]  # rerun tests of test_triggers)
    assert versions(copy, KEY)["model"] == 2 and artifact.is_file()
    assert layout.register_path(copy, KEY).read_text().splitlines()[:len(lines)] == lines
    assert Register(copy, KEY).problems() == []


def test_after_a_kill_the_next_plain_run_reruns_the_incomplete_job(copy):
    """What a SIGKILL leaves (.snakemake/incomplete markers on a stage's outputs) must not
    stop the next plain run (``rerun-incomplete`` in profiles/default)."""
    marks = copy / ".snakemake" / "incomplete"
    marks.mkdir(parents=True, exist_ok=True)
    artifact = layout.artifact_path(copy, KEY, "correctness")
    for path in (artifact, layout.sidecar_path(artifact)):
        path.write_text("left by the killed run\n")
        rel = path.relative_to(copy).as_posix().encode()
        (marks / base64.b64encode(rel).decode()).write_text("")
    dry = run(copy, "correctness", "-n", "--cores", "1")
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-2000:]
    assert "IncompleteFilesException" not in dry.stdout + dry.stderr
    assert "rule correctness" in dry.stdout + dry.stderr


def test_a_non_finite_input_names_its_file_and_row(copy):
    """A registered prefill version with an infinite time: the series fails naming where,
    and claims refuse to judge a prefill version beside what was computed from another."""
    artifact = layout.artifact_path(copy, KEY, "prefill")
    lines = artifact.read_text().splitlines(keepends=True)
    header, cells = lines[0].rstrip("\n").split(","), lines[1].rstrip("\n").split(",")
    cells[header.index("median_ms")] = "inf"
    lines[1] = ",".join(cells) + "\n"
    prov = json.loads(layout.sidecar_path(artifact).read_text())["provenance"]
    write_artifact(copy, KEY, "prefill", "".join(lines).encode(), config=prov["config"],
                   code_files=[copy / f for f in prov["code_files"]],
                   inputs=[copy / f for f in prov["inputs"]], seed=prov["seed"],
                   command=prov["command"], environment=prov["environment"])
    series = run(copy, "stage", "series", module="inferlab")
    assert series.returncode == 2, series.stderr[-2000:]
    assert f"results/{KEY}/prefill.csv line 2 (impl=" in series.stderr
    assert "median_ms=inf" in series.stderr
    claims = run(copy, "stage", "claims", module="inferlab")
    assert claims.returncode == 2, claims.stderr[-2000:]
    assert f"computed from another version of results/{KEY}/prefill.csv" in claims.stderr


def test_a_full_disk_fails_the_stage_and_keeps_the_register(repo, tmp_path):
    """One free page left: the stage exits non-zero naming the full disk, and the register
    and results/ are exactly as before."""
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        copy = Path(shutil.copytree(repo, disk / "repo", symlinks=True, ignore=(
            shutil.ignore_patterns(".snakemake", ".git", "logs", "benchmarks", "report"))))
        before = {d: tree_hashes(copy / d / KEY) for d in ("results", "evidence")}
        free = os.statvfs(disk)
        (disk / "filler").write_bytes(b"\0" * (free.f_bavail * free.f_frsize - free.f_frsize))
        result = run(copy, "stage", "traffic", module="inferlab")
        assert result.returncode == 1, result.stderr[-2000:]
        assert "No space left on device" in result.stderr.splitlines()[-1]
        assert {d: tree_hashes(copy / d / KEY) for d in before} == before


# --------------------------------------------------------------------------- derived elsewhere

GPU_KEY = "cuda-nvidia-h200"


@pytest.fixture(scope="module")
def gpu_repo(tmp_path_factory) -> Path:
    """A copy of this project holding the committed H200 evidence."""
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: a device stage would run on it")
    repo = copy_repo(tmp_path_factory.mktemp("gpu") / "repo")
    for folder in ("results", "evidence"):
        shutil.copytree(REPO / folder / GPU_KEY, repo / folder / GPU_KEY)
    return repo


def _gpu_stage(repo: Path, name: str) -> int:
    """In process: the copy's config.yaml is this checkout's, so the key is the H200's."""
    return cli_main(["--root", str(repo), "stage", name, "--machine", GPU_KEY,
                     "--configfile", str(REPO / "profiles" / "book.yaml")])


def test_a_gpu_keys_derived_stages_run_here_and_judge_the_gpus_dtype(gpu_repo):
    """A stage that runs nothing on the device derives another machine's evidence on this
    host: pooled and judged for the GPU it was measured on, never for this CPU."""
    for name in ("series", "traffic", "claims"):
        assert _gpu_stage(gpu_repo, name) == 0
    path = layout.artifact_path(gpu_repo, GPU_KEY, "claims")
    prov = json.loads(layout.sidecar_path(path).read_text())["provenance"]
    assert prov["config"]["device"] == "cuda"      # what it is about
    assert prov["environment"]["device"] == "cpu"  # where it was derived
    by_id = {c["id"]: c for c in json.loads(path.read_text())["claims"]}
    assert by_id["C13-09"]["device"] == "cuda"  # the fp16 stand-in: float16 on the GPU
    assert by_id["C13-09"]["judged"][0]["dtype"] == "float16"


def test_a_device_stage_of_a_gpu_key_is_refused_here(gpu_repo, capsys):
    assert _gpu_stage(gpu_repo, "prefill") == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


def test_a_gpu_keys_stage_derived_with_this_cpus_config_is_refused(gpu_repo, capsys):
    """Without the GPU's config the series would pool the H200's runs under the CPU's
    blocks: refused, naming the device and the fix, and nothing is written."""
    before = tree_hashes(gpu_repo / "results" / GPU_KEY)
    assert cli_main(["--root", str(gpu_repo), "stage", "series", "--machine", GPU_KEY]) == 2
    err = capsys.readouterr().err
    assert "was computed for device 'cuda'; this run's config says 'cpu'" in err
    assert "--configfile profiles/book.yaml" in err
    assert tree_hashes(gpu_repo / "results" / GPU_KEY) == before
