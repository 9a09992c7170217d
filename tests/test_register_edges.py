"""The register's reading, retaining, anchoring and repairing, at their edges (issue 14):
what each error says, what a torn tail is, how the anchor counts, what retain rewrites."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.evidence import upkeep
from inferlab.evidence.provenance import write_artifact
from inferlab.evidence.register import Anchor, Problem, Register
from tests.pipeline_repo import git
from tests.test_register import MACHINE, three_versions

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """prefill v1, decode v1, prefill v2 on MACHINE."""
    return three_versions(tmp_path)


def _committed(root: Path) -> Path:
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "evidence")
    return root


def test_a_corrupt_middle_line_is_named_with_what_to_run(root):
    path = layout.register_path(root, MACHINE)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=(
            rf"^{path} line 2 is not valid JSON \(Expecting property name enclosed in double "
            r"quotes\); `inferlab verify` says what else is wrong$")):
        Register(root, MACHINE).entries()


def test_a_torn_last_line_is_named_with_the_repair(root):
    path = layout.register_path(root, MACHINE)
    path.write_text(path.read_text() + '{"seq": 3')
    with pytest.raises(ValueError, match=(
            rf"^{path} line 4 is not valid JSON \(Expecting ',' delimiter\); `inferlab verify "
            r"--repair` removes a torn final line$")):
        Register(root, MACHINE).entries()


def test_a_committed_line_that_is_not_utf8_is_compared_not_a_crash(root):
    path = layout.register_path(root, MACHINE)
    good = path.read_bytes()
    path.write_bytes(good + b"\xff\xfe\n")
    _committed(root)
    path.write_bytes(good + b"{}\n")
    anchor = Register(root, MACHINE).anchor()
    assert (anchor.committed, anchor.working) == (4, 4)
    assert len(anchor.problems) == 1
    assert anchor.problems[0].message.startswith("line 4 differs from the committed register")


def test_history_latest_and_entry_name_what_is_missing(root):
    reg = Register(root, MACHINE)
    assert [e["version"] for e in reg.history("prefill")] == [1, 2]
    assert [e["seq"] for e in reg.history()] == [0, 1, 2]
    assert reg.latest("traffic") is None
    assert reg.latest("decode")["seq"] == 1
    with pytest.raises(ValueError, match=r"^stage='x' is not a stage; expected one of \['"):
        reg.history("x")
    with pytest.raises(ValueError, match=(r"^version=3 of stage 'prefill' is not in the register "
                                          rf"of '{MACHINE}'; registered versions: \[1, 2\]$")):
        reg.entry("prefill", 3)
    with pytest.raises(ValueError, match="of stage 'traffic' .*registered versions: none$"):
        reg.entry("traffic", 1)
    assert reg.entry("prefill", 2) == reg.latest("prefill")
    assert reg.entry("decode", 1)["seq"] == 1  # the stage's version 1, not another's


def test_a_register_that_does_not_exist_is_empty(tmp_path):
    reg = Register(tmp_path, MACHINE)
    assert (reg.entries(), upkeep.torn_tail(tmp_path, MACHINE), reg.verify(),
            reg.n_copies()) == ([], b"", [], 0)
    assert reg.anchor() == Anchor(None, 0, [])


@pytest.mark.parametrize(("data", "tail"), [
    (b"", b""), (b"a\n", b""), (b"a\nbc", b"bc"), (b"only part", b"only part"),
    (b"a\n\n", b"")])
def test_the_torn_tail_is_what_follows_the_last_newline(tmp_path, data, tail):
    reg = Register(tmp_path, MACHINE)
    reg.dir.mkdir(parents=True)
    reg.path.write_bytes(data)
    assert upkeep.torn_tail(tmp_path, MACHINE) == tail


@pytest.mark.parametrize("tail", [b'{"seq": 0', b"[1]", b'{"entry_hash": "x"}', b"\xff\xfe"])
def test_cut_removes_a_tail_that_is_not_a_whole_entry(root, tail):
    path = layout.register_path(root, MACHINE)
    whole = path.read_bytes()
    path.write_bytes(whole + tail)
    assert upkeep.cut_torn_tail(root, MACHINE) == tail
    assert path.read_bytes() == whole
    assert upkeep.cut_torn_tail(root, MACHINE) == b""  # nothing left to cut
    assert path.read_bytes() == whole


def test_cut_of_a_register_that_is_one_torn_line(tmp_path):
    reg = Register(tmp_path, MACHINE)
    reg.dir.mkdir(parents=True)
    reg.path.write_bytes(b'{"seq": 0, "sta')
    assert upkeep.cut_torn_tail(tmp_path, MACHINE) == b'{"seq": 0, "sta'
    assert reg.path.read_bytes() == b""


def test_retain_is_idempotent_and_rewrites_a_modified_copy(tmp_path):
    reg = Register(tmp_path, MACHINE)
    sha = reg.retain(b"data\n")
    copy = reg.copy_path(sha)
    assert copy == tmp_path / "evidence" / MACHINE / "objects" / sha
    before = copy.stat().st_ino
    assert reg.retain(b"data\n") == sha and copy.stat().st_ino == before  # not rewritten
    copy.write_bytes(b"changed\n")
    assert reg.retain(b"data\n") == sha and copy.read_bytes() == b"data\n"
    with pytest.raises(ValueError, match=r"^sha256='\.\./x' is not a sha256: expected 64 "
                                         "lowercase hex digits$"):
        reg.copy_path("../x")
    with pytest.raises(ValueError, match="is not a sha256"):
        reg.copy_path(sha.upper())


def test_the_lock_is_the_register_folder_and_leaves_no_file(tmp_path):
    """A lock file could be deleted while a write holds it (issue 35); the folder is the
    lock now, and nothing is created in it for the lock's sake."""
    reg = Register(tmp_path, MACHINE)
    reg.append("prefill", "p", reg.retain(b"a"), reg.retain(b"{}"), {})
    assert sorted(p.name for p in reg.dir.iterdir()) == [layout.OBJECTS_DIR, layout.REGISTER_FILE]


