"""Issue 35: the attacks of round four that got through, one test each (items 4, 6-13, 19,
20 and the two left open from round three: an amended rollback, a deleted lock file).

Each test does what the attacker or the unlucky user did, in a temporary folder, and
checks what the code does now; each failed on the code before the fix (docs/attacks.md).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.core.files import sha256_bytes
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts, compare
from inferlab.evidence.inputs import read_input
from inferlab.evidence.provenance import sidecar_bytes, write_artifact
from inferlab.evidence.register import Register
from inferlab.evidence.verify import cli_verify
from inferlab.measurement.environment import hardware
from inferlab.workflow.adopt import cli_adopt
from inferlab.workflow.config import load_config, resolve_grid
from tests.pipeline_repo import copy_repo, git
from tests.tampering import delete_tail, rollback_results
from tests.test_attacks import _adoptable, _commit
from tests.test_compare import ENV, _rows
from tests.test_register import MACHINE, _write, full_provenance, three_versions

REPO = Path(__file__).resolve().parents[1]


def _timing(root: Path, key: str, rows: list[dict], threads: int = 1) -> dict:
    """A prefill version of ``rows``, made with ``threads`` torch threads."""
    env = {**ENV, "host": {**ENV["host"], "torch_threads": threads}}
    code = root / "code.py"
    code.write_text("a")
    return write_artifact(root, key, "prefill", artifacts.encode("prefill", rows),
                          config={"seed": 0}, code_files=[code], inputs=[], seed=0,
                          command="x", environment=env)


# ------------------------------------------------------------------ item 4: threads


def test_r4_04_made_alike_includes_threads(tmp_path):
    one, two = ({"host": {"cpu_model": "x", "torch_threads": n}} for n in (1, 2))
    assert hardware(one) != hardware(two)
    rng = random.Random(4)
    _timing(tmp_path, MACHINE, _rows(rng, 1.0), threads=1)
    _timing(tmp_path, MACHINE, _rows(rng, 1.0), threads=2)  # `--set threads=2`
    assert compare.comparable(Register(tmp_path, MACHINE), "prefill") is None
    with pytest.raises(ValueError, match="no earlier version made with the same"):
        compare.compare_latest(tmp_path, MACHINE, "prefill")


def test_r4_04_adopt_refuses_a_prefill_made_with_other_threads(tmp_path, capsys):
    root, key = _adoptable(tmp_path)
    entry = Register(root, key).latest("prefill")
    prov = entry["provenance"]
    env = {**prov["environment"], "host": {**prov["environment"]["host"], "torch_threads": 2}}
    write_artifact(root, key, "prefill", b"made prefill with 2 threads\n", config=prov["config"],
                   code_files=[root / f for f in prov["code_files"]], inputs=[],
                   seed=prov["seed"], command=prov["command"], environment=env)
    _commit(root)
    assert cli_adopt(root, machine=MACHINE) == 0
    out = capsys.readouterr().out
    assert f"adopt: {key}: prefill: will rerun: it was made on other hardware" in out
    assert "'threads': 2" in out and "'threads': 1" in out


# ------------------------------------------------------------------ item 6: one grid, one key


def test_r4_06_a_named_grid_never_hides_another_config():
    base = load_config(base=REPO / "config.yaml")
    smoke = REPO / "profiles" / "smoke.yaml"
    same = load_config([smoke], base=REPO / "config.yaml")
    assert resolve_grid(same, "cpu", default=base) == "smoke"  # the profile itself
    others = [load_config([smoke], [override], base=REPO / "config.yaml")
              for override in ("prefill.cpu.heads=3", "prefill.cpu.heads=4", "seed=5")]
    grids = [resolve_grid(raw, "cpu", default=base) for raw in others]
    assert len(set(grids)) == 3 and all(g.startswith("smoke-") for g in grids), grids
    assert all(layout.check_grid(g) == g for g in grids)
    mine = load_config(overrides=["grid=mine", "prefill.cpu.heads=3"], base=REPO / "config.yaml")
    assert resolve_grid(mine, "cpu", default=base).startswith("mine-")  # no profile names it
    # the book grid stays the book grid, whatever name a config gives it
    assert resolve_grid(load_config(overrides=["grid=smoke"], base=REPO / "config.yaml"),
                        "cpu", default=base) is None


# ------------------------------------------------------------------ item 7: versions mixed


def test_r4_07_a_stage_refuses_inputs_computed_from_another_version(tmp_path):
    reader = next(s for s in STAGES if "prefill" in STAGES[s].reads and STAGES[s].table)
    prefill = layout.artifact_path(tmp_path, MACHINE, "prefill")
    for stage, rows in (("prefill", _rows(random.Random(1), 1.0)), (reader, [])):
        write_artifact(tmp_path, MACHINE, stage, artifacts.encode(stage, rows), config={},
                       code_files=[], inputs=[prefill] if stage == reader else [], seed=0,
                       command="x", environment={})
    path = layout.artifact_path(tmp_path, MACHINE, reader)
    assert read_input(tmp_path, MACHINE, reader, path).entry["version"] == 1  # consistent
    write_artifact(tmp_path, MACHINE, "prefill", artifacts.encode(
        "prefill", _rows(random.Random(2), 1.0)), config={}, code_files=[], inputs=[], seed=0,
        command="x", environment={})  # prefill version 2, the reader not rerun
    with pytest.raises(ValueError) as exc:
        read_input(tmp_path, MACHINE, reader, path)
    message = str(exc.value)
    assert f"stage input results/{MACHINE}/{reader}.csv (register version 1)" in message
    assert (f"computed from another version of results/{MACHINE}/prefill.csv than the one "
            "there now (from prefill version 1; there now: prefill version 2)") in message
    assert f"rerun the {reader!r} stage first" in message


# ------------------------------------------------------------------ item 8: corrupt copies


def _two_alike(root: Path) -> tuple[dict, dict]:
    rng = random.Random(8)
    return _timing(root, MACHINE, _rows(rng, 1.0)), _timing(root, MACHINE, _rows(rng, 1.0))


@pytest.mark.parametrize("corruption", [b"impl,T\n1,2,3,4\n", b"\xff\xfe\x00garbage"])
def test_r4_08_a_corrupt_retained_copy_is_named_by_compare_and_record(tmp_path, corruption):
    first, _ = _two_alike(tmp_path)
    copy = Register(tmp_path, MACHINE).copy_path(first["sha256"])
    copy.write_bytes(corruption)
    rel = copy.relative_to(tmp_path).as_posix()
    with pytest.raises(ValueError, match=(rf"the retained copy of prefill version 1 \({rel}\) "
                                          r"is corrupt: its content's sha256 is ")):
        compare.compare_latest(tmp_path, MACHINE, "prefill")
    (line,) = compare.left_out(tmp_path, MACHINE, "prefill")
    assert line.startswith(f"prefill 1 → 2: the retained copy of prefill version 1 ({rel}) "
                           "is corrupt")


def test_r4_08_history_record_says_which_pairs_it_left_out(tmp_path, capsys):
    from inferlab.workflow.cli import main

    first, _ = _two_alike(tmp_path)
    Register(tmp_path, MACHINE).copy_path(first["sha256"]).write_bytes(b"x")
    (tmp_path / "config.yaml").write_bytes((REPO / "config.yaml").read_bytes())
    main(["--root", str(tmp_path), "history", "prefill", "--record", "--machine", MACHINE])
    out = capsys.readouterr().out
    assert "left out: prefill 1 → 2: the retained copy of prefill version 1" in out


# ------------------------------------------------------------------ items 9, 10: derived files


def _manuscript(root: Path, key: str, numbers: str) -> dict:
    """A manuscript version recording its derived files, and those files written."""
    files = {name: f"{name}: {numbers}\n".encode() for name in STAGES["manuscript"].derived}
    content = json.dumps({"files": {n: sha256_bytes(d) for n, d in files.items()}}).encode()
    entry = _write_stage(root, key, "manuscript", content)
    for name, data in files.items():
        path = layout.derived_path(root, key, "manuscript", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return entry


def _write_stage(root: Path, key: str, stage: str, content: bytes) -> dict:
    return write_artifact(root, key, stage, content, config={}, code_files=[], inputs=[],
                          seed=0, command="x", environment={})


def test_r4_09_a_hand_edited_numbers_tex_fails_verify(tmp_path, capsys):
    _manuscript(tmp_path, MACHINE, "9.4 ms")
    assert cli_verify(tmp_path) == 0, capsys.readouterr().out
    numbers = layout.derived_path(tmp_path, MACHINE, "manuscript", "numbers.tex")
    numbers.write_text("\\newcommand{\\ILfast}{1.0 ms}\n")  # a number never measured
    assert cli_verify(tmp_path) == 1
    out = capsys.readouterr().out
    assert (f"FAIL {MACHINE}: results/{MACHINE}/manuscript/numbers.tex: matches no version of "
            "manuscript: edited after version 1 wrote it; rerun the 'manuscript' stage") in out


def test_r4_10_derived_files_left_from_the_previous_version_fail_verify(tmp_path, capsys):
    _manuscript(tmp_path, MACHINE, "9.4 ms")
    old = {n: layout.derived_path(tmp_path, MACHINE, "manuscript", n).read_bytes()
           for n in STAGES["manuscript"].derived}
    _manuscript(tmp_path, MACHINE, "9.5 ms")  # version 2 and its files, then the files of
    for name, data in old.items():          # version 1 back: a SIGTERM between the
        layout.derived_path(tmp_path, MACHINE, "manuscript", name).write_bytes(data)  # append
    assert cli_verify(tmp_path) == 1       # and the derived files leaves just this
    out = capsys.readouterr().out
    assert (f"results/{MACHINE}/manuscript/numbers.json: is the file of version 1 of "
            "manuscript, not of the latest (2): left by a run interrupted after it registered"
            ) in out


def test_r4_09_adopt_does_not_call_an_edited_numbers_tex_current(tmp_path, capsys):
    root, key = _adoptable(tmp_path)
    entry = Register(root, key).latest("manuscript")
    files = {name: f"{name}\n".encode() for name in STAGES["manuscript"].derived}
    prov = entry["provenance"]
    write_artifact(root, key, "manuscript", json.dumps(
        {"files": {n: sha256_bytes(d) for n, d in files.items()}}).encode(),
        config=prov["config"], code_files=[root / f for f in prov["code_files"]],
        inputs=[root / p for p in prov["inputs"]], seed=prov["seed"],
        command=prov["command"], environment=prov["environment"])
    for name, data in files.items():
        path = layout.derived_path(root, key, "manuscript", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    layout.derived_path(root, key, "manuscript", "numbers.tex").write_text("edited\n")
    _commit(root)
    assert cli_adopt(root, machine=MACHINE) == 0
    out = capsys.readouterr().out
    assert f"adopt: {key}: manuscript: adopted (current)" not in out
    assert (f"adopt: {key}: manuscript: will rerun: a file derived from it is not the one it "
            f"recorded: results/{key}/manuscript/numbers.tex: matches no version") in out


# ------------------------------------------------------------------ item 11: schemas on reading


def _entries_without_code_sha256(root: Path, key: str, n: int = 2) -> None:
    """``n`` consistent prefill versions whose provenance lacks code_sha256 (and whose
    sidecars agree), as a key from a tool that skipped the schema would be."""
    register = Register(root, key)
    rng = random.Random(11)
    for _ in range(n):
        content = artifacts.encode("prefill", _rows(rng, 1.0))
        prov = full_provenance("prefill", machine=layout.split_key(key)[0],
                               environment=ENV)
        del prov["code_sha256"]
        sidecar = sidecar_bytes("prefill", "prefill.csv", content, prov)
        artifact = layout.artifact_path(root, key, "prefill")
        artifact.parent.mkdir(parents=True, exist_ok=True)
        artifact.write_bytes(content)
        layout.sidecar_path(artifact).write_bytes(sidecar)
        register.append("prefill", artifact.relative_to(root).as_posix(),
                        register.retain(content), register.retain(sidecar), prov)


def test_r4_11_entries_lacking_provenance_fields_fail_verify_and_crash_nothing(tmp_path, capsys):
    from inferlab.presentation.report_tables import previous_verdicts, track_record

    _entries_without_code_sha256(tmp_path, MACHINE)
    assert cli_verify(tmp_path) == 1
    out = capsys.readouterr().out
    assert (f"FAIL {MACHINE}: register.jsonl line 1: not a register entry as its schema "
            "describes it: provenance: 'code_sha256' is a required property "
            "(schemas/register_entry.schema.json)") in out
    assert track_record(tmp_path, MACHINE, "prefill") == []  # no KeyError
    assert previous_verdicts(tmp_path, MACHINE) == (None, {})
    with pytest.raises(ValueError, match=r"prefill version 2 \(register line 2\): not a "
                                         "register entry"):
        compare.compare_latest(tmp_path, MACHINE, "prefill")
    left = compare.left_out(tmp_path, MACHINE, "prefill")
    assert left[0].startswith("prefill version 1 (register line 1): not a register entry")
    from inferlab.presentation.report import render_report

    page = render_report(tmp_path, tmp_path / "report" / "index.html", [MACHINE])
    assert page.is_file()  # the whole report, once `KeyError: 'code_sha256'`


# ------------------------------------------------------------------ item 12: outside the folder


def test_r4_12_a_manuscript_naming_files_outside_its_folder_is_never_hashed(tmp_path):
    from types import SimpleNamespace

    from inferlab.presentation.manuscript import report_view

    outside = tmp_path / "secret.txt"
    outside.write_text("not the report's\n")
    name = "../../../secret.txt"
    data = {"files": {name: sha256_bytes(outside.read_bytes())}, "tables": [], "numbers": [],
            "dtype": "float32"}
    view = report_view(tmp_path, MACHINE, SimpleNamespace(data=data, error=None))
    assert name not in [f["name"] for f in view["files"]]
    assert all("secret" not in f["href"] for f in view["files"])
    with pytest.raises(ValueError, match="is not a file stage 'manuscript' derives"):
        layout.derived_path(tmp_path, MACHINE, "manuscript", name)


def test_r4_12_verify_names_a_recorded_file_the_stage_does_not_derive(tmp_path, capsys):
    _write_stage(tmp_path, MACHINE, "manuscript",
                 json.dumps({"files": {"../../../etc/hostname": "a" * 64}}).encode())
    assert cli_verify(tmp_path) == 1
    assert ("version 1 of manuscript records a file '../../../etc/hostname' that the stage "
            "does not derive") in capsys.readouterr().out


# ------------------------------------------------------------------ item 13: two hosts, one key


def _host(root: Path, seeds: tuple[int, ...]) -> Path:
    root.mkdir(parents=True)
    for stage, seed in zip(("prefill", "decode", "prefill"), seeds, strict=True):
        _write(root, stage, seed)
    return root


def test_r4_13_another_hosts_folders_merged_over_these_are_a_fork(tmp_path, capsys):
    a = _host(tmp_path / "a", (11, 12, 13))
    _commit(a)
    b = _host(tmp_path / "b", (21, 22, 23))  # the same machine id, another host
    for folder in ("results", "evidence"):  # as `tar -C b -c results evidence | tar -x`
        shutil.copytree(b / folder, a / folder, dirs_exist_ok=True)
    assert cli_verify(a) == 1
    out = capsys.readouterr().out
    assert "line 1 differs from the committed register: a fork" in out
    assert f"--config machine={MACHINE}-<host>" in out
    with pytest.raises(ValueError, match="refusing to append .* a fork"):
        _write(a, "prefill", 99)
    _commit(a, "merged the other host's evidence")  # and then committed
    assert cli_verify(a) == 1
    out = capsys.readouterr().out
    assert "that commit removed or changed 3 committed line(s) of the register" in out
    # host a's 3 versions (6 copies), and the 2 the refused write retained before its append
    assert f"WARN {MACHINE}: objects/: 8 retained copies are named by no entry" in out


# ------------------------------------------------------------------ round three: --amend


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _amended_rollback(root: Path) -> None:
    delete_tail(root, MACHINE, 1)
    rollback_results(root, MACHINE, "prefill", 1)
    git(root, "add", "-A")
    git(root, "commit", "-q", "--amend", "-m", "evidence")


@pytest.mark.parametrize("witness", ["annotated tag", "remote-tracking branch"])
def test_r4_amend_a_rollback_committed_with_amend_is_found(tmp_path, capsys, witness):
    root = three_versions(_folder(tmp_path / "repo"))
    _commit(root)
    if witness == "annotated tag":
        git(root, "tag", "-a", "evidence-3", "-m", "three versions")
        name = "evidence-3"
    else:
        git(tmp_path, "init", "-q", "--bare", "origin.git")
        git(root, "remote", "add", "origin", str(tmp_path / "origin.git"))
        git(root, "push", "-q", "-u", "origin", "HEAD:main")
        name = "origin/main"
    _amended_rollback(root)
    assert cli_verify(root) == 1
    out = capsys.readouterr().out
    assert f"FAIL {MACHINE}: register.jsonl (at {name}: 3 entries): entries 3-3 are missing " \
           f"from the register at {name}, and HEAD does not contain {name}" in out
    assert "`git commit --amend`" in out


def test_r4_amend_without_a_witness_is_what_git_cannot_show(tmp_path, capsys):
    """docs/attacks.md: a local-only repository has no record HEAD cannot rewrite."""
    root = three_versions(_folder(tmp_path / "repo"))
    _commit(root)
    _amended_rollback(root)
    assert cli_verify(root) == 0, capsys.readouterr().out


def test_r4_a_clone_behind_its_upstream_is_not_a_rollback(tmp_path, capsys):
    root = three_versions(_folder(tmp_path / "repo"))
    _commit(root)
    git(tmp_path, "clone", "-q", str(root), "clone")
    _write(root, "prefill", 14)
    _commit(root, "one more")
    git(tmp_path / "clone", "fetch", "-q")  # origin/main has 4 entries, HEAD 3
    assert cli_verify(tmp_path / "clone") == 0, capsys.readouterr().out


# ------------------------------------------------------------------ round three: the lock file


def test_r4_lock_writers_are_serialised_when_a_lock_file_is_deleted(tmp_path):
    three_versions(tmp_path)
    register = Register(tmp_path, MACHINE)
    holding, release, done = threading.Event(), threading.Event(), []

    def first() -> None:
        with register.locked():
            holding.set()
            release.wait(timeout=60)

    def second() -> None:
        done.append(_write(tmp_path, "decode", 99))

    one = threading.Thread(target=first)
    one.start()
    assert holding.wait(timeout=30)
    for lock in layout.evidence_dir(tmp_path, MACHINE).glob(".lock"):
        lock.unlink()  # `git clean -x`, or a hand, while the write holds it
    two = threading.Thread(target=second)
    two.start()
    two.join(timeout=2)  # it must be waiting: the lock is still held
    try:
        assert two.is_alive() and not done
    finally:
        release.set()
        one.join(timeout=30)
        two.join(timeout=30)
    assert done and done[0]["version"] == 2


# ------------------------------------------------------------------ the race: a defined point


def test_r4_race_the_hold_point_holds_only_the_stage_it_names(tmp_path):
    """tests/test_pipeline.py interrupts a stage held here (workflow.hold); unset, or
    naming another stage, it returns at once."""
    from inferlab.workflow.hold import hold_before_write

    hold_before_write("prefill", {})
    hold_before_write("prefill", {"INFERLAB_HOLD": f"decode:{tmp_path / 'held'}"})
    assert not (tmp_path / "held").exists()
    with pytest.raises(ValueError, match=r"INFERLAB_HOLD='prefill:': give <stage>:<file>"):
        hold_before_write("prefill", {"INFERLAB_HOLD": "prefill:"})


# ------------------------------------------------------------------ item 19: calibration.py


def _calibration(monkeypatch):
    path = REPO / "benchmarks" / "calibration.py"
    spec = importlib.util.spec_from_file_location("calibration_r4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def measured(args):
        raise AssertionError(f"measured with {args}: the arguments should have been refused")

    monkeypatch.setattr(module, "_measure", measured)
    return module


@pytest.mark.parametrize(("argv", "message"), [
    (["--heads", "0"], "--heads 0: must be at least 1"),
    (["--threads", "0"], "--threads 0: must be at least 1"),
    (["--threads", "-1"], "--threads -1: must be at least 1"),
    (["--min-run-ms", "nan"], "--min-run-ms nan: must be a number of milliseconds > 0"),
    (["--min-run-ms", "-5"], "--min-run-ms -5.0: must be a number of milliseconds > 0")])
def test_r4_19_calibration_refuses_bad_arguments_by_name(monkeypatch, capsys, argv, message):
    module = _calibration(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["calibration.py", *argv])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


GROUPS = [[1.0, 1.02, 0.98], [1.1, 1.12, 1.3]]


@pytest.mark.parametrize(("saved", "message"), [
    ({"runs": [{"p|c": GROUPS}, {"p|c": GROUPS}]}, "no 'args'"),
    ({"args": {}, "runs": [{"p|c": [[1.0, "a"]]}, {"p|c": GROUPS}]},
     "run 1, 'p|c', process 1: 'a' is not a ratio"),
    ({"args": {}, "runs": [{"p|c": [[-1.0, 2.0]]}, {"p|c": GROUPS}]},
     "run 1, 'p|c', process 1: -1.0 is not a ratio"),
    ({"args": {}, "runs": [{"p|c": 5}, {"p|c": GROUPS}]},
     "run 1, 'p|c': 5 is not a list of processes"),
    ({"args": {}, "runs": [{"p|c": [[math.inf]]}, {"p|c": GROUPS}]},
     "run 1, 'p|c', process 1: inf is not a ratio"),
    ([1, 2], "not a file --save wrote")])
def test_r4_19_calibration_load_of_a_malformed_file_is_named(monkeypatch, capsys, tmp_path,
                                                             saved, message):
    module = _calibration(monkeypatch)
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(saved))
    monkeypatch.setattr(sys, "argv", ["calibration.py", "--load", str(path)])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--load {path}: " in err and message in err, err


# ------------------------------------------------------------------ item 20: a space in the path


@pytest.mark.slow
def test_r4_20_a_clone_in_a_path_with_a_space_is_refused_up_front(tmp_path):
    from tests.pipeline_repo import run

    repo = copy_repo(tmp_path / "with space" / "repo")
    dry = run(repo, "-n", "--cores", "1")
    assert dry.returncode != 0
    text = dry.stdout + dry.stderr
    assert "holds a space" in text and "exit status 127" in text, text[-3000:]
    make = subprocess.run(["make", "-n", "setup"], cwd=repo, capture_output=True, text=True,
                          timeout=60)
    assert make.returncode != 0
    assert "holds a space" in make.stdout + make.stderr
