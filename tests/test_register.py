"""Tests for the provenance writer and the evidence register.

Every tamper a reader could worry about (edit, delete, reorder, a modified or missing
retained copy, a results file changed after it was registered, a garbage line) must be
found, with its location. Artifacts are seeded random CSV text.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from inferlab.core import layout
from inferlab.core.files import canonical_json, git_state, sha256_bytes, sha256_file
from inferlab.core.pipeline import STAGES
from inferlab.evidence.provenance import code_hash, config_hash, sidecar_bytes, write_artifact
from inferlab.evidence.register import Register
from inferlab.evidence.verify import cli_history, cli_verify

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "schemas"
MACHINE = "cpu-test-2t"


def _csv(seed: int) -> bytes:
    rng = random.Random(seed)
    rows = [f"{rng.randint(1, 8192)},{rng.random():.6f}" for _ in range(5)]
    return ("T,median_ms\n" + "\n".join(rows) + "\n").encode()


def _write(root: Path, stage: str, seed: int) -> dict:
    code = root / "inferlab_code.py"
    if not code.exists():
        code.write_text("# the code that ran\n")
    return write_artifact(root, MACHINE, stage, _csv(seed), config={"seed": seed, "T": [512]},
                          code_files=[code], inputs=[], seed=seed,
                          command=f"python -m inferlab stage {stage}",
                          environment={"torch": "test", "threads": 2})


def full_provenance(stage: str, **fields) -> dict:
    """A provenance with every field its schema requires (schemas/sidecar.schema.json),
    ``fields`` over them: what a hand-made entry needs to be a whole register entry."""
    return {"stage": stage, "machine": MACHINE, "grid": None,
            "created_at": "2025-01-31T12:00:00Z", "git_commit": None, "git_dirty": None,
            "code_sha256": "c" * 64, "code_files": {}, "config_sha256": "d" * 64,
            "config": {}, "environment": {}, "seed": 0, "inputs": {}, "command": "x",
            **fields}


def three_versions(root: Path) -> Path:
    """prefill v1, decode v1, prefill v2."""
    for stage, seed in (("prefill", 11), ("decode", 12), ("prefill", 13)):
        _write(root, stage, seed)
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return three_versions(tmp_path)


def _register_lines(root: Path) -> list[str]:
    return (layout.evidence_dir(root, MACHINE) / layout.REGISTER_FILE).read_text().splitlines()


def _set_register_lines(root: Path, lines: list[str]) -> None:
    path = layout.evidence_dir(root, MACHINE) / layout.REGISTER_FILE
    path.write_text("".join(line + "\n" for line in lines))


# ------------------------------------------------------------------ clean register


def test_append_and_verify_clean(root, capsys):
    reg = Register(root, MACHINE)
    entries = reg.entries()
    assert [e["seq"] for e in entries] == [0, 1, 2]
    assert [(e["stage"], e["version"]) for e in entries] == [("prefill", 1), ("decode", 1),
                                                             ("prefill", 2)]
    assert entries[0]["prev_hash"] == "0" * 64
    assert [e["prev_hash"] for e in entries[1:]] == [e["entry_hash"] for e in entries[:-1]]
    assert reg.verify() == []
    assert cli_verify(root) == 0
    assert f"OK {MACHINE}: 3 entries, 6 copies" in capsys.readouterr().out


def test_every_version_stays_retained(root):
    reg = Register(root, MACHINE)
    v1 = reg.entry("prefill", 1)
    assert reg.copy_path(v1["sha256"]).read_bytes() == _csv(11)
    assert reg.latest("prefill")["sha256"] == sha256_bytes(_csv(13))
    artifact = layout.artifact_path(root, MACHINE, "prefill")
    assert artifact.read_bytes() == _csv(13)
    sidecar = json.loads(layout.sidecar_path(artifact).read_text())
    assert sidecar["sha256"] == sha256_file(artifact)
    assert sidecar["provenance"] == reg.latest("prefill")["provenance"]
    assert reg.copy_path(reg.latest("prefill")["sidecar_sha256"]).read_bytes() == \
        layout.sidecar_path(artifact).read_bytes()


def test_missing_version_names_it(root):
    with pytest.raises(ValueError, match="version=7"):
        Register(root, MACHINE).entry("prefill", 7)


def test_unknown_stage_names_it_and_the_valid_ones(root):
    with pytest.raises(ValueError, match="stage='prefil'.*'prefill'"):
        cli_history(root, MACHINE, "prefil")


def test_history_lists_versions(root, capsys):
    assert cli_history(root, MACHINE, "prefill") == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["version", "stage", "created_at", "sha256", "commit", "path"]
    assert [ln.split()[0] for ln in lines[1:]] == ["1", "2"]
    assert sha256_bytes(_csv(13))[:12] in lines[2]


def test_verify_of_a_machine_without_evidence_fails(tmp_path, capsys):
    assert cli_verify(tmp_path, "cpu-nowhere") == 1
    assert "no evidence for 'cpu-nowhere'" in capsys.readouterr().out


# ------------------------------------------------------------------ tamper detection


def _edit_field(root):
    lines = _register_lines(root)
    entry = json.loads(lines[1])
    entry["provenance"]["seed"] = 999
    lines[1] = json.dumps(entry)
    _set_register_lines(root, lines)
    return "register.jsonl line 2", "edited"


def _edit_last_and_rehash(root):
    from inferlab.evidence.register import entry_hash

    lines = _register_lines(root)
    entry = json.loads(lines[2])
    entry["provenance"]["config"]["T"] = [4096]
    entry["entry_hash"] = entry_hash(entry)
    lines[2] = canonical_json(entry).decode()
    _set_register_lines(root, lines)
    return "register.jsonl line 3", "retained sidecar"


def _delete_middle(root):
    lines = _register_lines(root)
    _set_register_lines(root, [lines[0], lines[2]])
    return "register.jsonl line 2", "deleted"


def _swap(root):
    lines = _register_lines(root)
    _set_register_lines(root, [lines[0], lines[2], lines[1]])
    return "register.jsonl line 2", "reordered"


def _garbage_line(root):
    lines = _register_lines(root)
    _set_register_lines(root, [*lines, '{"seq": 3, "stage": "prefi'])
    return "register.jsonl line 4", "not valid JSON"


def _modify_copy(root):
    sha = Register(root, MACHINE).entry("prefill", 1)["sha256"]
    path = Register(root, MACHINE).copy_path(sha)
    path.write_bytes(path.read_bytes() + b"1,1.0\n")
    return f"objects/{sha[:12]}", "copy modified"


def _delete_copy(root):
    sha = Register(root, MACHINE).entry("decode", 1)["sidecar_sha256"]
    Register(root, MACHINE).copy_path(sha).unlink()
    return f"objects/{sha[:12]}", "missing"


def _modify_result(root):
    artifact = layout.artifact_path(root, MACHINE, "decode")
    artifact.write_bytes(artifact.read_bytes().replace(b",", b";", 1))
    return f"results/{MACHINE}/decode.csv", "modified after it was registered"


@pytest.mark.parametrize("tamper", [_edit_field, _edit_last_and_rehash, _delete_middle,
                                    _swap, _garbage_line, _modify_copy, _delete_copy,
                                    _modify_result])
def test_tampering_is_found_with_its_location(root, tamper, capsys):
    location, words = tamper(root)
    problems = Register(root, MACHINE).verify()
    assert any(p.location.startswith(location) and words in p.message for p in problems), \
        problems
    assert all(p.key == MACHINE for p in problems)
    assert cli_verify(root, MACHINE) == 1
    assert location in capsys.readouterr().out


def test_appending_to_a_corrupt_register_refuses(root):
    _garbage_line(root)
    with pytest.raises(ValueError, match="line 4 is not valid JSON"):
        _write(root, "prefill", 14)


# ------------------------------------------------------------------ concurrency


def _append_many(root: str, stage: str, n: int, start) -> None:
    start.wait()
    reg = Register(root, MACHINE)
    for i in range(n):
        content = f"{stage},{i},{os.getpid()}\n".encode()
        provenance = full_provenance(stage, config={"i": i})
        sha = reg.retain(content)
        side = reg.retain(sidecar_bytes(stage, STAGES[stage].artifact, content, provenance))
        reg.append(stage, f"results/{MACHINE}/{STAGES[stage].artifact}", sha, side,
                   provenance)


def test_concurrent_appends_keep_one_valid_chain(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    n = 50
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), stage, n, start))
             for stage in ("prefill", "decode")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    reg = Register(tmp_path, MACHINE)
    entries = reg.entries()
    assert [e["seq"] for e in entries] == list(range(2 * n))
    for stage in ("prefill", "decode"):
        assert [e["version"] for e in reg.history(stage)] == list(range(1, n + 1))
    # the chain and copies are clean; results/ was never written here, which verify says
    problems = reg.verify()
    assert {p.location for p in problems} == {f"results/{MACHINE}/prefill.csv",
                                              f"results/{MACHINE}/prefill.csv.prov.json",
                                              f"results/{MACHINE}/decode.csv",
                                              f"results/{MACHINE}/decode.csv.prov.json"}
    assert all("missing, but the register has version 50" in p.message for p in problems)


# ------------------------------------------------------------------ killed writes

_KILLED_CHILD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
import inferlab.evidence.provenance as prov

real_replace, seen = os.replace, []
def slow_replace(src, dst):
    if "results" in Path(dst).parts:
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


def _run_and_kill(root: Path, kill_at: int, content: bytes) -> None:
    marker = root / "marker"
    script = _KILLED_CHILD.format(repo=str(REPO), kill_at=kill_at, marker=str(marker),
                                  root=str(root), machine=MACHINE, content=content)
    child = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "the child never reached the replace it was to be killed in"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


@pytest.mark.parametrize("kill_at", [1, 2])  # 1: artifact's replace, 2: sidecar's
def test_a_killed_write_leaves_no_partial_file_and_no_entry(tmp_path, kill_at):
    _write(tmp_path, "prefill", 21)
    new = _csv(22)
    _run_and_kill(tmp_path, kill_at, new)
    reg = Register(tmp_path, MACHINE)
    assert len(reg.entries()) == 1
    artifact = layout.artifact_path(tmp_path, MACHINE, "prefill")
    assert artifact.read_bytes() in (_csv(21), new)  # old or whole new, never half
    assert reg.copy_path(sha256_bytes(new)).read_bytes() == new  # retained before results
    problems = reg.verify()
    if kill_at == 1:
        assert problems == []
    else:  # a whole new artifact without its entry is reported, not hidden
        assert [p.location for p in problems] == [f"results/{MACHINE}/prefill.csv"]
    _write(tmp_path, "prefill", 23)  # the next write cleans up and goes on
    assert set(os.listdir(artifact.parent)) == {"prefill.csv", "prefill.csv.prov.json"}
    assert reg.verify() == []


# ------------------------------------------------------------------ provenance pieces


def test_canonical_json_rejects_nan_naming_where():
    with pytest.raises(ValueError, match=r"obj\['rows'\]\[1\]=nan"):
        canonical_json({"rows": [1.0, float("nan")]})


def test_canonical_json_and_config_hash_ignore_key_order():
    rng = random.Random(5)
    items = [(f"k{i}", rng.random()) for i in range(10)]
    shuffled = items[:]
    rng.shuffle(shuffled)
    assert canonical_json(dict(items)) == canonical_json(dict(shuffled))
    assert config_hash(dict(items)) == config_hash(dict(shuffled))
    assert config_hash(dict(items)) != config_hash(dict(items[:-1]))


def test_code_hash_sees_edits_and_renames(tmp_path):
    a = tmp_path / "a.py"
    a.write_text(f"x = {random.Random(6).random()}\n")
    before = code_hash([a], tmp_path)
    b = tmp_path / "b.py"
    b.write_text(a.read_text())
    assert code_hash([b], tmp_path) != before
    a.write_text(a.read_text() + "y = 1\n")
    assert code_hash([a], tmp_path) != before


def test_missing_code_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="nope.py"):
        code_hash([tmp_path / "nope.py"], tmp_path)


def test_write_artifact_rejects_text_content(tmp_path):
    with pytest.raises(ValueError, match="content must be bytes"):
        write_artifact(tmp_path, MACHINE, "prefill", "T\n1\n", config={}, code_files=[],
                       inputs=[], seed=0, command="x", environment={})


def test_git_state_outside_a_repository_is_unknown(tmp_path):
    assert git_state(tmp_path) == {"commit": None, "dirty": None}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def test_git_state_reads_commit_and_code_dirtiness(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", "code.py")
    _git(tmp_path, "commit", "-q", "-m", "c")
    state = git_state(tmp_path)
    assert len(state["commit"]) == 40 and state["dirty"] is False
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "x.csv").write_text("a\n")  # outputs do not dirty the code
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path)["dirty"] is True


# ------------------------------------------------------------------ schemas


def _validators() -> tuple[Draft202012Validator, Draft202012Validator]:
    sidecar = json.loads((SCHEMAS / "sidecar.schema.json").read_text())
    entry = json.loads((SCHEMAS / "register_entry.schema.json").read_text())
    registry = Registry().with_resources(
        [(s["$id"], Resource.from_contents(s)) for s in (sidecar, entry)])
    return (Draft202012Validator(sidecar, registry=registry),
            Draft202012Validator(entry, registry=registry))


def _descriptions_missing(schema, where="") -> list[str]:
    missing = []
    for name, sub in (schema.get("properties") or {}).items():
        if "description" not in sub:
            missing.append(f"{where}/{name}")
        missing += _descriptions_missing(sub, f"{where}/{name}")
    for name, sub in (schema.get("$defs") or {}).items():
        missing += _descriptions_missing(sub, f"{where}/$defs/{name}")
    return missing


def test_written_sidecars_and_entries_validate(root):
    sidecar_v, entry_v = _validators()
    for stage in ("prefill", "decode"):
        artifact = layout.artifact_path(root, MACHINE, stage)
        sidecar_v.validate(json.loads(layout.sidecar_path(artifact).read_text()))
    for entry in Register(root, MACHINE).entries():
        entry_v.validate(entry)


def test_every_stage_and_results_key_makes_entries_that_validate(tmp_path):
    """An entry of each stage, under a book key and an ``@grid`` key, fits the schema."""
    _, entry_v = _validators()
    for key in ("cpu-test-2t", "cpu-test-2t@smoke"):
        for stage in STAGES:
            write_artifact(tmp_path, key, stage, b"{}" if stage in ("probe", "claims")
                           else b"a\n1\n", config={}, code_files=[], inputs=[], seed=0,
                           command="x", environment={})
        for entry in Register(tmp_path, key).entries():
            entry_v.validate(entry)


def test_schemas_reject_a_broken_entry_and_describe_every_property(root):
    _, entry_v = _validators()
    entry = Register(root, MACHINE).entries()[0]
    del entry["entry_hash"]
    assert not entry_v.is_valid(entry)
    for name in ("sidecar.schema.json", "register_entry.schema.json"):
        assert _descriptions_missing(json.loads((SCHEMAS / name).read_text())) == []
