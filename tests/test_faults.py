"""Faults and attacks on the evidence (issue 11), each reproduced, then handled:

* a full disk at every point of a write (a real tmpfs, and a short write by injection):
  the register and results/ stay as they were, and the error says so;
* a torn final register line: ``verify`` says so, ``verify --repair`` removes only it;
* tampering that a hash chain alone cannot see: a sidecar swapped for an older one, an
  entry forged consistently, a committed tail deleted with a matching rollback, a
  committed line rewritten (the anchor in git), and what stays undetectable;
* the small command-line faults: nothing to verify, an empty machine id, broken YAML.

The whole pipeline under the same faults is in test_pipeline.py and test_fresh_clone.py.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from inferlab.core import files, layout
from inferlab.evidence import trust, upkeep
from inferlab.evidence.provenance import write_artifact
from inferlab.evidence.register import Register, entry_hash
from inferlab.evidence.verify import cli_verify
from inferlab.presentation import audit
from inferlab.workflow import runner
from inferlab.workflow.cli import main as cli_main
from tests.pipeline_repo import git, small_tmpfs
from tests.tampering import delete_tail, forge, rollback_results
from tests.test_register import MACHINE, _csv, _write, three_versions


def _state(root: Path) -> dict[str, bytes]:
    """Every file of the register and of results/, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for folder in (root / "evidence", root / "results") if folder.is_dir()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


def _results_and_register(state: dict[str, bytes]) -> dict[str, bytes]:
    """``_state`` without the retained copies (a failed write may leave one: harmless)."""
    return {k: v for k, v in state.items() if "/objects/" not in k}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Three versions: prefill v1, decode v1, prefill v2."""
    return three_versions(tmp_path)


# ------------------------------------------------------------------ full disk


def _big_write(root: Path, seed: int) -> dict:
    """A version whose sidecar and register line each span two pages."""
    code = root / "inferlab_code.py"
    if not code.exists():
        code.write_text("# the code that ran\n")
    return write_artifact(root, MACHINE, "prefill", _csv(seed) * 40, config={"seed": seed},
                          code_files=[code], inputs=[], seed=seed, command="x",
                          environment={"padding": "e" * 6000})


@pytest.fixture
def tmpfs(tmp_path):
    """A 1 MiB tmpfs at tmp_path/disk (root only)."""
    with small_tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def test_a_full_disk_at_any_point_leaves_register_and_results_as_they_were(tmpfs):
    outcomes = []
    for free_pages in range(12):
        root = tmpfs / "root"
        shutil.rmtree(root, ignore_errors=True)
        (tmpfs / "filler").unlink(missing_ok=True)
        root.mkdir()
        _big_write(root, 1)
        before = _state(root)
        st = os.statvfs(tmpfs)
        (tmpfs / "filler").write_bytes(b"\0" * ((st.f_bavail - free_pages) * st.f_frsize))
        try:
            _big_write(root, 2)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            after = _state(root)
            assert _results_and_register(after) == _results_and_register(before)
            assert Register(root, MACHINE).verify() == []
            name = re.search(r"No space left on device writing (\S+) \(", str(exc)).group(1)
            outcomes.append("register" if name.endswith(layout.REGISTER_FILE) else
                            "copy" if f"/{layout.OBJECTS_DIR}/" in name else "results")
        else:
            assert [e["version"] for e in Register(root, MACHINE).history("prefill")] == [1, 2]
            assert Register(root, MACHINE).verify() == []
            outcomes.append("written")
    # the sweep reached every step: a retained copy, a results file and the register line
    # refused (the torn line), and a whole write
    assert set(outcomes) == {"copy", "results", "register", "written"}, outcomes


@pytest.mark.parametrize("short", ["half then ENOSPC", "no progress"])
def test_a_short_register_write_is_undone(tmp_path, monkeypatch, short):
    _write(tmp_path, "prefill", 1)
    before = _state(tmp_path)
    real_write = os.write

    def failing_write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(layout.REGISTER_FILE):
            if short == "no progress":
                return 0
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(files.os, "write", failing_write)
    with pytest.raises(OSError, match=r"writing .*register.jsonl \(\d+ of \d+ bytes written\)"):
        _write(tmp_path, "prefill", 2)
    monkeypatch.undo()
    assert _results_and_register(_state(tmp_path)) == _results_and_register(before)
    assert Register(tmp_path, MACHINE).verify() == []


@pytest.mark.parametrize("hard_links", [True, False])
def test_a_failed_group_of_writes_is_undone(tmp_path, monkeypatch, hard_links):
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    old.write_bytes(b"old\n")
    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    if not hard_links:  # e.g. a FAT drive: the old file cannot be kept, and is not lost
        monkeypatch.setattr(files.os, "link", no_link)
    with pytest.raises(OSError, match="disk full"), files.restored_on_failure([old, new]):
        files.atomic_write(old, b"replaced\n")
        files.atomic_write(new, b"made\n")
        raise OSError(errno.ENOSPC, "disk full")
    assert old.read_bytes() == (b"old\n" if hard_links else b"replaced\n")
    assert not new.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["old.csv"]


# ------------------------------------------------------------------ a torn line


@pytest.fixture
def torn(root) -> tuple[Path, bytes]:
    """The register of test_register's ``root`` with half an entry appended, as the
    old code left it on a full disk; returns (root, the complete entries' bytes)."""
    path = layout.register_path(root, MACHINE)
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[-1][:385])
    return root, whole


