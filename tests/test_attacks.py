"""Issue 23: the attacks that got through round three, one test each (items 1-14; 15 and
16 are the claims and traffic stages'), then the property that any text survives the
register and its sidecars, and the attack sweep of docs/attacks.md.

Each test does what the attacker or the unlucky user did, in a temporary folder, and
checks what the code does now: the exit code and the message.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferlab.core import layout
from inferlab.core.pipeline import STAGES, code_files
from inferlab.evidence.provenance import write_artifact
from inferlab.evidence.register import Register
from inferlab.evidence.verify import cli_verify
from inferlab.workflow.adopt import cli_adopt
from inferlab.workflow.config import load_config, resolve, resolve_grid
from tests.pipeline_repo import copy_repo, git
from tests.tampering import delete_tail, rollback_results
from tests.test_register import MACHINE, _write, three_versions

REPO = Path(__file__).resolve().parents[1]


def _commit(root: Path, message: str = "evidence") -> None:
    if not (root / ".git").exists():
        git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def _hold_lock(root: Path, key: str = MACHINE) -> int:
    """Take the key's register lock (its folder's ``flock``) as another process would;
    returns the descriptor."""
    folder = layout.evidence_dir(root, key)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _fake_git(tmp_path: Path, stderr: str) -> str:
    """A PATH whose `git` answers every call with ``stderr`` and exit status 128."""
    folder = tmp_path / "fakebin"
    folder.mkdir()
    script = folder / "git"
    script.write_text(f"#!/bin/sh\necho '{stderr}' >&2\nexit 128\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(folder)


# ------------------------------------------------------------------ items 1-14


def test_attack_01_line_separator_in_a_config_file_name(tmp_path, capsys):
    for i, odd in enumerate(("\u2028", "\x85", "\r", "\x1c", "\u2029")):
        write_artifact(tmp_path, MACHINE, "prefill", f"T\n{i}\n".encode(),
                       config={"seed": 0, "file": f"profiles/sm{odd}oke.yaml"},
                       code_files=[], inputs=[], seed=0,
                       command=f"python -m inferlab stage prefill --configfile sm{odd}oke.yaml",
                       environment={"cpu": f"x{odd}y"})
    data = layout.register_path(tmp_path, MACHINE).read_bytes()
    assert data.isascii()  # escaped: nothing a line splitter could split on
    assert len(Register(tmp_path, MACHINE).entries()) == 5
    assert cli_verify(tmp_path) == 0, capsys.readouterr().out
    sidecar = layout.sidecar_path(layout.artifact_path(tmp_path, MACHINE, "prefill"))
    assert sidecar.read_bytes().isascii()


@pytest.mark.parametrize("git_path", ["no git", "dubious ownership"])
def test_attack_02_without_git_a_rollback_does_not_pass(tmp_path, monkeypatch, capsys,
                                                        git_path):
    (tmp_path / "repo").mkdir()
    root = three_versions(tmp_path / "repo")
    _commit(root)
    delete_tail(root, MACHINE, 1)
    rollback_results(root, MACHINE, "prefill", 1)
    path = "/nonexistent" if git_path == "no git" else _fake_git(
        tmp_path, "fatal: detected dubious ownership in repository at '/x'")
    monkeypatch.setenv("PATH", path)
    assert cli_verify(root) == 1
    out = capsys.readouterr().out
    assert f"FAIL {MACHINE}: {layout.REGISTER_FILE}: could not check its anchor in git: " in out
    assert ("git is not on the PATH" if git_path == "no git" else "dubious ownership") in out
    assert "git does not track" not in out
    from inferlab.presentation.audit import key_integrity

    doubts = key_integrity(root, MACHINE)["doubts"]  # `claims` marks the key and exits 1
    assert any(d.startswith("register: could not check its anchor in git: ") for d in doubts)


def _adoptable(tmp_path: Path) -> tuple[Path, str]:
    """A copy of the repository with every stage registered for MACHINE, each made with
    today's code, effective config and this hardware (contents are stand-ins)."""
    from inferlab.measurement.environment import fingerprint

    root = copy_repo(tmp_path / "repo")
    config = resolve(load_config(base=root / "config.yaml"), machine=MACHINE)
    environment = fingerprint(config.device, collect_env=False)
    environment["host"]["torch_threads"] = 1  # what `snakemake --cores 1` gives a stage
    for name, declared in STAGES.items():
        write_artifact(root, config.key, name, f"made {name}\n".encode(),
                       config=config.effective(name),
                       code_files=[root / f for f in code_files(name)],
                       inputs=[layout.artifact_path(root, config.key, up)
                               for up in declared.reads],
                       seed=config.seed, command=f"inferlab stage {name}",
                       environment=environment)
    return root, config.key


