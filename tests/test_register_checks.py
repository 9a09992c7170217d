"""Each check of the evidence register tested alone (issue 14).

A forgery here has exactly one fault, hashed and chained by the test itself (from the
documented canonical form, not by the code under test), so each test names the one
check that must catch it and the exact problem it reports: removing any single check,
or changing what it says, fails a test. Also: a fixed entry whose hash is known, the
registers committed in this repository verifying clean, ``verify`` over several results
keys, and ``Register.append`` refusing what is not retained.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.core.files import canonical_json
from inferlab.core.pipeline import STAGES
from inferlab.evidence import trust
from inferlab.evidence.entries import hash_matches
from inferlab.evidence.provenance import write_artifact
from inferlab.evidence.register import Problem, Register, entry_hash
from inferlab.evidence.verify import cli_verify
from inferlab.presentation import audit
from tests.test_register import MACHINE, _csv, three_versions

REPO = Path(__file__).resolve().parents[1]
OTHER = "cpu-other-4t@smoke"
PREV = ("prev_hash does not link to the previous line: an entry before it was deleted, "
        "edited or reordered")
EDITED = "entry_hash does not match the entry's content: entry edited"
SIDECAR = "entry disagrees with its retained sidecar (sha256 or provenance edited)"
MODIFIED = "modified after it was registered (or its write was interrupted)"


def canonical(obj) -> bytes:
    """The documented canonical form (docs/contracts.md), written out independently."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def independent_hash(entry: dict) -> str:
    return hashlib.sha256(canonical({k: v for k, v in entry.items()
                                     if k != "entry_hash"})).hexdigest()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """prefill v1, decode v1, prefill v2 on MACHINE."""
    return three_versions(tmp_path)


def _entries(root: Path, key: str = MACHINE) -> list[dict]:
    return [json.loads(line) for line in layout.register_path(root, key).read_text()
            .splitlines()]


def forge_line(root: Path, lineno: int, edit: Callable[[dict], None],
               chain: bool = True) -> None:
    """Edit entry ``lineno`` (1-based); with ``chain`` rehash it and relink every later
    line, so the edit is the one fault (its own prev_hash is left as the edit set it)."""
    entries = _entries(root)
    edit(entries[lineno - 1])
    if chain:
        for i in range(lineno - 1, len(entries)):
            if i > lineno - 1:
                entries[i]["prev_hash"] = entries[i - 1]["entry_hash"]
            entries[i]["entry_hash"] = independent_hash(entries[i])
    layout.register_path(root, MACHINE).write_bytes(
        b"".join(canonical(e) + b"\n" for e in entries))


def line(n: int, message: str) -> Problem:
    return Problem(MACHINE, f"register.jsonl line {n}", message)


def results(name: str, message: str) -> Problem:
    return Problem(MACHINE, f"results/{MACHINE}/{name}", message)


# ------------------------------------------------------------------ the hash, pinned

FIXED = {"seq": 0, "stage": "prefill", "version": 1, "path": "results/cpu-x/prefill.csv",
         "sha256": "a" * 64, "sidecar_sha256": "b" * 64,
         "provenance": {"seed": 7, "config": {"T": [512, 1024], "d": 64}, "note": "Größe"},
         "prev_hash": "0" * 64}
# the canonical form of FIXED as contracts.md defines it: keys sorted at every level, no
# whitespace, every non-ASCII character \u-escaped (issue 23: a raw U+2028 split a line);
# and its sha256, computed once by hand from it
FIXED_TEXT = ('{"path":"results/cpu-x/prefill.csv","prev_hash":"' + "0" * 64 + '",'
              '"provenance":{"config":{"T":[512,1024],"d":64},"note":"Gr\\u00f6\\u00dfe",'
              '"seed":7},"seq":0,"sha256":"' + "a" * 64 + '","sidecar_sha256":"' + "b" * 64
              + '","stage":"prefill","version":1}')
FIXED_HASH = "55e7fada951c322e2e7244cef4d98aae205d5589a04344109358e32ca42217c4"
# the same entry hashed as registers written before issue 23 did (raw UTF-8): still valid
LEGACY_HASH = "2f9a093c8751f55f1947e6691c9e4eabc3f6530bc49b4aa667e81e560ab8d777"


