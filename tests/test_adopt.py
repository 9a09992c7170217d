"""``inferlab adopt`` (``workflow.adopt``): a stage is adopted as current only when git
vouches for it and its code, config, hardware and inputs are today's; every other stage
and everything downstream of it reruns, with the reason said.

Each test builds, in process, a copy of the repository whose every stage is written with
today's code, effective config and this hardware (contents are stand-ins: adopt reads
records, not numbers), then makes one change an honest author could make.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.core.files import sha256_bytes
from inferlab.core.pipeline import STAGES, bookkeeping_files, code_files
from inferlab.evidence.loading import code_changed
from inferlab.evidence.register import Register, file_hashes, write_artifact
from inferlab.measurement.environment import fingerprint
from inferlab.workflow import adopt
from inferlab.workflow.adopt import cli_adopt
from inferlab.workflow.config import load_config, resolve
from tests.pipeline_repo import commit, copy_repo, git

MACHINE = "cpu-adopt-2t"
DERIVED = {name: f"{name}\n".encode() for name in STAGES["manuscript"].derived}


def _write(root: Path, key: str, name: str, config, environment: dict,
           content: bytes | None = None, effective: dict | None = None) -> dict:
    if content is None:
        content = (json.dumps({"files": {n: sha256_bytes(d) for n, d in DERIVED.items()}})
                   .encode() if STAGES[name].derived else f"made {name}\n".encode())
    entry = write_artifact(root, key, name, content,
                           config=effective or config.effective(name),
                           code_files=[root / f for f in code_files(name)],
                           inputs=[layout.artifact_path(root, key, up)
                                   for up in STAGES[name].reads],
                           seed=config.seed, command=f"inferlab stage {name}",
                           environment=environment)
    for file, data in DERIVED.items() if STAGES[name].derived else ():
        path = layout.derived_path(root, key, name, file)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return entry


def _made_with(root: Path) -> tuple[object, dict]:
    """The config and environment every stage is written with."""
    config = resolve(load_config(base=root / "config.yaml"), machine=MACHINE)
    environment = fingerprint(config.device, collect_env=False)
    environment["host"]["torch_threads"] = 1  # what `snakemake --cores 1` gives a stage
    return config, environment


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, str]:
    """A copy of the repository with every stage made for MACHINE, committed."""
    root = copy_repo(tmp_path_factory.mktemp("adopt") / "repo")
    config, environment = _made_with(root)
    for name in STAGES:
        _write(root, config.key, name, config, environment)
    commit(root)
    return root, config.key


@pytest.fixture
def repo(made, tmp_path) -> tuple[Path, str, object, dict]:
    """A clone of ``made`` (its own git), with the config and environment it was made with."""
    root = tmp_path / "clone"
    git(made[0], "clone", "-q", str(made[0]), str(root))
    return root, made[1], *_made_with(root)


@pytest.fixture(autouse=True)
def recorded(monkeypatch) -> list:
    """What adopt hands Snakemake to record (``adopt.record``, run for real by
    test_pipeline's fresh clone): here only noted, as the stages it names."""
    calls: list = []
    monkeypatch.setattr(adopt, "record", lambda root, paths, machine, configfiles:
                        calls.append(sorted(p.name.split(".")[0] for p in paths)))
    return calls


def _adopt(root: Path, capsys, **kwargs) -> dict[str, str]:
    assert cli_adopt(root, machine=MACHINE, **kwargs) == 0
    said = {}
    for line in capsys.readouterr().out.splitlines():
        _, _, stage, why = line.split(": ", 3)
        said[stage] = why
    return said


def test_committed_current_evidence_is_adopted_whole(repo, capsys, recorded):
    root, key, _, _ = repo
    assert set(_adopt(root, capsys).values()) == {"adopted (current)"}
    assert recorded == [sorted(STAGES)]  # Snakemake is told of every stage
    assert layout.artifact_path(root, key, "claims").stat().st_mtime > \
        layout.artifact_path(root, key, "probe").stat().st_mtime  # in DAG order


def test_a_run_made_here_since_the_last_commit_reruns(repo, capsys, recorded):
    root, key, config, env = repo
    _write(root, key, "prefill", config, env, content=b"made prefill again\n")
    said = _adopt(root, capsys)
    # Snakemake records the adopted stages only: the others it reruns by their old mtimes
    assert recorded == [sorted(s for s, why in said.items() if why == "adopted (current)")]
    assert "prefill" not in recorded[0] and "probe" in recorded[0]
    assert said["probe"] == "adopted (current)"
    assert said["prefill"].startswith(f"will rerun: evidence/{key}/prefill/v2.csv, results/"
                                      f"{key}/prefill.csv, results/{key}/prefill.csv.prov.json "
                                      "differ from the last commit")
    assert "commit evidence/ and results/ to adopt them" in said["prefill"]
    assert said["series"] == "will rerun: upstream prefill reruns"


def test_a_version_committed_without_rerunning_its_readers_reruns_them(repo, capsys):
    root, key, config, env = repo
    _write(root, key, "prefill", config, env, content=b"made prefill again\n")
    commit(root, "a new prefill version, series not rerun")
    said = _adopt(root, capsys)
    assert said["prefill"] == "adopted (current)"
    assert said["series"].startswith(f"will rerun: it was computed from another version of "
                                     f"results/{key}/prefill.csv than the one there now "
                                     "(from prefill version 1; there now: prefill version 2)")


def test_a_register_never_committed_is_not_vouched_for(made, tmp_path, capsys):
    root = tmp_path / "plain"
    git(made[0], "clone", "-q", str(made[0]), str(root))
    (root / ".git").rename(tmp_path / "moved-git")
    git(root, "init", "-q")  # a repository, nothing committed
    said = _adopt(root, capsys)
    assert "adopted (current)" not in said.values()
    assert "differ from the last commit" in said["probe"]


def test_without_git_everything_reruns_saying_why(repo, capsys, monkeypatch, recorded):
    root, _, _, _ = repo
    monkeypatch.setenv("PATH", "/nonexistent")
    said = _adopt(root, capsys)
    assert said["probe"] == "will rerun: git cannot vouch for it (git is not on the PATH)"
    assert "adopted (current)" not in said.values()
    assert recorded == []


@pytest.mark.parametrize("change", ["code", "config", "threads", "hardware"])
def test_what_changed_since_a_stage_was_made_reruns_it(repo, capsys, change):
    root, key, config, env = repo
    cores = 1
    if change == "code":
        (root / "inferlab/stages/model.py").write_text(
            (root / "inferlab/stages/model.py").read_text() + "\n# edited\n")
    elif change == "config":  # made with config.yaml as it was before an edit
        before = config.effective("model")
        before["model"]["launch_us"] += 1
        _write(root, key, "model", config, env, effective=before)
        commit(root)
    elif change == "threads":
        cores = 2  # `snakemake --cores 2` gives a stage two threads: not the version's one
        if env["host"].get("logical_cpus", 1) < 2:
            pytest.skip("one CPU: a stage gets one thread whatever --cores says")
    else:
        entry = Register(root, key).latest("model")
        prov = entry["provenance"]
        other = {**prov["environment"], "host": {**prov["environment"]["host"],
                                                  "cpu_model": "another CPU"}}
        _write(root, key, "model", config, other)
        commit(root)
    said = _adopt(root, capsys, cores=cores)
    why = said["probe" if change == "threads" else "model"]
    assert why == {"code": "will rerun: its code changed since it was made "
                           "(inferlab/stages/model.py)",
                   "config": "will rerun: its effective config changed since it was made"
                   }.get(change, why)
    if change in ("threads", "hardware"):
        assert why.startswith("will rerun: it was made on other hardware")
    assert said["claims"].startswith("will rerun: upstream")
    if change != "threads":
        assert said["probe"] == "adopted (current)"


def test_an_edited_derived_file_reruns_its_stage(repo, capsys):
    root, key, _, _ = repo
    layout.derived_path(root, key, "manuscript", "numbers.tex").write_text("\\newcommand{}\n")
    commit(root, "an edit of numbers.tex")
    said = _adopt(root, capsys)
    assert said["claims"] == "adopted (current)"
    assert said["manuscript"] == (
        f"will rerun: a file derived from it is not the one it recorded: results/{key}/"
        "manuscript/numbers.tex: changed since the stage wrote it; rerun the 'manuscript' "
        "stage (snakemake --forcerun manuscript)")


def test_adopt_compares_only_the_computing_code_of_a_version():
    """A version recorded before the split listed its bookkeeping as code: adopt ignores
    those entries, and flags exactly the computing files that differ today."""
    root = layout.REPO_ROOT
    code = file_hashes([root / f for f in code_files("prefill")], root)
    books = file_hashes([root / f for f in bookkeeping_files("prefill")], root)
    edited = dict.fromkeys(books, "0" * 64)  # every bookkeeping file changed since
    assert code_changed(root, "prefill", {**code, **edited}) == []
    assert code_changed(root, "prefill", {**code, "inferlab/algorithms/kernels.py": "0" * 64}) == \
        ["inferlab/algorithms/kernels.py"]
    missing = {f: sha for f, sha in code.items() if f != "inferlab/measurement/process.py"}
    assert code_changed(root, "prefill", missing) == ["inferlab/measurement/process.py"]
