"""The evidence register, the provenance writer and the bytes under them
(``evidence.register``, ``evidence.loading``, ``evidence.verify``,
``core.files``).

The threats are an honest author's (docs/contracts.md): a stale file, a hand edit, another
host's folder copied over this one, an interrupted write, a full disk. Each is made here
for real and must be named with its file and its fix, and lose nothing. Artifacts are
seeded random CSV text.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from inferlab.core import files, layout
from inferlab.core.files import canonical_json, git_state, sha256_bytes
from inferlab.core.pipeline import STAGES
from inferlab.evidence.history import kept_versions
from inferlab.evidence.register import (
    Register,
    code_hash,
    config_hash,
    doubt,
    read_input,
    sidecar_bytes,
    write_artifact,
)
from inferlab.evidence.verify import cli_history, cli_verify
from tests.pipeline_repo import commit, git, small_tmpfs

REPO = Path(__file__).resolve().parents[1]
MACHINE = "cpu-test-2t"


def _csv(seed: int) -> bytes:
    rng = random.Random(seed)
    rows = [f"{rng.randint(1, 8192)},{rng.random():.6f}" for _ in range(5)]
    return ("T,median_ms\n" + "\n".join(rows) + "\n").encode()


def _write(root: Path, stage: str, seed: int, key: str = MACHINE, inputs=(),
           content: bytes | None = None, environment: dict | None = None,
           bookkeeping: list[Path] | None = None) -> dict:
    code = root / "inferlab_code.py"
    if not code.exists():
        root.mkdir(parents=True, exist_ok=True)
        code.write_text("# the code that ran\n")
    return write_artifact(root, key, stage, _csv(seed) if content is None else content,
                          config={"seed": seed, "T": [512]}, code_files=[code],
                          bookkeeping_files=bookkeeping,
                          inputs=list(inputs), seed=seed,
                          command=f"python -m inferlab stage {stage}",
                          environment=environment or {"torch": "test", "threads": 2})


def three_versions(root: Path) -> Path:
    """prefill v1, decode v1, prefill v2."""
    for stage, seed in (("prefill", 11), ("decode", 12), ("prefill", 13)):
        _write(root, stage, seed)
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return three_versions(tmp_path)


def _verify(root: Path, capsys) -> tuple[int, str]:
    rc = cli_verify(root)
    return rc, capsys.readouterr().out


def _artifact(root: Path, stage: str = "prefill") -> Path:
    return layout.artifact_path(root, MACHINE, stage)


# ------------------------------------------------------------------ what is kept


def test_a_measured_version_is_kept_with_its_line_and_a_derived_one_is_not(root, capsys):
    reg = Register(root, MACHINE)
    assert [(e["stage"], e["version"]) for e in reg.entries()] == [
        ("prefill", 1), ("decode", 1), ("prefill", 2)]
    for e, seed in zip(reg.entries(), (11, 12, 13), strict=True):
        assert reg.read_copy(e) == _csv(seed)  # every version stays, as measured
        assert reg.version_path(e) == \
            root / f"evidence/{MACHINE}/{e['stage']}/v{e['version']}.csv"
    assert _artifact(root).read_bytes() == _csv(13)
    entry = _write(root, "traffic", 14, inputs=[_artifact(root)])  # derived: no version
    assert entry["version"] is None and len(reg.entries()) == 3
    assert not (root / f"evidence/{MACHINE}/traffic").exists()
    assert _verify(root, capsys) == (0, f"OK {MACHINE}: prefill 2, decode 1 versions kept\n")


def test_a_line_is_the_documented_canonical_entry(root):
    line = layout.register_path(root, MACHINE).read_bytes().split(b"\n")[0]
    entry = json.loads(line)
    assert sorted(entry) == ["provenance", "sha256", "stage", "version"]
    assert line == canonical_json(entry) and entry["sha256"] == sha256_bytes(_csv(11))
    sidecar = json.loads(layout.sidecar_path(_artifact(root)).read_bytes())
    assert sidecar["provenance"] == Register(root, MACHINE).latest("prefill")["provenance"]


def test_history_latest_and_entry_name_what_is_missing(root, capsys):
    reg = Register(root, MACHINE)
    assert reg.latest("prefill")["version"] == 2 and reg.latest("model") is None
    with pytest.raises(ValueError, match=r"version=7 of stage 'prefill' .* versions: \[1, 2\]"):
        reg.entry("prefill", 7)
    with pytest.raises(ValueError, match=r"stage='prefil' is not a stage; expected one of"):
        reg.history("prefil")
    assert cli_history(root, MACHINE, "prefill") == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["version", "stage", "created_at", "sha256", "commit", "file"]
    assert [r.split()[0] for r in rows[1:]] == ["1", "2"]
    assert rows[2].endswith(f"evidence/{MACHINE}/prefill/v2.csv")
    assert cli_history(root, MACHINE, "claims") == 1
    assert "derived, not kept: git holds its history" in capsys.readouterr().out
    assert Register(root / "nowhere", MACHINE).entries() == []


def test_concurrent_writes_on_one_key_are_serialised(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), stage, 15, start))
             for stage in ("prefill", "decode")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    reg = Register(tmp_path, MACHINE)
    for stage in ("prefill", "decode"):
        assert [e["version"] for e in reg.history(stage)] == list(range(1, 16))
    assert reg.problems() == []  # results/ holds each stage's latest, as registered


def _write_many(root: str, stage: str, n: int, start) -> None:
    start.wait()
    for i in range(n):
        _write(Path(root), stage, 1000 * (stage == "decode") + i)


# ------------------------------------------------------------------ an honest author's mistakes


def test_an_edited_kept_version_is_named_and_left_out_of_the_series(root, capsys):
    kept = root / f"evidence/{MACHINE}/prefill/v1.csv"
    kept.write_bytes(_csv(99))
    rc, out = _verify(root, capsys)
    assert rc == 1 and f"prefill version 1 of {MACHINE} (evidence/{MACHINE}/prefill/v1.csv) " \
        "was changed after it was registered" in out and "git checkout --" in out
    left_out = kept_versions(root, MACHINE, "prefill").left_out  # (these tables are no
    assert left_out[0].startswith(f"{MACHINE} prefill v1: ")      # prefill tables: v2 is
    assert "was changed after it was registered" in left_out[0]   # left out for that)
    kept.unlink()
    assert "prefill version 1 of" in _verify(root, capsys)[1] and "cannot be read" in \
        kept_versions(root, MACHINE, "prefill").left_out[0]


@pytest.mark.parametrize("mistake", ["edited", "older version put back", "deleted",
                                     "sidecar edited"])
def test_a_results_file_that_is_not_the_latest_version_stops_what_reads_it(root, capsys,
                                                                          mistake):
    artifact = _artifact(root)
    if mistake == "edited":
        artifact.write_bytes(artifact.read_bytes().replace(b"T", b"t", 1))
    elif mistake == "older version put back":
        artifact.write_bytes(_csv(11))
    elif mistake == "deleted":
        artifact.unlink()
    else:
        sidecar = layout.sidecar_path(artifact)
        sidecar.write_text(sidecar.read_text().replace('"seed": 13', '"seed": 12'))
    why = doubt(root, MACHINE, "prefill")
    assert why and f"results/{MACHINE}/prefill.csv" in why and "forcerun prefill" in why
    rc, out = _verify(root, capsys)
    assert rc == 1 and f"FAIL {MACHINE}: results/{MACHINE}/prefill.csv" in out
    if mistake != "deleted":
        with pytest.raises(ValueError, match=r"stage input results/.*/prefill.csv cannot be "
                                             r"used: .*Refusing to compute from it"):
            read_input(root, MACHINE, "prefill", artifact)


def test_a_derived_artifact_computed_from_another_version_is_stale(root, capsys):
    _write(root, "traffic", 20, inputs=[_artifact(root)])
    assert doubt(root, MACHINE, "traffic") is None
    _write(root, "prefill", 21)  # prefill v3: traffic was computed from v2
    why = doubt(root, MACHINE, "traffic")
    assert why == (f"it was computed from another version of results/{MACHINE}/prefill.csv "
                   "than the one there now (from prefill version 2; there now: prefill "
                   "version 3); rerun it")
    rc, out = _verify(root, capsys)
    assert rc == 1 and why in out
    traffic = _artifact(root, "traffic")
    traffic.write_bytes(b"edited\n")
    assert "is not the file its sidecar describes" in doubt(root, MACHINE, "traffic")


def test_a_line_that_is_not_an_entry_is_named_with_the_fix(root, capsys):
    path = layout.register_path(root, MACHINE)
    lines = path.read_bytes().split(b"\n")
    for bad, what in ((b"{not json", "is not a register entry"),
                      (b'{"stage": "prefill"}', "lacks version, sha256, provenance"),
                      (b"\xff\xfe", "is not a register entry")):
        path.write_bytes(b"\n".join([lines[0], bad, *lines[2:]]))
        with pytest.raises(ValueError, match=f"register.jsonl line 2 {what}.*git checkout"):
            Register(root, MACHINE).entries()
        rc, out = _verify(root, capsys)
        assert rc == 1 and "line 2" in out


def test_versions_out_of_order_are_named(root, capsys):
    path = layout.register_path(root, MACHINE)
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], lines[2], lines[1], b""]))  # prefill v2 before
    rc, out = _verify(root, capsys)                                    # decode v1: still in
    assert rc == 0, out                                                # order per stage
    path.write_bytes(b"\n".join([lines[2], lines[0], lines[1], b""]))  # v2 before v1
    rc, out = _verify(root, capsys)
    assert rc == 1 and "prefill version 2 is out of order (expected version 1)" in out


# ------------------------------------------------------------------ git is the witness


@pytest.mark.parametrize("change", ["line edited", "tail deleted", "another host's folder"])
def test_a_register_that_does_not_extend_the_committed_one_is_named_and_not_added_to(
        tmp_path, capsys, change):
    root = three_versions(tmp_path / "a")
    commit(root)
    path = layout.register_path(root, MACHINE)
    if change == "line edited":
        path.write_bytes(path.read_bytes().replace(b'"seed":11', b'"seed":12', 1))
    elif change == "tail deleted":
        path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:2]))
    else:  # a second host of this type ran under the same id; its folders copied over
        other = tmp_path / "b"
        other.mkdir()
        for stage, seed in (("prefill", 101), ("decode", 102)):
            _write(other, stage, seed)
        shutil.copytree(layout.evidence_dir(other, MACHINE), layout.evidence_dir(root, MACHINE),
                        dirs_exist_ok=True)
        shutil.copytree(layout.results_dir(other, MACHINE), layout.results_dir(root, MACHINE),
                        dirs_exist_ok=True)
    rc, out = _verify(root, capsys)
    assert rc == 1 and "is not the register committed at HEAD with lines added" in out
    assert f"git checkout -- evidence/{MACHINE}" in out and "--config machine=" in out
    before = path.read_bytes()
    with pytest.raises(ValueError, match="refusing to add to .*register.jsonl"):
        _write(root, "prefill", 30)
    assert path.read_bytes() == before  # nothing added, nothing lost
    git(root, "checkout", "--", f"evidence/{MACHINE}", f"results/{MACHINE}")
    _write(root, "prefill", 31)  # restored: runs append again, the commit a prefix
    assert _verify(root, capsys)[0] == 0


def test_without_git_a_stage_still_writes_but_verify_could_not_check(root, capsys,
                                                                   monkeypatch):
    monkeypatch.setenv("PATH", str(root / "no-bin"))
    _write(root, "prefill", 40)
    rc, out = _verify(root, capsys)
    assert rc == 1 and "could not check" in out and "git is not on the PATH" in out


def test_git_reads_this_checkout_whatever_git_dir_says(tmp_path, monkeypatch):
    mine, other = tmp_path / "mine", tmp_path / "other"
    for repo, text in ((mine, "mine\n"), (other, "other\n")):
        repo.mkdir()
        (repo / "a.txt").write_text(text)
        commit(repo)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))  # a git hook running `make` sets it
    assert files.git_file(mine, "HEAD", "a.txt") == b"mine\n"
    (mine / "a.txt").write_text("changed\n")
    assert files.git_changed(mine, ["a.txt"]) == {"a.txt"}


def test_git_file_and_git_changed_say_what_git_has(tmp_path):
    assert files.git_file(tmp_path, "HEAD", "a.txt") is None  # not a repository
    git(tmp_path, "init", "-q")
    assert files.git_file(tmp_path, "HEAD", "a.txt") is None  # no commit yet
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("committed\n")
    commit(tmp_path)
    assert files.git_file(tmp_path, "HEAD", "sub/a.txt") == b"committed\n"
    assert files.git_file(tmp_path, "HEAD", "sub/b.txt") is None  # not tracked
    assert files.git_changed(tmp_path / "sub", ["a.txt"]) == set()  # from a subfolder
    (tmp_path / "sub" / "b.txt").write_text("new\n")
    (tmp_path / "sub" / "a.txt").write_text("edited\n")
    assert files.git_changed(tmp_path / "sub", ["."]) == {"a.txt", "b.txt"}
    with pytest.raises(files.CannotCheck, match="cannot change to"):
        files.git_file(tmp_path / "nowhere", "HEAD", "a.txt")
    with pytest.raises(files.CannotCheck):
        files.git_changed(tmp_path.parent / "not-a-repo-at-all", ["a"])


def test_git_state_reads_the_commit_and_whether_code_is_dirty(tmp_path):
    assert git_state(tmp_path) == {"commit": None, "dirty": None}  # not a repository
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "inferlab_code.py").write_text("# the code that ran\n")
    commit(tmp_path)
    head = git(tmp_path, "rev-parse", "HEAD").strip()
    assert git_state(tmp_path) == {"commit": head, "dirty": False}
    _write(tmp_path, "prefill", 1)  # outputs are not code: still clean
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path) == {"commit": head, "dirty": True}


# ------------------------------------------------------------------ killed writes, full disk

_KILLED_CHILD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
import inferlab.evidence.register as prov

real_replace, seen = os.replace, []
def slow_replace(src, dst):
    seen.append(dst)
    if len(seen) == {kill_at}:
        Path({marker!r}).write_text("in replace")
        time.sleep(60)
    real_replace(src, dst)
os.replace = slow_replace
code = Path({root!r}) / "inferlab_code.py"
prov.write_artifact(Path({root!r}), {machine!r}, "prefill", {content!r}, config={{}},
                    code_files=[code], inputs=[], seed=0, command="x", environment={{}})
"""


