"""The evidence register of one results key, the one check made before a stage computes
from an artifact (``doubt``) and the one writer of artifacts (``write_artifact``).

What a measured stage (``pipeline.Stage.measured``) found on the device cannot be made
again, so each version is kept: a line of ``evidence/{key}/register.jsonl`` (stage,
version, sha256, provenance) and its artifact, ``evidence/{key}/{stage}/v{N}.csv`` (the
series pools them). A derived artifact is a function of those, code and config: git holds
its history.

Git is the register's witness: the register committed at HEAD must be a prefix of the
working one (``committed_prefix_fault``), so a hand edit, a deleted tail or another host's
folder copied over this one is named, and nothing is appended to it. The threats are an
honest author's (a stale file, a hand edit, an interrupted write, a full disk); an
adversary with commit rights is out of scope, so no hash chain pretends to stop one.

A write, under the register's lock, keeps the version's file, writes the artifact and
then its sidecar into ``results/{key}/`` (each atomically), and appends the register line
last: a kill leaves complete files only, at worst a kept file no line names yet (the next
write replaces it). A write that fails (a full disk) leaves the register and results/ as
they were (``restored_on_failure``). A derived stage writes results/ only.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import (
    CannotCheck,
    atomic_write,
    canonical_json,
    durable_append,
    git_file,
    git_state,
    reject_nonfinite,
    relative,
    restored_on_failure,
    sha256_bytes,
    sha256_file,
    utc_now_iso,
)
from inferlab.core.pipeline import STAGES, content_sha256
from inferlab.core.pipeline import stage as declared
from inferlab.evidence import artifacts
from inferlab.evidence.artifacts import Table

FIELDS = ("stage", "version", "sha256", "provenance")


class Register:
    """The register of one results key under ``root`` (``evidence/{key}/``)."""

    def __init__(self, root: Path | str, key: str):
        self.root = Path(root)
        self.key = layout.check_key(key)
        self.dir = layout.evidence_dir(root, key)
        self.path = layout.register_path(root, key)

    @property
    def rel(self) -> str:
        return self.path.relative_to(self.root).as_posix()

    def _data(self) -> bytes:
        return self.path.read_bytes() if self.path.is_file() else b""

    def entries(self) -> list[dict]:
        """Every version, in the order written; a line that is not an entry is a ValueError."""
        lines = self._data().split(b"\n")[:-1]  # the text after the last newline is a torn tail
        return [self._parse(line, n) for n, line in enumerate(lines, start=1)]

    def _parse(self, line: bytes, lineno: int) -> dict:
        try:
            entry = json.loads(line.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise ValueError(f"{self.rel} line {lineno} is not a register entry ({exc}); "
                             f"restore it from git (`git checkout -- {self.rel}`)") from None
        missing = [f for f in FIELDS if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise ValueError(f"{self.rel} line {lineno} lacks {', '.join(missing)}; restore it "
                             f"from git (`git checkout -- {self.rel}`)")
        return entry

    def history(self, stage: str | None = None) -> list[dict]:
        """Entries of one stage (all stages when None), oldest first."""
        if stage is None:
            return self.entries()
        declared(stage)  # an unknown stage is a ValueError listing them
        return [e for e in self.entries() if e["stage"] == stage]

    def latest(self, stage: str) -> dict | None:
        versions = self.history(stage)
        return versions[-1] if versions else None

    def entry(self, stage: str, version: int) -> dict:
        versions = self.history(stage)
        for e in versions:
            if e["version"] == version:
                return e
        have = [e["version"] for e in versions]
        raise ValueError(f"version={version!r} of stage {stage!r} is not in the register of "
                         f"{self.key!r}; registered versions: {have or 'none'}")

    def version_path(self, entry: dict) -> Path:
        return layout.version_path(self.root, self.key, entry["stage"], entry["version"])

    def read_copy(self, entry: dict) -> bytes:
        """The kept artifact of ``entry``, its sha256 checked; else a ValueError."""
        path = self.version_path(entry)
        rel = path.relative_to(self.root).as_posix()
        what = f"{entry['stage']} version {entry['version']} of {self.key} ({rel})"
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{what} cannot be read: {exc.strerror or exc}; restore it from "
                             f"git (`git checkout -- {rel}`)") from None
        if sha256_bytes(data) != entry["sha256"]:
            raise ValueError(f"{what} was changed after it was registered (its sha256 is not "
                             f"the register's); restore it from git (`git checkout -- {rel}`)")
        return data

    def committed_prefix_fault(self) -> str | None:
        """Why the working register does not extend the one committed at HEAD, or None."""
        committed = git_file(self.root, "HEAD", self.rel)
        if committed is None or self._data().startswith(committed):
            return None
        old, new = committed.split(b"\n"), self._data().split(b"\n")
        line = next((i for i, (a, b) in enumerate(zip(old, new, strict=False), start=1)
                     if a != b), min(len(old), len(new)))
        return (f"{self.rel} is not the register committed at HEAD with lines added (from line "
                f"{line} on it differs): an edited or deleted line, or another host's folder "
                f"copied over this one. Restore it (`git checkout -- evidence/{self.key}`); "
                "run a second host of this type under its own id (--config machine=<id>-<host>)")

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The register's lock for a whole write, so two runs on one key cannot interleave;
        a register that does not extend the committed one is refused, a torn line cut."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as lock:  # git-ignored
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                fault = self.committed_prefix_fault()
            except CannotCheck:
                fault = None  # no git here: `inferlab verify` says it could not check
            if fault:
                raise ValueError(f"refusing to add to {self.rel}: {fault}")
            self.cut_torn_tail()
            yield

    def cut_torn_tail(self) -> int:
        """Cut a final line without its newline (an append killed mid-line); the bytes cut."""
        data = self._data()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        with open(self.path, "r+b") as f:
            f.truncate(keep)
        return len(data) - keep

    def next_version(self, stage: str) -> int:
        return 1 + len(self.history(stage))

    def append(self, stage: str, version: int, sha256: str, provenance: dict) -> dict:
        """Append the line of a version whose kept file is written (call under ``locked``)."""
        entry = {"stage": stage, "version": version, "sha256": sha256, "provenance": provenance}
        if version != self.next_version(stage):
            raise ValueError(f"version={version} of {stage} is not the next one "
                             f"({self.next_version(stage)}) in {self.rel}")
        self.read_copy(entry)  # the kept file is there and is this artifact
        durable_append(self.path, canonical_json(entry) + b"\n")
        return entry

    def problems(self) -> list[str]:
        """What ``inferlab verify`` finds wrong with the register, its kept files, results/
        and the register against git."""
        try:
            entries = self.entries()
        except ValueError as exc:
            return [str(exc)]
        found: list[str] = []
        counts: dict[str, int] = {}
        last: dict[str, dict] = {}  # each stage's latest entry, from this one read
        for e in entries:
            counts[e["stage"]] = counts.get(e["stage"], 0) + 1
            last[e["stage"]] = e
            if e["stage"] not in STAGES or e["version"] != counts[e["stage"]]:
                found.append(f"{self.rel}: {e['stage']} version {e['version']} is out of "
                             f"order (expected version {counts[e['stage']]}); restore it from "
                             f"git (`git checkout -- {self.rel}`)")
                continue
            try:
                self.read_copy(e)
            except ValueError as exc:
                found.append(str(exc))
        for stage, entry in last.items():
            if stage in STAGES:
                fault = record_fault(self.root, self.key, stage, entry)
                if fault:
                    found.append(fault)
        try:
            fault = self.committed_prefix_fault()
        except CannotCheck as exc:
            fault = f"could not check {self.rel} against git: {exc}"
        return found + ([fault] if fault else [])


def record_fault(root: Path | str, key: str, stage: str, entry: dict | None) -> str | None:
    """Why results/{key}/ does not hold ``entry`` (a measured stage's latest version)."""
    artifact = layout.artifact_path(root, key, stage)
    sidecar = layout.sidecar_path(artifact)
    rel = Path(artifact).relative_to(root).as_posix()
    fix = f"rerun the stage (snakemake --forcerun {stage}) or restore it from git"
    if entry is None:
        return f"{rel}: no version of {stage} is in the register of {key}; {fix}"
    if not artifact.is_file() or not sidecar.is_file():
        return f"{rel} or its sidecar is missing; {fix}"
    if sha256_bytes(artifact.read_bytes()) != entry["sha256"]:
        return (f"{rel} is not the register's latest version of {stage} (version "
                f"{entry['version']}): edited, or a run was interrupted before it registered "
                f"it; {fix}")
    if (sidecar_record(artifact) or {}).get("provenance") != entry["provenance"]:
        return f"{rel}.prov.json is not the sidecar of register version {entry['version']}; {fix}"
    return None


@dataclass
class Evidence:
    """One stage's artifact on one results key, as a check sees it."""

    stage: str
    path: Path
    data: Table | dict | None   # None when the artifact is missing
    entry: dict | None          # its record: the register's latest line, else the sidecar's
    sha256_now: str | None
    error: str | None = None    # why the file could not be read (then data is None)

    @property
    def table(self) -> Table:
        """The rows a check reads (probe.json: its availability list)."""
        return artifacts.probe_availability(self.data) if self.stage == "probe" else self.data

    @property
    def provenance(self) -> dict:
        return (self.entry or {}).get("provenance") or {}

    def describe(self, root: Path) -> dict:
        entry = self.entry or {}
        return {"stage": self.stage, "path": relative(self.path, root),
                "version": entry.get("version"), "sha256": entry.get("sha256")}


def sidecar_record(path: Path) -> dict | None:
    """The sidecar beside ``path`` as an entry (version None), or None when there is none."""
    try:
        sidecar = json.loads(layout.sidecar_path(path).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(sidecar, dict) or not isinstance(sidecar.get("provenance"), dict):
        return None
    return {"stage": sidecar["provenance"].get("stage"), "version": None,
            "sha256": sidecar.get("sha256"), "provenance": sidecar["provenance"]}


def _latest(root: Path | str, key: str, stage: str) -> dict | None:
    return Register(root, key).latest(stage) if STAGES[stage].measured else None


def load_evidence(root: Path | str, key: str, stage: str, latest: dict | None = None) -> Evidence:
    """Read one stage's artifact (typed) with its record (``latest``: the register's, when
    the caller has read it)."""
    path = layout.artifact_path(root, key, stage)
    entry = latest or _latest(root, key, stage) or sidecar_record(path)
    if not path.is_file():
        return Evidence(stage, path, None, entry, None)
    sha = sha256_file(path)
    try:
        return Evidence(stage, path, artifacts.read(path, stage), entry, sha)
    except (ValueError, UnicodeDecodeError) as exc:  # corrupted or edited: say so, go on
        return Evidence(stage, path, None, entry, sha, error=str(exc))


def doubt(root: Path | str, key: str, stage: str, latest: dict | None = None) -> str | None:
    """Why the artifact of ``stage`` in results/{key}/ cannot be computed from now, or
    None: it is not what its record says, or its recorded inputs are not the files there (a
    traffic.csv computed from prefill version 1 is no evidence about version 4)."""
    root = Path(root)
    path = layout.artifact_path(root, key, stage)
    rel = relative(path, root)
    if STAGES[stage].measured:
        fault = record_fault(root, key, stage, latest or _latest(root, key, stage))
        if fault:
            return fault
    record = sidecar_record(path)
    if record is None:
        return f"{rel} or its sidecar is missing or unreadable; rerun the {stage!r} stage"
    if not path.is_file() or sha256_file(path) != record["sha256"]:
        return (f"{rel} is not the file its sidecar describes (edited, or a write was "
                f"interrupted); rerun the {stage!r} stage (snakemake --forcerun {stage})")
    return stale_inputs(root, record)


def stale_inputs(root: Path | str, entry: dict) -> str | None:
    """Why the inputs ``entry`` recorded ({path: sha256}) are not the files there now, or
    None."""
    root = Path(root)
    inputs = (entry.get("provenance") or {}).get("inputs")
    if not isinstance(inputs, dict):
        return "its provenance records no inputs"
    for rel, sha in sorted(inputs.items()):
        path = root / rel
        if not path.is_file():
            return f"its input {rel} is missing"
        now = sha256_file(path)
        if now != sha:
            return (f"it was computed from another version of {rel} than the one there now "
                    f"(from {_version_of(root, rel, sha)}; there now: "
                    f"{_version_of(root, rel, now)}); rerun it")
    return None


def _version_of(root: Path, rel: str, sha: str) -> str:
    """'prefill version 1' for a recorded input of a measured stage, else its sha256."""
    parts = rel.split("/")
    stage = next((s for s in STAGES if STAGES[s].artifact == parts[-1]), None)
    versions = []
    if stage and STAGES[stage].measured and len(parts) == 3 and parts[0] == "results":
        try:
            versions = Register(root, parts[1]).history(stage)
        except ValueError:  # not a key, or an unreadable register: the sha256 says enough
            versions = []
    found = [e["version"] for e in versions if e["sha256"] == sha]
    return f"{stage} version {found[-1]}" if found else f"sha256 {sha[:12]}…"


def read_input(root: Path, key: str, name: str, path: Path) -> Evidence:
    """An upstream artifact, read once ``doubt`` finds nothing; else a ValueError naming
    the file, what is wrong and what to rerun."""
    if path.resolve() != layout.artifact_path(root, key, name).resolve():
        raise ValueError(f"stage input {path} is not where results/{key}/ keeps {name}: "
                         f"{layout.artifact_path(root, key, name)}")
    if not path.is_file():
        raise ValueError(f"stage input {relative(path, root)} does not exist: run the {name!r} "
                         f"stage for {key!r} first")
    latest = _latest(root, key, name)  # the register, read once
    why = doubt(root, key, name, latest)
    if why is not None:
        raise ValueError(f"stage input {relative(path, root)} cannot be used: {why}. Refusing "
                         "to compute from it (`inferlab verify` shows every such file)")
    evidence = load_evidence(root, key, name, latest)
    if evidence.error is not None:  # recorded, yet not what its schema describes
        version = (evidence.entry or {}).get("version")
        which = "" if version is None else f" (register version {version})"
        raise ValueError(f"stage input {relative(path, root)}{which} is not a valid {name} "
                         f"artifact: {evidence.error}. Rerun the {name!r} stage (e.g. "
                         f"snakemake --forcerun {name})")
    return evidence


def config_hash(config: dict) -> str:
    if not isinstance(config, dict):
        raise ValueError(f"config={config!r} must be a dict")
    return sha256_bytes(canonical_json(config))


def file_hashes(files: list[Path | str], root: Path | str) -> dict[str, str]:
    """{relative path: sha256} for each file; a missing file is a ValueError naming it."""
    hashes = {}
    for f in files:
        if not Path(f).is_file():
            raise ValueError(f"file {str(f)!r} does not exist (or is not a file)")
        # claims.yaml by what a stage computes from (pipeline.content_sha256), so that an
        # edited note is no change of a stage's code
        hashes[relative(f, root)] = content_sha256(Path(f))
    return dict(sorted(hashes.items()))


def code_hash(files: list[Path | str], root: Path | str) -> str:
    """sha256 over the sorted (relative path, file sha256) pairs: renames count too."""
    return _hash_of_file_hashes(file_hashes(files, root))


def _hash_of_file_hashes(hashes: dict[str, str]) -> str:
    return sha256_bytes(canonical_json(sorted(hashes.items())))


def build_provenance(root, key, stage, *, config, code_files, inputs, seed, command,
                     environment, bookkeeping_files=None) -> dict:
    """The sidecar's provenance dict (docs/contracts.md); ``bookkeeping_files`` are
    recorded, no rerun trigger."""
    git = git_state(root)
    code = file_hashes(code_files, root)
    machine, grid = layout.split_key(key)
    bookkeeping = {} if bookkeeping_files is None else {
        "bookkeeping_sha256": code_hash(bookkeeping_files, root),
        "bookkeeping_files": file_hashes(bookkeeping_files, root)}
    return {**bookkeeping,
        "stage": stage,
        "machine": machine,
        "grid": grid,
        "created_at": utc_now_iso(),
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "code_sha256": _hash_of_file_hashes(code),
        "code_files": code,
        "config_sha256": config_hash(config),
        "config": config,
        "environment": environment,
        "seed": seed,
        "inputs": file_hashes(inputs, root),
        "command": command,
    }


def sidecar_bytes(stage: str, artifact_name: str, content: bytes, provenance: dict) -> bytes:
    """The sidecar file: indented for people to read, keys sorted so it is reproducible,
    non-ASCII escaped (as in the register: no character of a value is a line break)."""
    sidecar = {
        "schema": f"inferlab/{stage}",
        "schema_version": artifacts.schema_version(stage),
        "artifact": artifact_name,
        "sha256": sha256_bytes(content),
        "provenance": provenance,
    }
    reject_nonfinite(sidecar, "sidecar")
    return (json.dumps(sidecar, sort_keys=True, indent=2, ensure_ascii=True,
                       allow_nan=False) + "\n").encode("utf-8")


def _check_write_args(content, seed, command, environment) -> None:
    if not isinstance(content, bytes):
        raise ValueError(f"content must be bytes (the artifact as written), got "
                         f"{type(content).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} must be an int")
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"command={command!r} must be the command line that reproduces it")
    if not isinstance(environment, dict):
        raise ValueError(f"environment={environment!r} must be a dict (environment.fingerprint)")


def write_artifact(root: Path | str, key: str, stage: str, content: bytes, *,
                   config: dict, code_files: list, inputs: list[Path], seed: int,
                   command: str, environment: dict,
                   bookkeeping_files: list | None = None) -> dict:
    """Write one stage artifact (``content``, computed in memory) with its sidecar, and for
    a measured stage its kept version and register line (the module docstring says why in
    this order); return the entry (``version`` None for a derived stage)."""
    _check_write_args(content, seed, command, environment)
    artifact = layout.artifact_path(root, key, stage)
    provenance = build_provenance(root, key, stage, config=config, code_files=code_files,
                                  inputs=inputs, seed=seed, command=command,
                                  environment=environment, bookkeeping_files=bookkeeping_files)
    sidecar = sidecar_bytes(stage, artifact.name, content, provenance)
    written = ((artifact, content), (layout.sidecar_path(artifact), sidecar))
    entry = {"stage": stage, "version": None, "sha256": sha256_bytes(content),
             "provenance": provenance}

    def write_results() -> None:
        with restored_on_failure([path for path, _ in written]):
            for path, data in written:
                atomic_write(path, data)
            if entry["version"] is not None:
                register.append(stage, entry["version"], entry["sha256"], provenance)

    if not STAGES[stage].measured:
        write_results()
        return entry
    register = Register(root, key)
    with register.locked():  # the whole write: another run on this key waits for it
        entry["version"] = register.next_version(stage)
        kept = layout.version_path(root, key, stage, entry["version"])
        atomic_write(kept, content)
        try:
            write_results()
        except BaseException:
            kept.unlink(missing_ok=True)  # no line names it: the register is as it was
            raise
    return entry