def test_attack_03_adopt_does_not_trust_a_register_never_committed(tmp_path, capsys):
    root, key = _adoptable(tmp_path)
    git(root, "init", "-q")  # a repository, but nothing committed
    assert cli_adopt(root, machine=MACHINE) == 0
    out = capsys.readouterr().out
    assert "adopted (current)" not in out
    assert f"adopt: {key}: probe: will rerun: its register is not committed in git" in out


def test_attack_04_adopt_does_not_mix_versions(tmp_path, capsys):
    root, key = _adoptable(tmp_path)
    _commit(root)
    _write_again(root, key, "prefill")
    _commit(root, "a new prefill version, traffic and claims not rerun")
    assert cli_adopt(root, machine=MACHINE) == 0
    out = capsys.readouterr().out
    assert f"adopt: {key}: prefill: adopted (current)" in out
    reader = next(s for s in STAGES if "prefill" in STAGES[s].reads)  # series; once traffic
    assert (f"adopt: {key}: {reader}: will rerun: it was computed from another version "
            f"of results/{key}/prefill.csv") in out
    assert f"adopt: {key}: claims: will rerun: upstream " in out


def _write_again(root: Path, key: str, name: str) -> dict:
    entry = Register(root, key).latest(name)
    prov = entry["provenance"]
    return write_artifact(root, key, name, f"made {name} again\n".encode(),
                          config=prov["config"],
                          code_files=[root / f for f in prov["code_files"]],
                          inputs=[root / p for p in prov["inputs"]], seed=prov["seed"],
                          command=prov["command"], environment=prov["environment"])


@pytest.mark.parametrize("name", ["smoke\n", "smoke\r", "smoke\u2028", "smo\nke"])
def test_attack_05_a_newline_in_the_grid_name(tmp_path, name):
    with pytest.raises(ValueError, match=r"is not a valid grid name"):
        layout.check_grid(name)
    with pytest.raises(ValueError, match=r"is not a valid machine id"):
        layout.check_machine("cpu" + name)
    with pytest.raises(ValueError, match=r"is not 'machine' or 'machine@grid'"):
        layout.check_key(f"cpu@{name}")
    raw = load_config(base=REPO / "config.yaml")
    raw["grid"], raw["seed"] = name, raw["seed"] + 1  # another grid, named
    with pytest.raises(ValueError, match=r"grid"):
        resolve_grid(raw, "cpu")


def test_attack_06_invalid_utf8_in_a_register_line(tmp_path, capsys):
    three_versions(tmp_path)
    other = "cpu-other-1t"
    write_artifact(tmp_path, other, "probe", b"{}\n", config={}, code_files=[], inputs=[],
                   seed=0, command="inferlab stage probe", environment={})
    path = layout.register_path(tmp_path, MACHINE)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:30] + b"\xff" + lines[1][31:]
    path.write_bytes(b"\n".join(lines))
    assert cli_verify(tmp_path) == 1
    out = capsys.readouterr().out
    assert (f"FAIL {MACHINE}: {layout.REGISTER_FILE} line 2: not UTF-8 (byte 0xff at "
            "column 31): a corrupt line") in out
    assert f"OK {other}: 1 entries" in out
    with pytest.raises(ValueError, match=rf"{path} line 2 is not UTF-8 \(byte 0xff at column 31"):
        Register(tmp_path, MACHINE).entries()