def test_the_documented_canonical_form_of_a_fixed_entry():
    assert FIXED_HASH == hashlib.sha256(FIXED_TEXT.encode("utf-8")).hexdigest()
    assert canonical_json(FIXED) == FIXED_TEXT.encode("utf-8")
    assert entry_hash(FIXED) == FIXED_HASH
    assert entry_hash({**FIXED, "entry_hash": "c" * 64}) == FIXED_HASH  # itself excluded
    for field in ("provenance", "path", "prev_hash"):  # every other field counts
        assert entry_hash({k: v for k, v in FIXED.items() if k != field}) != FIXED_HASH
    assert hash_matches({**FIXED, "entry_hash": FIXED_HASH})
    assert hash_matches({**FIXED, "entry_hash": LEGACY_HASH})
    assert not hash_matches({**FIXED, "note": "Grosse", "entry_hash": LEGACY_HASH})


def test_append_writes_the_documented_line(tmp_path):
    reg = Register(tmp_path, MACHINE)
    sha, side = reg.retain(b"T\n1\n"), reg.retain(b'{"x": 1}\n')
    provenance = {"seed": 1, "note": "Größe", "config": {"b": [1, 2], "a": None}}
    reg.append("prefill", f"results/{MACHINE}/prefill.csv", sha, side, provenance)
    written = layout.register_path(tmp_path, MACHINE).read_bytes()
    expected = {"seq": 0, "stage": "prefill", "version": 1,
                "path": f"results/{MACHINE}/prefill.csv", "sha256": sha,
                "sidecar_sha256": side, "provenance": provenance, "prev_hash": "0" * 64}
    expected["entry_hash"] = independent_hash(expected)
    assert written == canonical(expected) + b"\n"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=False)


def committed_evidence(tmp_path: Path) -> list[str]:
    """evidence/ and results/ as committed at HEAD, unpacked under tmp_path; their keys."""
    top = _git("rev-parse", "--show-toplevel")
    if top.returncode != 0:
        pytest.skip("not a git checkout: no committed register to check")
    top_dir = top.stdout.decode().strip()
    listed = subprocess.run(["git", "-C", top_dir, "ls-tree", "--name-only", "HEAD",
                             "evidence/"], capture_output=True, text=True, check=True)
    keys = [Path(p).name for p in listed.stdout.split()]
    if not keys:
        pytest.skip("no evidence committed at HEAD")
    archive = tmp_path / "head.tar"
    subprocess.run(["git", "-C", top_dir, "archive", "-o", str(archive), "HEAD", "evidence",
                    *(["results"] if (Path(top_dir) / "results").exists() else [])],
                   check=True, capture_output=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "head", filter="data")
    return keys


def test_the_committed_registers_verify_clean(tmp_path):
    keys = committed_evidence(tmp_path)
    head = tmp_path / "head"
    for key in keys:
        lines = layout.register_path(head, key).read_bytes().splitlines()
        assert lines, f"evidence/{key}/register.jsonl is committed empty"
        prev = "0" * 64
        for n, raw in enumerate(lines, start=1):
            entry = json.loads(raw)
            assert raw == canonical(entry), f"{key} line {n} is not in canonical form"
            assert entry["entry_hash"] == independent_hash(entry), f"{key} line {n}"
            assert entry["prev_hash"] == prev, f"{key} line {n}"
            prev = entry["entry_hash"]
        assert Register(head, key).verify() == [], key
        for stage in STAGES:
            if layout.artifact_path(head, key, stage).is_file():
                assert trust.doubt(head, key, stage) is None, (key, stage)


# ------------------------------------------------------------------ one fault, one check


def test_a_broken_link_alone_is_the_prev_hash_check(root):
    forge_line(root, 3, lambda e: e.update(prev_hash="f" * 64))
    assert Register(root, MACHINE).verify() == [line(3, PREV)]
    assert trust.doubt(root, MACHINE, "decode") == \
        f"the evidence register of {MACHINE} is broken: register.jsonl line 3: {PREV}"


def test_an_edit_without_rehash_alone_is_the_entry_hash_check(root):
    forge_line(root, 2, lambda e: e.update(path="results/elsewhere.csv"), chain=False)
    elsewhere = line(2, f"path results/elsewhere.csv is not this key's (results/{MACHINE}/"
                        "decode.csv): an entry of another results key copied here")
    assert Register(root, MACHINE).verify() == [line(2, EDITED), elsewhere]
    forge_line(root, 3, lambda e: e.update(entry_hash="e" * 64), chain=False)
    assert Register(root, MACHINE).verify() == [line(2, EDITED), elsewhere, line(3, EDITED)]


