"""The bytes under the register, at their edges (issue 14): hashes, canonical JSON,
whole-or-nothing writes, git state; the sidecar and provenance the writer builds; what
``inferlab verify`` and ``inferlab history`` print.

Each expected value here is computed by the test (hashlib, json, os) or written out,
never taken from the code under test.
"""

from __future__ import annotations

import calendar
import errno
import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from inferlab.core import files, layout
from inferlab.evidence.provenance import (
    build_provenance,
    code_hash,
    config_hash,
    file_hashes,
    sidecar_bytes,
    write_artifact,
)
from inferlab.evidence.register import Register
from inferlab.evidence.verify import _preview, cli_history, cli_verify, repair
from tests.pipeline_repo import git
from tests.test_register import MACHINE, _csv, three_versions

# ------------------------------------------------------------------ hashes and JSON


def test_sha256_of_bytes_and_of_a_file_larger_than_one_block(tmp_path):
    data = bytes(range(256)) * 5000  # 1.28 MB: more than one read
    path = tmp_path / "big"
    path.write_bytes(data)
    assert files.sha256_bytes(data) == hashlib.sha256(data).hexdigest()
    assert files.sha256_file(path) == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert files.sha256_file(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize(("obj", "where"), [
    ({"a": {"b": float("inf")}}, r"obj\['a'\]\['b'\]=inf"),
    (("x", -float("inf")), r"obj\[1\]=-inf"),
    ([[0.0, float("nan")]], r"obj\[0\]\[1\]=nan"),
])
def test_canonical_json_names_a_non_finite_number(obj, where):
    with pytest.raises(ValueError, match=f"^{where}: NaN and infinity have no canonical JSON "
                                         r"form; use None \(null\) for a value that was not "
                                         "measured$"):
        files.canonical_json(obj)


def test_reject_nonfinite_uses_the_given_name_and_passes_finite_data():
    with pytest.raises(ValueError, match=r"^sidecar\['x'\]=nan: "):
        files.reject_nonfinite({"x": float("nan")}, "sidecar")
    files.reject_nonfinite({"x": [1.5, 2, None, "nan"]}, "ok")  # finite, or not a float


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
def test_a_non_finite_key_has_no_canonical_form_either(number):
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        files.canonical_json({number: 1})
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        sidecar_bytes("decode", "d", b"", {number: 1})


def test_canonical_json_of_what_json_cannot_write_is_a_value_error():
    with pytest.raises(ValueError, match="obj is not JSON data: .*set"):
        files.canonical_json({"a": {1, 2}})


def test_canonical_json_is_compact_sorted_ascii():
    assert files.canonical_json({"b": [1, {"d": "é\u2028", "c": None}], "a": True}) == \
        b'{"a":true,"b":[1,{"c":null,"d":"\\u00e9\\u2028"}]}'
    assert files.canonical_json({"d": "é"}, ascii_only=False) == '{"d":"é"}'.encode()


def test_split_lines_splits_on_newline_only():
    assert files.split_lines(b"a\xe2\x80\xa8b\rc\x85\nd\n") == [b"a\xe2\x80\xa8b\rc\x85", b"d"]
    assert files.split_lines(b"a\nb") == [b"a", b"b"]  # a torn tail is a line
    assert files.split_lines(b"") == []


def test_utc_now_iso_is_utc_to_the_second_with_a_z(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kathmandu")  # UTC+05:45: a local clock would show
    time.tzset()
    try:
        stamp = files.utc_now_iso()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert abs(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.time()) < 60


def test_relative_inside_and_outside_the_root(tmp_path):
    assert files.relative(tmp_path / "a" / "b.csv", tmp_path) == "a/b.csv"
    assert files.relative(str(tmp_path / "a" / ".." / "c"), str(tmp_path)) == "c"
    outside = tmp_path.parent / "elsewhere.txt"
    assert files.relative(outside, tmp_path) == outside.resolve().as_posix()


# ------------------------------------------------------------------ writes


def test_atomic_write_replaces_and_leaves_other_writers_temp_files(tmp_path):
    target = tmp_path / "sub" / "a.csv"
    files.atomic_write(target, b"one\n")
    other = target.parent / ".a.csv.123.xyz.tmp"  # another writer's (issue 23, item 7):
    other.write_bytes(b"being written")  # only the folder's lock holder sweeps debris
    files.atomic_write(target, b"two\n")
    assert target.read_bytes() == b"two\n"
    assert sorted(p.name for p in target.parent.iterdir()) == [".a.csv.123.xyz.tmp", "a.csv"]
    assert files.debris(target.parent) == [other]


def test_a_failed_atomic_write_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "a.csv"
    target.write_bytes(b"old\n")

    def refuse(fd, data):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(files.os, "write", refuse)
    with pytest.raises(OSError, match=r"I/O error writing .*a.csv \(0 of 4 bytes written\)") \
            as caught:
        files.atomic_write(target, b"new\n")
    assert caught.value.errno == errno.EIO
    monkeypatch.undo()
    assert target.read_bytes() == b"old\n" and os.listdir(tmp_path) == ["a.csv"]


def test_write_all_goes_on_after_a_short_write(tmp_path, monkeypatch):
    real_write, sizes = os.write, []

    def three_bytes_at_a_time(fd, data):
        sizes.append(len(data))
        return real_write(fd, bytes(data[:3]))

    monkeypatch.setattr(files.os, "write", three_bytes_at_a_time)
    files.atomic_write(tmp_path / "a", b"0123456789")
    monkeypatch.undo()
    assert (tmp_path / "a").read_bytes() == b"0123456789" and sizes == [10, 7, 4, 1]


def test_a_write_that_makes_no_progress_is_enospc(tmp_path, monkeypatch):
    monkeypatch.setattr(files.os, "write", lambda fd, data: 0)
    with pytest.raises(OSError, match=r"no progress writing .* \(0 of 2 bytes written\)") \
            as caught:
        files.durable_append(tmp_path / "r.jsonl", b"x\n")
    assert caught.value.errno == errno.ENOSPC


def test_durable_append_adds_whole_lines_only(tmp_path):
    path = tmp_path / "r.jsonl"
    files.durable_append(path, b"a\n")
    files.durable_append(path, b"b\n")
    assert path.read_bytes() == b"a\nb\n"
    with pytest.raises(ValueError, match="^line must end with a newline$"):
        files.durable_append(path, b"c")
    assert path.read_bytes() == b"a\nb\n"
    assert oct(path.stat().st_mode & 0o777) == oct(0o644 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_restored_on_failure_removes_its_links_on_success_and_stale_ones(tmp_path):
    old = tmp_path / "old.csv"
    old.write_bytes(b"old\n")
    other = tmp_path / ".old.csv.99999.bak"  # another writer's: not ours to remove
    other.write_bytes(b"left by a killed run, or another live one")
    mine = tmp_path / f".old.csv.{os.getpid()}.bak"
    mine.write_bytes(b"left by a killed run of this pid")
    with files.restored_on_failure([old, tmp_path / "new.csv"]):
        assert other.exists()
        assert mine.read_bytes() == b"old\n"
        files.atomic_write(old, b"replaced\n")
    assert sorted(os.listdir(tmp_path)) == [".old.csv.99999.bak", "old.csv"]
    assert old.read_bytes() == b"replaced\n"


def test_restored_on_failure_raises_a_link_error_that_is_not_about_links(tmp_path,
                                                                          monkeypatch):
    old = tmp_path / "old.csv"
    old.write_bytes(b"old\n")

    def no_space(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "link", no_space)
    with pytest.raises(OSError, match="No space left"), files.restored_on_failure([old]):
        pytest.fail("the block must not run without its backup")
    assert os.listdir(tmp_path) == ["old.csv"]


@pytest.mark.parametrize("code", sorted(files.NO_HARD_LINKS))
def test_each_no_hard_link_error_is_tolerated(tmp_path, monkeypatch, code):
    old = tmp_path / "old.csv"
    old.write_bytes(b"old\n")

    def refuse(src, dst):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(files.os, "link", refuse)
    with files.restored_on_failure([old]):
        files.atomic_write(old, b"new\n")
    assert old.read_bytes() == b"new\n"


# ------------------------------------------------------------------ git


def test_git_file_reads_a_committed_file_none_where_git_has_none_and_says_why_not(tmp_path):
    assert files.git_file(tmp_path, "HEAD", "a.txt") is None  # not a repository
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_bytes(b"committed\n")
    assert files.git_file(tmp_path, "HEAD", "a.txt") is None  # no commit yet
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-q", "-m", "c")
    (tmp_path / "a.txt").write_bytes(b"working\n")
    assert files.git_file(tmp_path, "HEAD", "a.txt") == b"committed\n"
    assert files.git_file(tmp_path, "HEAD", "b.txt") is None  # not tracked
    with pytest.raises(files.CannotCheck, match="cannot change to"):
        files.git_file(tmp_path / "nowhere", "HEAD", "a.txt")


def _committed(repo: Path, text: bytes = b"committed\n") -> Path:
    """A new git repository at ``repo`` with one commit of a.txt holding ``text``."""
    repo.mkdir(exist_ok=True)
    git(repo, "init", "-q")
    (repo / "a.txt").write_bytes(text)
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "c")
    return repo


def test_git_file_none_for_a_file_on_disk_but_not_committed_and_for_a_long_path(tmp_path):
    _committed(tmp_path)
    (tmp_path / "b.txt").write_bytes(b"untracked\n")  # git: "exists on disk, but not in"
    assert files.git_file(tmp_path, "HEAD", "b.txt") is None
    # git's answer names the path: with a path of 401 characters "does not exist in" comes
    # after character 300 (once cut there, such a path raised CannotCheck)
    assert files.git_file(tmp_path, "HEAD", "a" * 200 + "/" + "b" * 200) is None


def test_git_file_says_what_git_said_when_it_fails(tmp_path):
    _committed(tmp_path)
    with pytest.raises(files.CannotCheck) as caught:
        files.git_file(tmp_path, "HEAD", "../outside.txt")
    message = str(caught.value)
    assert message.startswith("git show HEAD:../outside.txt failed: fatal: ")
    assert "outside repository" in message


def test_git_file_when_git_cannot_start(tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.subprocess, "run", refused)
    with pytest.raises(files.CannotCheck, match=r"^git did not run \(.*Permission denied"):
        files.git_file(tmp_path, "HEAD", "a")


def test_git_env_drops_redirects_keeps_the_rest_and_ignores_replacements(monkeypatch):
    for name in files._GIT_REDIRECTS:
        monkeypatch.setenv(name, "/elsewhere")
    monkeypatch.setenv("INFERLAB_KEPT", "yes")
    env = files.git_env()
    assert not set(files._GIT_REDIRECTS) & set(env)
    assert env["INFERLAB_KEPT"] == "yes" and env["GIT_NO_REPLACE_OBJECTS"] == "1"


def test_git_reads_the_folder_asked_about_whatever_GIT_DIR_says(tmp_path, monkeypatch):
    """A hook or a shell that exports GIT_DIR (git does, for its hooks) must not make the
    register read another repository."""
    other = _committed(tmp_path / "other", b"other\n")
    mine = _committed(tmp_path / "mine", b"mine\n")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    assert files.git_file(mine, "HEAD", "a.txt") == b"mine\n"
    head = subprocess.run(["git", "-C", str(mine), "--git-dir", str(mine / ".git"),
                           "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert files.git_state(mine)["commit"] == head.stdout.strip()
    (mine / "a.txt").write_bytes(b"changed\n")
    assert files.git_state(mine)["dirty"] is True


def test_git_file_reads_the_commit_not_its_replacement(tmp_path):
    """``git replace`` can stand another commit in for HEAD; the register reads what was
    committed (GIT_NO_REPLACE_OBJECTS)."""
    _committed(tmp_path, b"first\n")
    first = git(tmp_path, "rev-parse", "HEAD").strip()
    (tmp_path / "a.txt").write_bytes(b"second\n")
    git(tmp_path, "commit", "-q", "-am", "second")
    second = git(tmp_path, "rev-parse", "HEAD").strip()
    git(tmp_path, "replace", second, first)
    assert files.git_file(tmp_path, "HEAD", "a.txt") == b"second\n"


def test_debris_is_a_dot_file_with_a_temp_or_backup_suffix_only(tmp_path):
    for name in (".a.1.x.tmp", ".b.2.bak", "c.tmp", "d.bak", ".e.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / ".f.tmp").mkdir()  # a folder is never debris
    assert files.debris(tmp_path) == [tmp_path / ".a.1.x.tmp", tmp_path / ".b.2.bak"]


def test_git_state_of_a_root_inside_a_repository_sees_only_the_root(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "code.py").write_text("x = 1\n")
    (tmp_path / "other.txt").write_text("a\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "c")
    (tmp_path / "other.txt").write_text("b\n")  # outside the root: not its code
    assert files.git_state(root)["dirty"] is False
    (root / "code.py").write_text("x = 2\n")
    assert files.git_state(root)["dirty"] is True


def test_git_state_of_a_repository_without_commits(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    assert files.git_state(tmp_path) == {"commit": None, "dirty": True}


def test_git_state_when_git_cannot_run(tmp_path, monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(files.subprocess, "run", missing)
    assert files.git_state(tmp_path) == {"commit": None, "dirty": None}
    with pytest.raises(files.CannotCheck, match=r"^git is not on the PATH$"):
        files.git_file(tmp_path, "HEAD", "a")
    assert files.git_subfolders(tmp_path, "HEAD", "evidence") == []


def test_git_subfolders_lists_committed_folders_only(tmp_path):
    """The machines committed at HEAD (what `inferlab verify` adds to the working tree's):
    folders, not the files beside them, and only what HEAD has."""
    for name in ("cpu-b-2c/register.jsonl", "cpu-a-2c/objects/x", "README.md"):
        (tmp_path / "evidence" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "evidence" / name).write_text("x\n")
    assert files.git_subfolders(tmp_path, "HEAD", "evidence") == []  # not a repository
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "c")
    (tmp_path / "evidence" / "cpu-c-2c").mkdir()  # not committed
    assert files.git_subfolders(tmp_path, "HEAD", "evidence") == ["cpu-a-2c", "cpu-b-2c"]
    assert files.git_subfolders(tmp_path, "HEAD", "results") == []


# ------------------------------------------------------------------ provenance


def test_config_hash_is_the_sha256_of_the_canonical_config():
    config = {"T": [512], "d": 64, "name": "Größe"}
    assert config_hash(config) == hashlib.sha256(
        b'{"T":[512],"d":64,"name":"Gr\\u00f6\\u00dfe"}').hexdigest()
    with pytest.raises(ValueError, match=r"^config=\[1\] must be a dict$"):
        config_hash([1])


def test_file_hashes_and_code_hash(tmp_path):
    (tmp_path / "pkg").mkdir()
    b, a = tmp_path / "pkg" / "b.py", tmp_path / "a.py"
    b.write_bytes(b"b\n")
    a.write_bytes(b"a\n")
    hashes = file_hashes([b, str(a)], tmp_path)
    assert list(hashes.items()) == [("a.py", hashlib.sha256(b"a\n").hexdigest()),
                                    ("pkg/b.py", hashlib.sha256(b"b\n").hexdigest())]
    pairs = json.dumps(sorted(hashes.items()), separators=(",", ":")).encode()
    assert code_hash([a, b], tmp_path) == hashlib.sha256(pairs).hexdigest()
    with pytest.raises(ValueError, match=r"file '.*pkg' does not exist \(or is not a file\)"):
        file_hashes([tmp_path / "pkg"], tmp_path)


def test_build_provenance_has_every_field(tmp_path):
    code = tmp_path / "code.py"
    code.write_bytes(b"x = 1\n")
    inp = tmp_path / "in.csv"
    inp.write_bytes(b"T\n1\n")
    prov = build_provenance(tmp_path, "cpu-x-2t@smoke", "prefill", config={"T": [1]},
                            code_files=[code], inputs=[inp], seed=3, command="cmd",
                            environment={"e": 1})
    digest = hashlib.sha256(b"x = 1\n").hexdigest()
    assert {k: v for k, v in prov.items() if k != "created_at"} == {
        "stage": "prefill", "machine": "cpu-x-2t", "grid": "smoke", "git_commit": None,
        "git_dirty": None, "code_files": {"code.py": digest},
        "code_sha256": hashlib.sha256(f'[["code.py","{digest}"]]'.encode()).hexdigest(),
        "config_sha256": hashlib.sha256(b'{"T":[1]}').hexdigest(), "config": {"T": [1]},
        "environment": {"e": 1}, "seed": 3,
        "inputs": {"in.csv": hashlib.sha256(b"T\n1\n").hexdigest()}, "command": "cmd"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", prov["created_at"])
    book = build_provenance(tmp_path, "cpu-x-2t", "probe", config={}, code_files=[],
                            inputs=[], seed=0, command="c", environment={})
    assert (book["machine"], book["grid"]) == ("cpu-x-2t", None)


def test_bookkeeping_files_are_recorded_beside_the_code_not_in_it(tmp_path):
    """What ran but cannot change a number (register, provenance ...): its hashes are in
    the sidecar, apart from code_sha256, which alone decides whether the artifact is
    current."""
    (tmp_path / "code.py").write_bytes(b"x = 1\n")
    (tmp_path / "book.py").write_bytes(b"y = 2\n")
    args = {"config": {}, "inputs": [], "seed": 0, "command": "c", "environment": {}}
    plain = build_provenance(tmp_path, MACHINE, "probe", code_files=[tmp_path / "code.py"],
                             **args)
    assert "bookkeeping_sha256" not in plain and "bookkeeping_files" not in plain
    book = build_provenance(tmp_path, MACHINE, "probe", code_files=[tmp_path / "code.py"],
                            bookkeeping_files=[tmp_path / "book.py"], **args)
    assert book["bookkeeping_files"] == file_hashes([tmp_path / "book.py"], tmp_path) == {
        "book.py": hashlib.sha256(b"y = 2\n").hexdigest()}
    assert book["bookkeeping_sha256"] == code_hash([tmp_path / "book.py"], tmp_path)
    assert book["code_sha256"] == plain["code_sha256"]
    write_artifact(tmp_path, MACHINE, "decode", b"T\n1\n", code_files=[],
                   bookkeeping_files=[tmp_path / "book.py"], **args)
    sidecar = layout.sidecar_path(layout.artifact_path(tmp_path, MACHINE, "decode"))
    assert json.loads(sidecar.read_text())["provenance"]["bookkeeping_files"] == {
        "book.py": hashlib.sha256(b"y = 2\n").hexdigest()}


def test_build_provenance_records_the_git_commit(tmp_path):
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "code.py")
    git(tmp_path, "commit", "-q", "-m", "c")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], text=True,
                          capture_output=True, check=True).stdout.strip()
    prov = build_provenance(tmp_path, MACHINE, "probe", config={}, code_files=[],
                            inputs=[], seed=0, command="c", environment={})
    assert (prov["git_commit"], prov["git_dirty"]) == (head, False)


def test_sidecar_bytes_are_sorted_indented_ascii_with_a_newline():
    data = sidecar_bytes("decode", "decode.csv", b"T\n1\n", {"z": 1, "a": "é"}, 3)
    expected = {"schema": "inferlab/decode", "schema_version": 3, "artifact": "decode.csv",
                "sha256": hashlib.sha256(b"T\n1\n").hexdigest(),
                "provenance": {"z": 1, "a": "é"}}
    assert data == (json.dumps(expected, sort_keys=True, indent=2, ensure_ascii=True)
                    + "\n").encode()
    assert data.isascii()
    assert json.loads(sidecar_bytes("decode", "d", b"", {}))["schema_version"] == 1
    with pytest.raises(ValueError, match=r"sidecar\['provenance'\]\['x'\]=nan"):
        sidecar_bytes("decode", "d", b"", {"x": float("nan")})


@pytest.mark.parametrize(("change", "message"), [
    ({"content": "T\n1\n"}, "content must be bytes (the artifact as written), got str"),
    ({"seed": True}, "seed=True must be an int"),
    ({"seed": 1.0}, "seed=1.0 must be an int"),
    ({"command": "  "}, "command='  ' must be the command line that reproduces it"),
    ({"command": None}, "command=None must be the command line that reproduces it"),
    ({"environment": []}, "environment=[] must be a dict (environment.fingerprint)"),
    ({"schema_version": 0}, "schema_version=0 must be an int >= 1"),
    ({"schema_version": True}, "schema_version=True must be an int >= 1"),
    ({"schema_version": 1.0}, "schema_version=1.0 must be an int >= 1"),
])
def test_write_artifact_names_a_bad_argument_and_writes_nothing(tmp_path, change, message):
    """(Each message is matched whole: ``^...$``.)"""
    args = {"content": b"T\n1\n", "config": {}, "code_files": [], "inputs": [], "seed": 0,
            "command": "x", "environment": {}} | change
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        write_artifact(tmp_path, MACHINE, "prefill", **args)
    assert list(tmp_path.iterdir()) == []


def test_write_artifact_writes_schema_version_1_unless_told(tmp_path):
    write_artifact(tmp_path, MACHINE, "decode", b"T\n1\n", config={}, code_files=[],
                   inputs=[], seed=0, command="x", environment={})
    sidecar = layout.sidecar_path(layout.artifact_path(tmp_path, MACHINE, "decode"))
    assert json.loads(sidecar.read_text())["schema_version"] == 1


def test_write_artifact_writes_the_files_and_returns_the_entry(tmp_path):
    entry = write_artifact(tmp_path, MACHINE, "decode", b"T\n1\n", config={}, code_files=[],
                           inputs=[], seed=0, command="x", environment={}, schema_version=2)
    artifact = layout.artifact_path(tmp_path, MACHINE, "decode")
    sidecar = layout.sidecar_path(artifact).read_bytes()
    assert artifact.read_bytes() == b"T\n1\n"
    assert json.loads(sidecar)["schema_version"] == 2
    assert entry == Register(tmp_path, MACHINE).latest("decode")
    assert (entry["path"], entry["sha256"], entry["sidecar_sha256"]) == (
        f"results/{MACHINE}/decode.csv", hashlib.sha256(b"T\n1\n").hexdigest(),
        hashlib.sha256(sidecar).hexdigest())


# ------------------------------------------------------------------ verify and history


def test_preview_cuts_at_its_width():
    assert _preview(b"x" * 60) == repr("x" * 60)
    assert _preview(b"x" * 61) == repr("x" * 60 + "…")
    assert _preview(b"ab\xff", width=2) == repr("ab…")


def test_repair_says_what_it_did(tmp_path, capsys):
    root = three_versions(tmp_path)
    reg = Register(root, MACHINE)
    assert repair(reg) is False and capsys.readouterr().out == ""
    whole = reg.path.read_bytes()
    reg.path.write_bytes(whole[:-1])
    assert repair(reg) is False
    out = capsys.readouterr().out
    assert f"REPAIR {MACHINE}: evidence/{MACHINE}/register.jsonl line 3 is torn (an append " \
           f"interrupted: {len(whole.splitlines()[-1])} bytes, no newline): " in out
    assert out.endswith(f"REPAIR {MACHINE}: it is a whole entry: only its newline was "
                        "added\n")
    reg.path.write_bytes(whole + b'{"seq": 3')
    assert repair(reg) is True
    assert capsys.readouterr().out.splitlines() == [
        f"REPAIR {MACHINE}: evidence/{MACHINE}/register.jsonl line 4 is torn (an append "
        "interrupted: 9 bytes, no newline): '{\"seq\": 3'",
        f"REPAIR {MACHINE}: removed those 9 bytes; every complete entry is untouched"]
    assert reg.path.read_bytes() == whole


def test_verify_prints_one_line_per_problem_and_the_hint(tmp_path, capsys):
    root = three_versions(tmp_path)
    path = layout.register_path(root, MACHINE)
    path.write_bytes(path.read_bytes() + b"{")
    assert cli_verify(root, MACHINE) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"FAIL {MACHINE}: register.jsonl line 4: not valid JSON (Expecting " \
                     "property name enclosed in double quotes): a corrupt or truncated line"
    assert out[1] == f"HINT {MACHINE}: the last line is torn; `inferlab verify --repair` " \
                     "removes it"
    assert not any(line.startswith("OK") for line in out)


def test_verify_of_one_key_checks_that_key_only(tmp_path, capsys):
    root = three_versions(tmp_path)
    write_artifact(root, "cpu-other-1t", "decode", _csv(5), config={}, code_files=[],
                   inputs=[], seed=0, command="x", environment={})
    layout.artifact_path(root, MACHINE, "decode").write_bytes(b"edited\n")
    assert cli_verify(root, "cpu-other-1t") == 0
    out = capsys.readouterr().out
    assert "OK cpu-other-1t: 1 entries, 2 copies" in out and MACHINE not in out
    assert cli_verify(tmp_path / "empty") == 1
    assert capsys.readouterr().out == (
        "nothing to verify: no evidence/ or results/ folders under "
        f"{(tmp_path / 'empty').resolve()} (is --root the repository?)\n")


def test_verify_notes_what_git_does_not_anchor(tmp_path, capsys):
    root = three_versions(tmp_path)
    assert cli_verify(root) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"NOTE {MACHINE}: not anchored: git does not track evidence/{MACHINE}/register.jsonl "
        "at HEAD, so a deleted tail or a consistent forged entry cannot be told from a real "
        "one (commit evidence/ to anchor it)", f"OK {MACHINE}: 3 entries, 6 copies"]
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "evidence")
    assert cli_verify(root) == 0
    assert capsys.readouterr().out.splitlines() == [f"OK {MACHINE}: 3 entries, 6 copies"]
    write_artifact(root, MACHINE, "decode", _csv(5), config={}, code_files=[], inputs=[],
                   seed=0, command="x", environment={})
    write_artifact(root, MACHINE, "decode", _csv(6), config={}, code_files=[], inputs=[],
                   seed=0, command="x", environment={})
    assert cli_verify(root) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"NOTE {MACHINE}: entries 4-5 were appended since the last commit: checked, but not "
        "anchored until committed", f"OK {MACHINE}: 5 entries, 10 copies"]


def test_history_rows(tmp_path, capsys):
    root = three_versions(tmp_path)
    lines = layout.register_path(root, MACHINE).read_text().splitlines()
    entry = json.loads(lines[0])
    assert cli_history(root, MACHINE) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["version", "stage", "created_at", "sha256", "commit", "path"]
    assert out[1].split() == ["1", "prefill", entry["provenance"]["created_at"],
                              entry["sha256"][:12], "none", f"results/{MACHINE}/prefill.csv"]
    assert out[2].split()[:2] == ["1", "decode"] and len(out) == 4
    assert all(line == line.rstrip() for line in out)
    assert out[0].index("stage") == out[1].index("prefill")  # columns line up
    assert cli_history(root, "cpu-none-1t") == 1
    assert "no register for 'cpu-none-1t': " in capsys.readouterr().out


def test_history_shows_a_dirty_commit(tmp_path, capsys):
    from inferlab.evidence.verify import _history_row

    row = _history_row({"version": 2, "stage": "decode", "sha256": "ab" * 32, "path": "p",
                        "provenance": {"git_commit": "0123456789abcdef", "git_dirty": True,
                                       "created_at": "t"}})
    assert row == ("2", "decode", "t", "ab" * 6, "0123456789-dirty", "p")
    assert _history_row({})[4] == "none"