def test_the_unanchored_count():
    problem = Problem(MACHINE, "x", "y")
    assert Anchor(None, 3, []).unanchored == 3
    assert Anchor(0, 3, []).unanchored == 3
    assert Anchor(2, 5, []).unanchored == 3
    assert Anchor(5, 5, []).unanchored == 0
    assert Anchor(2, 5, [problem]).unanchored == 0
    assert str(problem) == f"{MACHINE}: x: y"


def test_the_anchor_counts_committed_and_working_entries(root):
    _committed(root)
    assert Register(root, MACHINE).anchor() == Anchor(3, 3, [])
    three_versions(root)  # three more entries, not committed
    assert Register(root, MACHINE).anchor() == Anchor(3, 6, [])


def test_a_rewritten_committed_line_is_named(root):
    _committed(root)
    path = layout.register_path(root, MACHINE)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1].replace('"seq":1', '"seq":1 '), lines[2]])
                    + "\n")
    rel = f"evidence/{MACHINE}/register.jsonl"
    assert Register(root, MACHINE).anchor() == Anchor(3, 3, [Problem(
        MACHINE, "register.jsonl (committed at HEAD: 3 entries)",
        f"line 2 differs from the committed register: history rewritten (`git diff -- {rel}` "
        "shows how)")])


def test_a_deleted_committed_tail_is_named(root):
    _committed(root)
    path = layout.register_path(root, MACHINE)
    path.write_text(path.read_text().splitlines()[0] + "\n")
    rel = f"evidence/{MACHINE}/register.jsonl"
    assert Register(root, MACHINE).anchor() == Anchor(3, 1, [Problem(
        MACHINE, "register.jsonl (committed at HEAD: 3 entries)",
        f"the working register has 1 entries: entries 2-3 were deleted (a tail deletion or "
        f"rollback); `git checkout -- {rel}` restores them")])


def test_the_anchor_is_found_from_a_subfolder_root(tmp_path):
    """The register is looked up relative to the root, also when the root is not the top
    of the git repository."""
    root = tmp_path / "project"
    root.mkdir()
    three_versions(root)
    _committed(tmp_path)
    assert Register(root, MACHINE).anchor() == Anchor(3, 3, [])