@pytest.mark.parametrize("stored", ["keep", ""])
def test_a_nan_in_a_line_is_an_edit(root, stored):
    """NaN has no canonical form, so no hash matches it, not even an empty one."""
    entries = _entries(root)
    entries[2]["provenance"]["seed"] = float("nan")
    if stored == "":
        entries[2]["entry_hash"] = ""
    layout.register_path(root, MACHINE).write_text(
        "".join(json.dumps(e) + "\n" for e in entries))
    assert line(3, EDITED) in Register(root, MACHINE).verify()


def test_after_a_wrong_seq_the_count_goes_on_from_it(root):
    forge_line(root, 2, lambda e: e.update(seq=5))
    assert Register(root, MACHINE).verify() == [
        line(2, "seq 5 where 1 was expected: entries deleted or reordered"),
        line(3, "seq 2 where 6 was expected: entries deleted or reordered")]


@pytest.mark.parametrize(("lineno", "edit", "message"), [
    (3, {"seq": 7}, "seq 7 where 2 was expected: entries deleted or reordered"),
    (2, {"seq": "1"}, "seq '1' where 1 was expected: entries deleted or reordered"),
    (3, {"version": 3}, "version 3 of prefill where 2 was expected: versions deleted or "
                        "reordered"),
    (2, {"version": 2}, "version 2 of decode where 1 was expected: versions deleted or "
                        "reordered"),
])
def test_a_wrong_counter_alone_is_its_check(root, lineno, edit, message):
    forge_line(root, lineno, lambda e: e.update(edit))
    assert Register(root, MACHINE).verify() == [line(lineno, message)]


def test_a_version_that_is_not_a_number_does_not_count(root):
    forge_line(root, 1, lambda e: e.update(version="1"))
    assert Register(root, MACHINE).verify() == [
        line(1, "version '1' of prefill where 1 was expected: versions deleted or reordered"),
        line(3, "version 2 of prefill where 1 was expected: versions deleted or reordered")]


@pytest.mark.parametrize("stage", ["bogus", 5])
def test_an_unknown_stage_is_named(root, stage):
    forge_line(root, 2, lambda e: e.update(stage=stage))
    assert Register(root, MACHINE).verify() == [
        line(2, f"stage {stage!r} is not a stage; expected one of {list(STAGES)}"),
        results("decode.csv", "not in the register: no version of decode is registered"),
        results("decode.csv.prov.json",
                "not in the register: no version of decode is registered")]


def test_a_field_that_is_not_a_sha256_is_named(root):
    forge_line(root, 2, lambda e: e.update(sidecar_sha256="XYZ"))
    assert Register(root, MACHINE).verify() == [
        line(2, "sidecar_sha256='XYZ' is not a sha256"),
        results("decode.csv.prov.json", f"matches no registered version of decode: {MODIFIED}")]


def test_a_bad_sha256_field_does_not_hide_a_missing_sidecar_copy(root):
    side = _entries(root)[2]["sidecar_sha256"]
    Register(root, MACHINE).copy_path(side).unlink()
    forge_line(root, 3, lambda e: e.update(sha256="XYZ"))
    problems = Register(root, MACHINE).verify()
    assert problems[:2] == [
        line(3, "sha256='XYZ' is not a sha256"),
        Problem(MACHINE, f"objects/{side[:12]}…",
                "missing: the retained sidecar_sha256 copy of register.jsonl line 3")]


def test_a_sidecar_sha256_that_is_not_text_is_named(root):
    forge_line(root, 2, lambda e: e.update(sidecar_sha256=7))
    assert Register(root, MACHINE).verify() == [
        line(2, "sidecar_sha256=7 is not a sha256"),
        results("decode.csv.prov.json", f"matches no registered version of decode: {MODIFIED}")]


def test_an_entry_naming_another_artifact_disagrees_with_its_sidecar(root):
    v1 = _entries(root)[0]["sha256"]  # prefill version 1's artifact, also retained
    forge_line(root, 3, lambda e: e.update(sha256=v1))
    assert Register(root, MACHINE).verify() == [
        line(3, SIDECAR),
        results("prefill.csv", f"matches no registered version of prefill: {MODIFIED}")]