def test_attack_07_two_writes_on_one_key_are_serialised(tmp_path):
    three_versions(tmp_path)
    artifact = layout.artifact_path(tmp_path, MACHINE, "decode")
    before = artifact.read_bytes()
    fd = _hold_lock(tmp_path)  # another stage run is writing this key
    done = []
    writer = threading.Thread(target=lambda: done.append(_write(tmp_path, "decode", 99)))
    writer.start()
    time.sleep(0.5)
    try:
        assert not done
        assert artifact.read_bytes() == before  # nothing written beside the other's write
        assert not list(artifact.parent.glob(".*"))  # no temp or backup file of ours either
    finally:
        os.close(fd)
    writer.join(timeout=30)
    assert done and done[0]["version"] == 2


def test_attack_09_debris_of_killed_writes_is_reported_and_removed(tmp_path, capsys):
    three_versions(tmp_path)
    objects = layout.objects_dir(tmp_path, MACHINE)
    results = layout.results_dir(tmp_path, MACHINE)
    debris = [objects / f".{'a' * 64}.123.x1.tmp", results / ".prefill.csv.77.x2.tmp",
              results / ".decode.csv.prov.json.77.bak"]
    for p in debris:
        p.write_bytes(b"half")
    assert cli_verify(tmp_path) == 0  # debris is no integrity fault, but it is named
    out = capsys.readouterr().out
    for p in debris:
        assert f"WARN {MACHINE}: {p.relative_to(tmp_path).as_posix()}: left by an " \
               "interrupted write; `inferlab verify --repair` removes it" in out
    _write(tmp_path, "probe", 5)  # the next write on the key sweeps it
    assert not [p for p in debris if p.exists()]


def test_attack_10_verify_during_an_append_waits_for_it(tmp_path, capsys):
    three_versions(tmp_path)
    path = layout.register_path(tmp_path, MACHINE)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[1] + b"\n"
    path.write_bytes(data[:-len(last)] + last[:40])  # the append is half out
    fd = _hold_lock(tmp_path)
    codes = []
    reader = threading.Thread(target=lambda: codes.append(cli_verify(tmp_path)))
    reader.start()
    time.sleep(0.5)
    with open(path, "ab") as f:
        f.write(last[40:])
    os.close(fd)
    reader.join(timeout=30)
    out = capsys.readouterr().out
    assert codes == [0], out
    assert "not valid JSON" not in out


@pytest.mark.parametrize("value", ["1.0", "7.0"])
def test_attack_11_a_float_seed_is_refused(value):
    with pytest.raises(ValueError, match=rf"config key seed: {value} is not of type 'integer'"):
        load_config(overrides=[f"seed={value}"], base=REPO / "config.yaml")
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["seed"] = float(value)  # Snakemake's own validate lets it through to the rules
    with pytest.raises(ValueError, match=r"config key seed: .* is not of type 'integer'"):
        resolve_grid(raw, "cpu")


def test_attack_12_an_out_of_memory_length_is_an_oom_row(monkeypatch):
    from inferlab.evidence.artifacts import encode
    from inferlab.stages import correctness

    real = correctness.naive_attention

    def naive(q, k, v, causal=False):
        if q.shape[-2] * k.shape[-2] >= 4096:  # as the allocator refuses 68,719,476,736 bytes
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator:"
                               " not enough memory: you tried to allocate 68719476736 bytes.")
        return real(q, k, v, causal)

    monkeypatch.setattr(correctness, "naive_attention", naive)
    raw = load_config(overrides=["correctness.cpu.lengths=[32,4096]",
                                 "correctness.cpu.splitkv_cache_len=4096"],
                      base=REPO / "config.yaml")
    config = resolve(raw, machine=MACHINE)
    params = correctness.Params.from_config(config.effective("correctness"))
    ctx = SimpleNamespace(device="cpu", seed=0, progress=lambda *a: None)
    rows = correctness.run(params, ctx)
    encode("correctness", rows)  # the rows pass the schema
    big = [r for r in rows if r["T"] == 4096 and r["check"] != "causal_pairs"]
    assert big and {r["status"] for r in big} == {"oom"}
    assert {r["check"] for r in big} == {"equivalence", "splitkv", "merge_assoc"}
    assert all(r.get("max_abs_err") is None for r in big)
    assert {r["status"] for r in rows if r["T"] == 32} == {"ok"}