@pytest.mark.parametrize("kill_at", [1, 2, 3])  # the kept version's, artifact's, sidecar's
def test_a_killed_write_leaves_whole_files_and_the_next_write_goes_on(tmp_path, kill_at,
                                                                       capsys):
    _write(tmp_path, "prefill", 21)
    new = _csv(22)
    marker = tmp_path / "marker"
    script = _KILLED_CHILD.format(repo=str(REPO), kill_at=kill_at, marker=str(marker),
                                  root=str(tmp_path), machine=MACHINE, content=new)
    child = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "the child never reached the replace it was to be killed in"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    reg = Register(tmp_path, MACHINE)
    assert [e["version"] for e in reg.entries()] == [1]  # no line for the killed write
    assert _artifact(tmp_path).read_bytes() in (_csv(21), new)  # old or whole new
    rc, out = _verify(tmp_path, capsys)
    assert rc == 1 and "interrupted" in out  # what it left is named, with the fix
    cli_verify(tmp_path, fix=True)  # --repair removes the temp files; the rest is rerun
    _write(tmp_path, "prefill", 23)  # the next write replaces what was left and goes on
    assert [e["version"] for e in reg.entries()] == [1, 2]
    assert reg.read_copy(reg.latest("prefill")) == _csv(23)
    assert _verify(tmp_path, capsys)[0] == 0
    assert sorted(os.listdir(_artifact(tmp_path).parent)) == ["prefill.csv",
                                                              "prefill.csv.prov.json"]