def test_a_line_missing_a_field_is_not_an_entry(root):
    forge_line(root, 3, lambda e: e.pop("path"), chain=False)
    assert Register(root, MACHINE).verify() == [
        line(3, "not a register entry: missing ['path']"),
        results("prefill.csv", f"matches no registered version of prefill: {MODIFIED}"),
        results("prefill.csv.prov.json",
                f"matches no registered version of prefill: {MODIFIED}")]


def test_the_lines_after_one_that_is_not_an_entry_are_still_checked(root):
    forge_line(root, 2, lambda e: e.pop("path"), chain=False)
    assert Register(root, MACHINE).verify() == [
        line(2, "not a register entry: missing ['path']"),
        line(3, PREV),
        line(3, "seq 2 where 1 was expected: entries deleted or reordered"),
        results("decode.csv", "not in the register: no version of decode is registered"),
        results("decode.csv.prov.json",
                "not in the register: no version of decode is registered")]


def test_a_line_that_is_not_an_object_misses_every_field(root):
    path = layout.register_path(root, MACHINE)
    path.write_text(path.read_text() + "[1, 2]\n")
    assert Register(root, MACHINE).verify() == [
        line(4, "not a register entry: missing ['seq', 'stage', 'version', 'path', 'sha256', "
                "'sidecar_sha256', 'provenance', 'prev_hash', 'entry_hash']")]