def test_attack_13_a_duplicate_key_is_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("seed: 0\ncorrectness:\n  heads: 2\n  cpu: {}\nseed: 7\n")
    with pytest.raises(ValueError, match=(r"config file .*dup.yaml.: key 'seed' appears twice: "
                                          r"line 1 and line 5; keep one")):
        load_config([path], base=REPO / "config.yaml")
    path.write_text("correctness:\n  heads: 2\n  heads: 3\n")
    with pytest.raises(ValueError, match=r"key 'heads' appears twice: line 2 and line 3"):
        load_config([path], base=REPO / "config.yaml")


def test_attack_14_a_huge_config_is_refused_quickly_and_briefly(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("correctness:\n  cpu:\n    lengths:\n" + "    - 64\n" * 400_000)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"config file .*big.yaml. is 3.6 MB: more than the "
                                         r"1 MB a config file may be") as exc:
        load_config([big], base=REPO / "config.yaml")
    assert time.perf_counter() - started < 1
    assert len(str(exc.value)) < 500
    long = tmp_path / "long.yaml"
    long.write_text("correctness:\n  cpu:\n    lengths: [" + "64, " * 90_000 + "64]\n")
    with pytest.raises(ValueError, match=r"^invalid config") as exc:
        load_config([long], base=REPO / "config.yaml")
    assert len(str(exc.value)) < 4000
    with pytest.raises(ValueError, match=r"override .* is 1.1 MB: more than"):
        load_config(overrides=["seed=" + "1" * 1_100_000], base=REPO / "config.yaml")


# ------------------------------------------------------------------ beyond the cases

TEXT = st.text(max_size=40)  # any code point, lone surrogates too (argv has them)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=TEXT.filter(str.strip),  # a blank command line is refused, rightly
       value=TEXT, cpu=TEXT, name=TEXT.filter(lambda t: "/" not in t
                                                             and t not in ("", ".", "..")))
def test_any_text_in_every_free_text_field_survives(command, value, cpu, name):
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
                               code_files=[code], inputs=[], seed=0, command=command or "x",
                               environment={"cpu": cpu, "machine": value})
        register = Register(root, MACHINE)
        assert layout.register_path(root, MACHINE).read_bytes().isascii()
        assert register.entries() == [entry]
        assert register.verify() == []
        assert entry["provenance"]["config"] == config
        sidecar = layout.sidecar_path(layout.artifact_path(root, MACHINE, "probe"))
        assert json.loads(sidecar.read_bytes())["provenance"] == entry["provenance"]


@given(name=TEXT)
def test_a_machine_or_grid_name_is_a_slug_or_refused(name):
    for check in (layout.check_machine, layout.check_grid, layout.check_key):
        try:
            check(name)
        except ValueError as exc:
            assert repr(name) in str(exc)
        else:
            assert name.isascii() and name.isprintable() and "\n" not in name
            assert name == name.strip() and "/" not in name


def test_attack_08_after_a_kill_the_next_plain_run_reruns_the_incomplete_job(tmp_path):
    """What a Ctrl-C or SIGKILL leaves (.snakemake/incomplete markers on a stage's outputs,
    as a killed run of the smoke grid left them) must not stop the next plain run."""
    import base64

    from tests.pipeline_repo import run

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