_ASCII_CHILD = """
import locale, sys
sys.path.insert(0, {repo!r})
assert locale.getpreferredencoding(False) != "UTF-8", locale.getpreferredencoding(False)
from inferlab.evidence.register import Register
from inferlab.evidence.trust import doubt
print(Register({root!r}, {key!r}).verify(), doubt({root!r}, {key!r}, "prefill"))
"""


def test_the_register_reads_the_same_under_an_ascii_locale(tmp_path):
    """Register lines and sidecars are UTF-8 whatever the machine's locale says."""
    root = tmp_path
    code = root / "inferlab_code.py"
    code.write_text("# the code that ran\n")
    write_artifact(root, MACHINE, "prefill", b"T\n1\n", config={"note": "Größe"},
                   code_files=[code], inputs=[], seed=0, command="x", environment={})
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0"}
    child = subprocess.run([sys.executable, "-c", _ASCII_CHILD.format(
        repo=str(REPO), root=str(root), key=MACHINE)], env=env, capture_output=True,
        text=True, check=False)
    assert (child.returncode, child.stdout.strip()) == (0, "[] None"), child.stderr


def test_a_register_git_cannot_read_is_unchecked_and_verify_fails_closed(tmp_path,
                                                                         monkeypatch):
    """No git (or git refusing the repository): the anchor says why it is unchecked, and
    verify reports it as a problem of that key's register, never as anchored."""
    from inferlab.core.files import CannotCheck
    from inferlab.evidence import anchor as anchor_module
    from inferlab.evidence.verify import _anchor_problems

    three_versions(tmp_path)
    register = Register(tmp_path, MACHINE)

    def no_git(*args):
        raise CannotCheck("git is not on the PATH")

    monkeypatch.setattr(anchor_module, "git_file", no_git)
    assert register.anchor() == Anchor(None, 3, [], unchecked="git is not on the PATH")
    assert _anchor_problems(register) == [Problem(
        MACHINE, layout.REGISTER_FILE, "could not check its anchor in git: git is not on the "
        "PATH; a deleted tail or a rollback cannot be ruled out (run verify where git runs "
        "on this repository)")]


def _not_utf8(root: Path, line: int) -> None:
    """Three versions registered, then byte 31 of register line ``line`` (1-based) 0xff."""
    three_versions(root)
    path = layout.register_path(root, MACHINE)
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1][:30] + b"\xff" + lines[line - 1][31:]
    path.write_bytes(b"\n".join(lines))


def test_a_line_that_is_not_utf8_is_one_problem_and_the_lines_after_it_are_checked(tmp_path):
    _not_utf8(tmp_path, 1)
    entries, problems = Register(tmp_path, MACHINE).check_chain()
    assert problems[0] == Problem(MACHINE, f"{layout.REGISTER_FILE} line 1",
                                  "not UTF-8 (byte 0xff at column 31): a corrupt line")
    # line 2 was read: it links to a line that could not be, so it is a problem of its own
    assert [lineno for lineno, _ in entries] == [2, 3]
    assert any(p.location == f"{layout.REGISTER_FILE} line 2" for p in problems[1:])


def test_verify_names_debris_and_repair_removes_it_saying_so(tmp_path, capsys):
    """A temp file a killed write left: verify warns (naming it and the fix), --repair
    removes it and says what it removed."""
    from inferlab.evidence.verify import cli_verify

    three_versions(tmp_path)
    left = layout.results_dir(tmp_path, MACHINE) / ".prefill.csv.123.ab.tmp"
    left.write_bytes(b"half")
    rel = left.relative_to(tmp_path).as_posix()
    cli_verify(tmp_path)
    assert (f"WARN {MACHINE}: {rel}: left by an interrupted write; `inferlab verify "
            "--repair` removes it") in capsys.readouterr().out.splitlines()
    cli_verify(tmp_path, fix=True)
    out = capsys.readouterr().out.splitlines()
    assert f"REPAIR {MACHINE}: removed {rel} (left by an interrupted write)" in out
    assert not left.exists() and not any(line.startswith("WARN") for line in out)


def test_reading_entries_past_a_line_that_is_not_utf8_names_it(tmp_path):
    _not_utf8(tmp_path, 2)
    with pytest.raises(ValueError, match=r"line 2 is not UTF-8 \(byte 0xff at column 31"):
        Register(tmp_path, MACHINE).entries()