def test_a_garbage_line_is_named_and_skipped(root):
    path = layout.register_path(root, MACHINE)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{garbage", *lines[1:]]) + "\n")
    assert Register(root, MACHINE).verify() == [
        line(2, "not valid JSON (Expecting property name enclosed in double quotes): a "
                "corrupt or truncated line")]  # and the lines around it still link


def test_an_entry_that_disagrees_with_its_sidecar_alone_is_the_sidecar_check(root):
    forge_line(root, 3, lambda e: e["provenance"].update(seed=99))
    assert Register(root, MACHINE).verify() == [line(3, SIDECAR)]


def test_a_retained_sidecar_that_is_not_json_is_named(root):
    sha = _entries(root)[2]["sha256"]  # the artifact's copy: CSV, not JSON
    forge_line(root, 3, lambda e: e.update(sidecar_sha256=sha))
    assert Register(root, MACHINE).verify() == [
        line(3, f"retained sidecar {sha[:12]}… is not JSON"),
        results("prefill.csv.prov.json",
                f"matches no registered version of prefill: {MODIFIED}")]


def test_a_retained_sidecar_that_is_not_an_object_disagrees(root):
    sha = Register(root, MACHINE).retain(b"[1]\n")
    forge_line(root, 3, lambda e: e.update(sidecar_sha256=sha))
    assert line(3, SIDECAR) in Register(root, MACHINE).verify()


def test_a_modified_copy_is_named_once_not_as_a_sidecar_too(root):
    sha = _entries(root)[1]["sidecar_sha256"]
    copy = Register(root, MACHINE).copy_path(sha)
    copy.write_bytes(copy.read_bytes() + b" ")
    assert Register(root, MACHINE).verify() == [
        Problem(MACHINE, f"objects/{sha[:12]}…",
                "content does not match its sha256 name: copy modified")]


@pytest.mark.parametrize(("n", "kind"), [(2, "sha256"), (3, "sidecar_sha256")])
def test_a_missing_copy_is_named_with_its_line(root, n, kind):
    sha = _entries(root)[n - 1][kind]
    Register(root, MACHINE).copy_path(sha).unlink()
    assert Register(root, MACHINE).verify() == [
        Problem(MACHINE, f"objects/{sha[:12]}…",
                f"missing: the retained {kind} copy of register.jsonl line {n}")]


def test_hidden_files_and_folders_in_objects_are_not_copies(root):
    objects = layout.objects_dir(root, MACHINE)
    (objects / ".prefill.csv.123.tmp").write_bytes(b"half")
    (objects / "sub").mkdir()
    assert Register(root, MACHINE).verify() == []
    assert Register(root, MACHINE).n_copies() == 6
    assert Register(tmp := root / "none", MACHINE).n_copies() == 0 and not tmp.exists()


# ------------------------------------------------------------------ results files


def test_a_results_file_swapped_for_another_stages_registered_content(root):
    decode = Register(root, MACHINE).latest("decode")
    prefill = layout.artifact_path(root, MACHINE, "prefill")
    prefill.write_bytes(Register(root, MACHINE).copy_path(decode["sha256"]).read_bytes())
    assert Register(root, MACHINE).verify() == [
        results("prefill.csv", f"matches no registered version of prefill: {MODIFIED}")]
    assert trust.doubt(root, MACHINE, "prefill") == \
        f"results/{MACHINE}/prefill.csv matches no registered version of prefill: {MODIFIED}"


@pytest.mark.parametrize(("name", "message"), [
    ("prefill.csv", "missing, but the register has version 2 of prefill: deleted, or its "
                    "rerun was interrupted; rerun the 'prefill' stage"),
    ("decode.csv.prov.json", "missing, but the register has version 1 of decode: deleted, "
                             "or its rerun was interrupted; rerun the 'decode' stage")])
def test_a_deleted_results_file_is_named(root, name, message):
    (layout.results_dir(root, MACHINE) / name).unlink()
    assert Register(root, MACHINE).verify() == [results(name, message)]
    stage = name.split(".")[0]
    assert trust.doubt(root, MACHINE, stage) == f"results/{MACHINE}/{name} {message}"


def test_an_older_version_put_back_is_named_with_both_versions(root):
    v1 = Register(root, MACHINE).entry("prefill", 1)
    prefill = layout.artifact_path(root, MACHINE, "prefill")
    prefill.write_bytes(Register(root, MACHINE).copy_path(v1["sha256"]).read_bytes())
    assert Register(root, MACHINE).verify() == [results(
        "prefill.csv", "is version 1 of prefill, but the register's latest is version 2: "
                       "rolled back or swapped; rerun the 'prefill' stage")]


def test_an_unregistered_results_file_is_named(root):
    (layout.results_dir(root, MACHINE) / "traffic.csv").write_text("T\n1\n")
    assert Register(root, MACHINE).verify() == [
        results("traffic.csv", "not in the register: no version of traffic is registered")]
    assert trust.doubt(root, MACHINE, "traffic") == \
        f"no version of traffic is in the evidence register of {MACHINE}"


def test_a_registered_sidecar_that_is_not_json_is_doubted(root):
    """A forged entry naming an unreadable sidecar: the chain and the results files agree,
    only trust's reading of the sidecar refuses it."""
    sidecar = layout.sidecar_path(layout.artifact_path(root, MACHINE, "prefill"))
    sidecar.write_bytes(b"\xff not json")
    sha = Register(root, MACHINE).retain(b"\xff not json")
    forge_line(root, 3, lambda e: e.update(sidecar_sha256=sha))
    assert trust.doubt(root, MACHINE, "prefill") == (
        f"results/{MACHINE}/prefill.csv.prov.json disagrees with register version 2 of "
        "prefill (sha256 or provenance): a forged entry")


def test_a_registered_sidecar_for_another_artifact_is_doubted(root):
    """Its provenance is the entry's, only its sha256 names another artifact."""
    reg = Register(root, MACHINE)
    latest = reg.latest("prefill")
    sidecar = layout.sidecar_path(layout.artifact_path(root, MACHINE, "prefill"))
    recorded = json.loads(sidecar.read_text()) | {"sha256": reg.entry("prefill", 1)["sha256"]}
    sidecar.write_text(json.dumps(recorded))
    assert recorded["provenance"] == latest["provenance"]
    forge_line(root, 3, lambda e: e.update(sidecar_sha256=reg.retain(sidecar.read_bytes())))
    assert trust.doubt(root, MACHINE, "prefill") == (
        f"results/{MACHINE}/prefill.csv.prov.json disagrees with register version 2 of "
        "prefill (sha256 or provenance): a forged entry")


# ------------------------------------------------------------------ verify over several keys


def _two_keys(root: Path) -> Path:
    code = root / "inferlab_code.py"
    for stage, seed in (("prefill", 41), ("decode", 42)):
        write_artifact(root, OTHER, stage, _csv(seed), config={}, code_files=[code],
                       inputs=[], seed=seed, command="x", environment={})
    return root


@pytest.mark.parametrize("tampered", [MACHINE, OTHER])
def test_verify_fails_when_any_key_fails_first_or_last(root, capsys, tampered):
    _two_keys(root)
    assert layout.evidence_keys(root) == [OTHER, MACHINE]  # the order verify goes in
    assert cli_verify(root) == 0
    capsys.readouterr()
    artifact = layout.artifact_path(root, tampered, "decode")
    artifact.write_bytes(artifact.read_bytes() + b"1,2\n")
    assert cli_verify(root) == 1
    out = capsys.readouterr().out
    clean = OTHER if tampered == MACHINE else MACHINE
    assert f"FAIL {tampered}: results/{tampered}/decode.csv: matches no registered" in out
    assert f"OK {clean}: " in out and f"OK {tampered}" not in out


def test_a_results_key_without_evidence_is_verified_and_fails(root, capsys):
    lone = layout.results_dir(root, "cpu-lone-1t")
    lone.mkdir(parents=True)
    (lone / "prefill.csv").write_text("T\n1\n")
    assert cli_verify(root) == 1
    out = capsys.readouterr().out
    assert ("FAIL cpu-lone-1t: results/cpu-lone-1t/prefill.csv: not in the register: no "
            "version of prefill is registered") in out
    assert f"OK {MACHINE}: 3 entries, 6 copies" in out


def test_an_empty_results_key_without_evidence_has_nothing_to_doubt(tmp_path, capsys):
    layout.results_dir(tmp_path, "cpu-empty-1t").mkdir(parents=True)
    assert cli_verify(tmp_path) == 0
    assert "OK cpu-empty-1t: 0 entries, 0 copies" in capsys.readouterr().out


# ------------------------------------------------------------------ append refuses


def _retained(tmp_path: Path) -> tuple[Register, str, str]:
    reg = Register(tmp_path, MACHINE)
    return reg, reg.retain(b"T\n1\n"), reg.retain(b'{"x": 1}\n')


@pytest.mark.parametrize("which", ["sha256", "sidecar_sha256"])
def test_append_refuses_a_file_with_no_retained_copy(tmp_path, which):
    reg, sha, side = _retained(tmp_path)
    absent = hashlib.sha256(b"never retained").hexdigest()
    args = {"sha256": sha, "sidecar_sha256": side, which: absent}
    with pytest.raises(ValueError, match=f"^{which}={absent} has no retained copy in "
                                         ".*objects; retain the file before registering it$"):
        reg.append("prefill", "results/x/prefill.csv", provenance={}, **args)
    assert not reg.path.exists()


@pytest.mark.parametrize("which", ["sha256", "sidecar_sha256"])
def test_append_refuses_a_retained_copy_that_was_modified(tmp_path, which):
    reg, sha, side = _retained(tmp_path)
    reg.copy_path(sha if which == "sha256" else side).write_bytes(b"changed\n")
    with pytest.raises(ValueError, match=f"^{which}=[0-9a-f]{{64}}: its retained copy in "
                                         ".*objects is not that file \\(modified\\); retain "
                                         "the file again to register it$"):
        reg.append("prefill", "results/x/prefill.csv", sha, side, {})
    assert not reg.path.exists()


@pytest.mark.parametrize(("args", "message"), [
    (("prefil", "p", None, None, {}), r"^stage='prefil' is not a stage; expected one of \['"),
    (("prefill", "p", None, None, []), r"^provenance=\[\] must be the sidecar's provenance dict$"),
    (("prefill", "p", "ABC", None, {}), "^sha256='ABC' is not a sha256: expected 64 lowercase"),
    (("prefill", "p", "sha", 7, {}), "^sidecar_sha256=7 is not a sha256"),
])
def test_append_names_a_bad_argument(tmp_path, args, message):
    reg, sha, side = _retained(tmp_path)
    stage, path, a, b, prov = args
    a = sha if a == "sha" else a
    with pytest.raises(ValueError, match=message):
        reg.append(stage, path, a if a is not None else sha,
                   b if b is not None else side, prov)
    assert not reg.path.exists()


# ------------------------------------------------------------------ audit


def test_audit_of_an_edited_sidecar_is_a_mismatch(root, capsys):
    sidecar = layout.sidecar_path(layout.artifact_path(root, MACHINE, "prefill"))
    sidecar.write_text(sidecar.read_text().replace('"command"', '"command" ', 1))
    checked = audit.integrity(root, MACHINE, audit.load_evidence(root, MACHINE, "prefill"))
    assert checked["status"] == "MISMATCH"
    assert checked["detail"] == (f"results/{MACHINE}/prefill.csv.prov.json matches no "
                                 f"registered version of prefill: {MODIFIED}")
    untouched = audit.integrity(root, MACHINE, audit.load_evidence(root, MACHINE, "decode"))
    assert untouched["status"] == "sha256 OK"