def test_a_torn_line_is_named_with_the_repair(torn, capsys):
    root, _ = torn
    with pytest.raises(ValueError, match=r"line 4 is not valid JSON.*verify --repair"):
        Register(root, MACHINE).entries()
    assert cli_verify(root) == 1
    assert "`inferlab verify --repair` removes it" in capsys.readouterr().out


def test_repair_cuts_only_the_torn_line_saying_what(torn, capsys):
    root, whole = torn
    assert cli_verify(root, fix=True) == 0
    out = capsys.readouterr().out
    assert "line 4 is torn" in out and "385 bytes, no newline" in out
    assert "removed those 385 bytes; every complete entry is untouched" in out
    assert layout.register_path(root, MACHINE).read_bytes() == whole
    assert cli_verify(root, fix=True) == 0 and "REPAIR" not in capsys.readouterr().out


def test_repair_completes_a_whole_entry_missing_only_its_newline(root):
    path = layout.register_path(root, MACHINE)
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])
    assert upkeep.cut_torn_tail(root, MACHINE) == b""
    assert path.read_bytes() == whole


def test_repair_leaves_a_corrupt_middle_line_to_the_user(root, capsys):
    path = layout.register_path(root, MACHINE)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1][:100] + b"\n"
    path.write_bytes(b"".join(lines))
    assert cli_verify(root, fix=True) == 1
    out = capsys.readouterr().out
    assert "REPAIR" not in out and "register.jsonl line 2: not valid JSON" in out
    assert path.read_bytes() == b"".join(lines)


# ------------------------------------------------------------------ tampering


def _doubt_everywhere(root: Path, stage: str) -> str:
    """trust.doubt's reason, checked to be what the runner and audit refuse on too."""
    why = trust.doubt(root, MACHINE, stage)
    assert why is not None
    with pytest.raises(ValueError, match="cannot be trusted"):
        runner.read_input(root, MACHINE, stage, layout.artifact_path(root, MACHINE, stage))
    evidence = audit.load_evidence(root, MACHINE, stage)
    assert audit.integrity(root, MACHINE, evidence)["status"] == "MISMATCH"
    return why


def test_an_edited_sidecar_is_refused(root, capsys):
    sidecar = layout.sidecar_path(layout.artifact_path(root, MACHINE, "prefill"))
    sidecar.write_text(sidecar.read_text().replace('"seed": 13', '"seed": 14'))
    assert "prov.json matches no registered version" in _doubt_everywhere(root, "prefill")
    assert cli_verify(root) == 1


def test_an_older_sidecar_swapped_in_is_refused(root):
    older = Register(root, MACHINE).entry("prefill", 1)
    sidecar = layout.sidecar_path(layout.artifact_path(root, MACHINE, "prefill"))
    sidecar.write_bytes(Register(root, MACHINE).copy_path(older["sidecar_sha256"]).read_bytes())
    why = _doubt_everywhere(root, "prefill")
    assert "prefill.csv.prov.json is version 1 of prefill, but the register's latest is " \
           "version 2" in why
    assert any("rolled back or swapped" in p.message for p in Register(root, MACHINE).verify())


def test_a_whole_rollback_of_results_is_refused(root):
    rollback_results(root, MACHINE, "prefill", 1)
    assert "is version 1 of prefill" in _doubt_everywhere(root, "prefill")


def test_a_forged_entry_that_disagrees_with_its_sidecar_is_refused(root):
    forged = {**Register(root, MACHINE).latest("prefill")["provenance"], "seed": 99}
    forge(root, MACHINE, "prefill", _csv(77), provenance=forged)
    assert "disagrees with register version 3" in _doubt_everywhere(root, "prefill")


def test_a_broken_chain_makes_every_artifact_doubtful(root):
    lines = layout.register_path(root, MACHINE).read_text().splitlines()
    entry = json.loads(lines[0])
    entry["provenance"]["seed"] = 5
    layout.register_path(root, MACHINE).write_text(
        "\n".join([json.dumps(entry), *lines[1:]]) + "\n")
    assert "register of cpu-test-2t is broken" in _doubt_everywhere(root, "decode")


# ------------------------------------------------------------------ the anchor in git


@pytest.fixture
def committed(root) -> Path:
    """test_register's three versions, committed to git (the register's anchor)."""
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "evidence")
    return root