def test_a_torn_last_line_is_no_entry_and_the_next_write_cuts_it(root, capsys):
    path = layout.register_path(root, MACHINE)
    whole = path.read_bytes()
    path.write_bytes(whole + whole.split(b"\n")[0][:200])  # a kill mid-line
    assert len(Register(root, MACHINE).entries()) == 3
    rc, out = _verify(root, capsys)
    assert rc == 1 and "the last line is torn" in out and "verify --repair" in out
    assert cli_verify(root, fix=True) == 0
    assert "REPAIR" in capsys.readouterr().out and path.read_bytes() == whole
    path.write_bytes(whole + b'{"stage":')
    _write(root, "decode", 50)  # the next write cuts the torn tail first
    assert path.read_bytes().startswith(whole) and len(Register(root, MACHINE).entries()) == 4


def _state(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for folder in (root / "evidence", root / "results") if folder.is_dir()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_full_disk_at_any_point_leaves_register_and_results_as_they_were(tmp_path):
    seen = set()
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        for free_pages in range(10):
            root = disk / "root"
            shutil.rmtree(root, ignore_errors=True)
            (disk / "filler").unlink(missing_ok=True)
            root.mkdir()
            padding = {"padding": "e" * 6000}  # a sidecar and a line of two pages each
            _write(root, "prefill", 1, content=_csv(1) * 40, environment=padding)
            before = _state(root)
            st = os.statvfs(disk)
            (disk / "filler").write_bytes(b"\0" * ((st.f_bavail - free_pages) * st.f_frsize))
            try:
                _write(root, "prefill", 2, content=_csv(2) * 40, environment=padding)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                assert _state(root) == before  # as it was: nothing lost, nothing half
                seen.add("register" if "register.jsonl" in str(exc) else
                         "kept" if "/prefill/v2" in str(exc) else "results")
            else:
                seen.add("written")
                assert [e["version"] for e in Register(root, MACHINE).entries()] == [1, 2]
            assert Register(root, MACHINE).problems() == []
    assert {"kept", "results", "written"} <= seen, seen


@pytest.mark.parametrize("short", ["half then ENOSPC", "no progress"])
def test_a_short_register_write_is_undone(root, monkeypatch, short):
    before = _state(root)
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
        _write(root, "prefill", 60)
    monkeypatch.undo()
    assert _state(root) == before and Register(root, MACHINE).problems() == []


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


def test_durable_append_adds_whole_lines_only(tmp_path):
    path = tmp_path / "r.jsonl"
    files.durable_append(path, b"a\n")
    files.durable_append(path, b"b\n")
    with pytest.raises(ValueError, match="must end with a newline"):
        files.durable_append(path, b"c")
    assert path.read_bytes() == b"a\nb\n"


def test_atomic_write_leaves_no_temp_file_when_it_fails(tmp_path, monkeypatch):
    target = tmp_path / "a.csv"
    target.write_bytes(b"old\n")
    monkeypatch.setattr(files.os, "fsync", lambda fd: (_ for _ in ()).throw(
        OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError, match="I/O error"):
        files.atomic_write(target, b"new\n")
    assert target.read_bytes() == b"old\n" and os.listdir(tmp_path) == ["a.csv"]


# ------------------------------------------------------------------ provenance


def test_canonical_json_is_compact_sorted_ascii_and_names_a_non_finite_number():
    assert canonical_json({"b": 1, "a": "é"}) == b'{"a":"\\u00e9","b":1}'
    with pytest.raises(ValueError, match=r"obj\['x'\]\[1\]=nan: NaN and infinity"):
        canonical_json({"x": [1.0, float("nan")]})
    with pytest.raises(ValueError, match="not JSON data"):
        canonical_json({"x": object()})
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1})