def test_sweep_a_sha256_or_key_with_a_trailing_newline_is_refused(tmp_path):
    from jsonschema import Draft202012Validator

    reg = Register(tmp_path, MACHINE)
    with pytest.raises(ValueError, match=r"is not a sha256"):
        reg.copy_path("a" * 64 + "\n")
    for name, field in (("sidecar.schema.json", "sha256"),
                        ("register_entry.schema.json", "path")):
        schema = json.loads(layout.schema_path(name).read_text())
        sub = {**schema["properties"][field], "$defs": schema.get("$defs", {})}
        good = "a" * 64 if field == "sha256" else f"results/{MACHINE}/prefill.csv"
        assert Draft202012Validator(sub).is_valid(good)
        assert not Draft202012Validator(sub).is_valid(good + "\n")


# ------------------------------------------------------------------ the attack sweep
# (docs/attacks.md lists every attack tried, these and the ones that held untested)


def test_sweep_a_yaml_alias_bomb_is_refused_quickly(tmp_path):
    levels = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
        for i in range(8))  # 10**9 values from 1 kB
    path = tmp_path / "bomb.yaml"
    path.write_text(levels + "correctness:\n  cpu:\n    lengths: *i\n")
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"bomb.yaml. expands to more than 100,000 values"):
        load_config([path], base=REPO / "config.yaml")
    assert time.perf_counter() - started < 5