def test_a_committed_tail_deleted_with_a_matching_rollback_is_found(committed, capsys):
    delete_tail(committed, MACHINE, 1)
    rollback_results(committed, MACHINE, "prefill", 1)
    # consistent in itself: chain, copies and results agree (the attack the issue found)
    assert Register(committed, MACHINE).verify() == []
    assert "entries 3-3 were deleted" in _doubt_everywhere(committed, "prefill")
    assert cli_verify(committed) == 1
    assert "git checkout --" in capsys.readouterr().out
    with pytest.raises(ValueError, match="refusing to append .* entries 3-3 were deleted"):
        _write(committed, "decode", 31)  # a new run must not build on the shortened chain


def test_a_committed_entry_replaced_by_a_consistent_forgery_is_found(committed):
    delete_tail(committed, MACHINE, 1)
    forge(committed, MACHINE, "prefill", _csv(66))
    assert Register(committed, MACHINE).verify() == []
    assert "line 3 differs from the committed register" in _doubt_everywhere(committed,
                                                                               "prefill")


def test_a_consistent_forgery_after_the_last_commit_is_only_unanchored(committed, capsys):
    """What the anchor cannot do: an entry appended since the last commit is checked
    like a run made here. verify passes and says it is unanchored; audit says so; adopt
    will not trust it (test_fresh_clone.py)."""
    entry = forge(committed, MACHINE, "prefill", _csv(55))
    assert entry_hash(entry) == entry["entry_hash"]
    assert trust.doubt(committed, MACHINE, "prefill") is None
    assert cli_verify(committed) == 0
    assert "entries 4-4 were appended since the last commit" in capsys.readouterr().out
    evidence = audit.load_evidence(committed, MACHINE, "prefill")
    checked = audit.integrity(committed, MACHINE, evidence)
    assert checked["anchored"] is False and "not anchored" in checked["detail"]


def test_outside_git_verify_says_nothing_is_anchored(root, capsys):
    assert cli_verify(root) == 0
    assert "not anchored: git does not track" in capsys.readouterr().out


def test_claims_mark_an_edited_claims_json(root, capsys):
    write_artifact(root, MACHINE, "claims",
                   json.dumps({"machine": MACHINE, "grid": None, "schema_version": 2,
                               "claims": []}).encode(),
                   config={}, code_files=[root / "inferlab_code.py"], inputs=[], seed=0,
                   command="x", environment={})
    for stage in ("prefill", "decode"):  # leave only claims.json to doubt
        layout.artifact_path(root, MACHINE, stage).unlink()
        layout.sidecar_path(layout.artifact_path(root, MACHINE, stage)).unlink()
    assert audit.cli_claims(root) == 0
    assert "grid book (config.yaml)" in capsys.readouterr().out
    path = layout.artifact_path(root, MACHINE, "claims")
    path.write_text(path.read_text().replace('"grid": null', '"grid": "smoke"'))
    assert audit.cli_claims(root) == 1
    out = capsys.readouterr().out
    assert f"{MACHINE} !" in out and "MISMATCH claims: results/cpu-test-2t/claims.json " \
                                      "matches no registered version" in out
    assert "claims.json says machine 'cpu-test-2t', grid 'smoke'" in out


# ------------------------------------------------------------------ small command-line faults


def test_verify_with_nothing_to_verify_fails(tmp_path, capsys):
    assert cli_main(["--root", str(tmp_path), "verify"]) == 1
    assert "nothing to verify: no evidence/ or results/ folders under" in \
        capsys.readouterr().out


def test_an_empty_machine_id_is_refused(tmp_path, capsys):
    assert cli_main(["history", "--machine", ""]) == 2
    assert "machine='' is not a valid machine id" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["configfile", "set"])
def test_broken_yaml_names_where_it_is(tmp_path, capsys, where):
    bad = tmp_path / "bad.yaml"
    bad.write_text("prefill: [1\n")
    args = ["--configfile", str(bad)] if where == "configfile" else ["--set", "prefill.d=[1"]
    assert cli_main(["stage", "traffic", *args]) == 2
    err = capsys.readouterr().err
    named = f"config file '{bad}' is not valid YAML" if where == "configfile" else \
        "override 'prefill.d=[1' is not valid YAML"
    assert named in err and "Traceback" not in err


def test_a_committed_machine_deleted_whole_is_found(committed, capsys):
    """rm -r evidence/KEY results/KEY: nothing is left to hash, but HEAD still has it."""
    shutil.rmtree(layout.evidence_dir(committed, MACHINE))
    shutil.rmtree(committed / "results" / MACHINE)
    assert cli_verify(committed) == 1
    out = capsys.readouterr().out
    assert f"FAIL {MACHINE}" in out and "entries 1-3 were deleted" in out
    assert "nothing to verify" not in out
    assert cli_verify(committed, MACHINE) == 1  # named alone, it is found the same way
    out = capsys.readouterr().out
    assert "entries 1-3 were deleted" in out and "no evidence for" not in out