def test_code_hash_sees_edits_and_renames_and_names_a_missing_file(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    first = code_hash([a], tmp_path)
    a.write_text("x = 2\n")
    edited = code_hash([a], tmp_path)
    assert edited != first
    a.rename(tmp_path / "b.py")  # the same bytes under another name: another code
    assert code_hash([tmp_path / "b.py"], tmp_path) != edited
    with pytest.raises(ValueError, match=r"file '.*nope.py' does not exist"):
        code_hash([tmp_path / "nope.py"], tmp_path)


@pytest.mark.parametrize(("change", "message"), [
    ({"content": "text"}, "content must be bytes"),
    ({"seed": 1.0}, "seed=1.0 must be an int"),
    ({"command": " "}, "command=' ' must be the command line"),
    ({"environment": None}, "environment=None must be a dict"),
])
def test_write_artifact_names_a_bad_argument_and_writes_nothing(tmp_path, change, message):
    args = {"content": b"T\n1\n", "config": {}, "code_files": [], "inputs": [], "seed": 0,
            "command": "x", "environment": {}} | change
    with pytest.raises(ValueError, match=message):
        write_artifact(tmp_path, MACHINE, "prefill", **args)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stage", list(STAGES))
def test_every_stage_writes_a_sidecar_its_schema_accepts(tmp_path, stage):
    """The code that computed an artifact and the bookkeeping that ran around it are
    hashed into its sidecar apart."""
    books = tmp_path / "register.py"
    books.write_text("MESSAGE = 'a message'\n")
    _write(tmp_path, stage, 1, bookkeeping=[books])
    sidecar = json.loads(layout.sidecar_path(_artifact(tmp_path, stage)).read_bytes())
    schema = json.loads((REPO / "schemas" / "sidecar.schema.json").read_text())
    errors = list(Draft202012Validator(schema).iter_errors(sidecar))
    assert errors == []
    assert sidecar["artifact"] == STAGES[stage].artifact
    prov = sidecar["provenance"]
    assert prov["code_files"] == {"inferlab_code.py": sha256_bytes(b"# the code that ran\n")}
    assert prov["bookkeeping_files"] == {"register.py": sha256_bytes(b"MESSAGE = 'a message'\n")}
    assert prov["bookkeeping_sha256"] != prov["code_sha256"]
    assert bool(Register(tmp_path, MACHINE).entries()) == STAGES[stage].measured


def test_sidecar_bytes_are_sorted_indented_ascii_with_a_newline():
    data = sidecar_bytes("prefill", "prefill.csv", b"x", {"stage": "prefill", "z": "é"})
    assert data.endswith(b"}\n") and data.isascii()
    assert data == (json.dumps(json.loads(data), sort_keys=True, indent=2) + "\n").encode()


TEXT = st.text(max_size=40)  # any code point, lone surrogates too (argv has them)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=TEXT.filter(str.strip),  # a blank command line is refused, rightly
       value=TEXT, cpu=TEXT, name=TEXT.filter(lambda t: "/" not in t
                                              and t not in ("", ".", "..")))