def test_sweep_a_config_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "utf16.yaml"
    path.write_bytes("seed: 1\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"config file .*utf16.yaml. is not UTF-8 text \(byte "
                                         r"0xff at offset 0\)"):
        load_config([path], base=REPO / "config.yaml")


def test_sweep_entries_copied_from_another_key_are_named(tmp_path, capsys):
    import shutil

    three_versions(tmp_path)
    other = "cpu-other-1t"
    for folder in ("results", "evidence"):
        shutil.copytree(tmp_path / folder / MACHINE, tmp_path / folder / other)
    assert cli_verify(tmp_path, key=other) == 1
    out = capsys.readouterr().out
    assert (f"FAIL {other}: {layout.REGISTER_FILE} line 1: path results/{MACHINE}/prefill.csv "
            f"is not this key's (results/{other}/prefill.csv): an entry of another results key "
            "copied here") in out
    assert f"machine {MACHINE!r}, grid None in its provenance is not this key's" in out


def _forged_head(root: Path) -> None:
    """The register at HEAD holds three entries; the working one two (a tail deleted)."""
    _commit(root)
    delete_tail(root, MACHINE, 1)
    rollback_results(root, MACHINE, "prefill", 1)


def test_sweep_a_git_replace_of_head_does_not_move_the_anchor(tmp_path, capsys):
    root = three_versions(tmp_path)
    _forged_head(root)
    git(root, "add", "-A")  # a commit of the rolled-back state, put in place of HEAD
    forged = git(root, "commit-tree", git(root, "write-tree").strip(), "-m", "x").strip()
    git(root, "replace", git(root, "rev-parse", "HEAD").strip(), forged)
    git(root, "reset", "-q")
    assert cli_verify(root) == 1
    assert "entries 3-3 were deleted" in capsys.readouterr().out


def test_sweep_git_dir_in_the_environment_does_not_move_the_anchor(tmp_path, monkeypatch,
                                                                    capsys):
    (tmp_path / "repo").mkdir()
    root = three_versions(tmp_path / "repo")
    _forged_head(root)
    decoy = tmp_path / "decoy"  # a repository whose HEAD holds the rolled-back register
    (decoy / "evidence").mkdir(parents=True)
    import shutil

    shutil.copytree(root / "evidence" / MACHINE, decoy / "evidence" / MACHINE)
    _commit(decoy)
    monkeypatch.setenv("GIT_DIR", str(decoy / ".git"))
    assert cli_verify(root) == 1
    assert "entries 3-3 were deleted" in capsys.readouterr().out


def test_sweep_repair_during_an_append_cuts_nothing_and_says_nothing(tmp_path, capsys):
    three_versions(tmp_path)
    path = layout.register_path(tmp_path, MACHINE)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[1] + b"\n"
    path.write_bytes(data[:-len(last)] + last[:40])
    fd = _hold_lock(tmp_path)
    codes = []
    repairer = threading.Thread(target=lambda: codes.append(cli_verify(tmp_path, fix=True)))
    repairer.start()
    time.sleep(0.5)
    with open(path, "ab") as f:
        f.write(last[40:])
    os.close(fd)
    repairer.join(timeout=30)
    out = capsys.readouterr().out
    assert codes == [0], out
    assert "REPAIR" not in out
    assert path.read_bytes() == data


def test_sweep_verify_of_a_read_only_checkout_reads_without_the_lock(tmp_path, monkeypatch,
                                                                      capsys):
    three_versions(tmp_path)
    real = os.open
    folder = str(layout.evidence_dir(tmp_path, MACHINE).resolve())

    def read_only(path, flags, *args):
        if str(path) == folder:  # the lock (the folder's flock) cannot be had
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    assert cli_verify(tmp_path) == 0, capsys.readouterr().out


def test_sweep_repair_names_the_debris_it_removes(tmp_path, capsys):
    three_versions(tmp_path)
    stray = layout.objects_dir(tmp_path, MACHINE) / f".{'b' * 64}.9.x.tmp"
    stray.write_bytes(b"half")
    assert cli_verify(tmp_path, fix=True) == 0
    assert f"REPAIR {MACHINE}: removed {stray.relative_to(tmp_path).as_posix()} (left by an " \
           "interrupted write)" in capsys.readouterr().out
    assert not stray.exists()


def test_sweep_a_clone_with_autocrlf_verifies(tmp_path, capsys):
    (tmp_path / "repo").mkdir()
    root = three_versions(tmp_path / "repo")
    (root / ".gitattributes").write_bytes((REPO / ".gitattributes").read_bytes())
    _commit(root)
    clone = tmp_path / "clone"
    git(tmp_path, "-c", "core.autocrlf=true", "clone", "-q", str(root), str(clone))
    assert cli_verify(clone) == 0, capsys.readouterr().out


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_sweep_a_config_file_that_is_no_regular_file_is_named(tmp_path, kind):
    path = {"fifo": tmp_path / "f.yaml", "device": Path("/dev/zero"), "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(ValueError, match=r"is not a regular file \(a folder, FIFO or device\)"):
        load_config([path], base=REPO / "config.yaml")


def test_sweep_a_file_name_of_invalid_utf8_bytes_is_recorded(tmp_path, capsys):
    name = os.fsdecode(b"sm\xffoke.yaml")  # a lone surrogate (surrogateescape), as argv has it
    entry = write_artifact(tmp_path, MACHINE, "probe", b"{}\n", config={"file": name},
                           code_files=[], inputs=[], seed=0,
                           command=f"inferlab stage probe --configfile {name}", environment={})
    assert Register(tmp_path, MACHINE).entries() == [entry]
    assert cli_verify(tmp_path) == 0, capsys.readouterr().out


def test_sweep_adopt_without_git_reruns_everything_saying_why(tmp_path, monkeypatch, capsys):
    root, key = _adoptable(tmp_path)
    _commit(root)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert cli_adopt(root, machine=MACHINE) == 0
    out = capsys.readouterr().out
    assert "adopted (current)" not in out
    assert (f"adopt: {key}: probe: will rerun: could not check its register's anchor in git: "
            "git is not on the PATH") in out


def test_sweep_without_git_a_stage_still_runs_but_verify_fails(tmp_path, monkeypatch, capsys):
    from inferlab.evidence.trust import doubt

    monkeypatch.setenv("PATH", "/nonexistent")  # a lent GPU box with only PyTorch on it
    three_versions(tmp_path)
    assert doubt(tmp_path, MACHINE, "prefill") is None  # a stage may read its inputs
    assert Register(tmp_path, MACHINE).latest("prefill")["provenance"]["git_commit"] is None
    assert cli_verify(tmp_path) == 1  # but nothing vouches for the evidence
    assert "could not check its anchor in git: git is not on the PATH" in \
        capsys.readouterr().out