def test_any_text_in_every_free_text_field_survives_one_line(command, value, cpu, name):
    """A path, command, config value or CPU name with a line break of any kind (U+2028,
    \\x85, \\r), a lone surrogate or a NUL is escaped: the register stays one line a version."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        try:
            code = root / f"c{name}.py"
            code.write_text("x = 1\n")
        except (OSError, ValueError):  # a name this file system refuses (e.g. a NUL)
            code = root / "c.py"
            code.write_text("x = 1\n")
        config = {"seed": 0, value: [value], "grid": value}
        entry = write_artifact(root, MACHINE, "probe", b"{}\n", config=config,
                               code_files=[code], inputs=[], seed=0, command=command,
                               environment={"cpu": cpu, "machine": value})
        register = Register(root, MACHINE)
        assert layout.register_path(root, MACHINE).read_bytes().isascii()
        assert register.entries() == [entry] and register.problems() == []
        sidecar = layout.sidecar_path(layout.artifact_path(root, MACHINE, "probe"))
        assert json.loads(sidecar.read_bytes())["provenance"] == entry["provenance"]


def test_a_derived_file_name_the_stage_does_not_declare_makes_no_path():
    with pytest.raises(ValueError, match=r"'\.\./\.\./etc/x' is not a file stage 'manuscript' "
                                         r"derives"):
        layout.derived_path("/r", MACHINE, "manuscript", "../../etc/x")
