"""The evidence register of one results key: every version of a measured stage, kept.

What a stage measured on the device (probe, correctness, prefill, decode, model: a
``pipeline.Stage.measured`` stage) cannot be made again, so each version is kept:

    evidence/{key}/register.jsonl      one line per version: stage, version, sha256, provenance
    evidence/{key}/{stage}/v{N}.csv    the version's artifact (the series pools them)

A derived artifact (series, traffic, claims, manuscript) is a function of measured
versions, code and config: it is never copied here, and git holds its history.

Git is the register's witness. The register is append-only: the one committed at HEAD must
be a prefix of the working one (``committed_prefix_fault``), so a hand edit of a line, a
deleted tail or another host's folder copied over this one is named, with the fix, and
nothing is appended to such a register. The threats are an honest author's (a stale file,
a hand edit, a copy over another machine's folder, an interrupted write, a full disk); an
adversary with commit rights is out of scope, so no hash chain pretends to stop one.

A version is written under the register's lock (``locked``), kept file first and its line
last, each write atomic (``core.files``): a kill or a full disk at any point leaves every
complete line as it was, and at worst a kept file no line names yet, which the next write
of that stage replaces.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import CannotCheck, canonical_json, durable_append, git_file, sha256_bytes
from inferlab.core.pipeline import STAGES

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

    # ---------------------------------------------------------------- reading

    def _data(self) -> bytes:
        return self.path.read_bytes() if self.path.is_file() else b""

    def entries(self) -> list[dict]:
        """Every version, in the order written. A line that is not an entry is a ValueError
        naming it and the fix; a final line without its newline (a write killed mid-line)
        is no entry yet and is left out."""
        data = self._data()
        lines = data.split(b"\n")[:-1]  # the text after the last newline is a torn tail
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
        if stage not in STAGES:
            raise ValueError(f"stage={stage!r} is not a stage; expected one of {list(STAGES)}")
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
        """The kept artifact of ``entry``, its sha256 checked; a ValueError naming the
        version, the file and the fix when it is missing or no longer that file."""
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

    # ---------------------------------------------------------------- git

    def committed_prefix_fault(self) -> str | None:
        """Why the working register does not extend the one committed at HEAD, or None
        (also when nothing is committed yet). ``CannotCheck`` when git cannot answer."""
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

    # ---------------------------------------------------------------- writing

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the register's lock for a whole write (kept file, results files, line), so
        two runs on one key cannot interleave. Refuses a register that does not extend the
        committed one; a torn final line (a write killed mid-line) is cut first."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as lock:  # git-ignored
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                fault = self.committed_prefix_fault()
            except CannotCheck:
                fault = None  # no git here: `inferlab verify` says it could not check
            if fault:
                raise ValueError(f"refusing to add to {self.rel}: {fault}")
            data = self._data()
            if data and not data.endswith(b"\n"):
                with open(self.path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
            yield

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

    # ---------------------------------------------------------------- checking

    def problems(self) -> list[str]:
        """What ``inferlab verify`` finds wrong here: unreadable lines, versions out of
        order, a kept file missing or changed, results/ not holding each measured stage's
        latest version, and the register against git."""
        try:
            entries = self.entries()
        except ValueError as exc:
            return [str(exc)]
        found: list[str] = []
        counts: dict[str, int] = {}
        for e in entries:
            counts[e["stage"]] = counts.get(e["stage"], 0) + 1
            if e["stage"] not in STAGES or e["version"] != counts[e["stage"]]:
                found.append(f"{self.rel}: {e['stage']} version {e['version']} is out of "
                             f"order (expected version {counts[e['stage']]}); restore it from "
                             f"git (`git checkout -- {self.rel}`)")
                continue
            try:
                self.read_copy(e)
            except ValueError as exc:
                found.append(str(exc))
        for stage in counts:
            if stage in STAGES:
                fault = record_fault(self.root, self.key, stage, self.latest(stage))
                if fault:
                    found.append(fault)
        try:
            fault = self.committed_prefix_fault()
        except CannotCheck as exc:
            fault = f"could not check {self.rel} against git: {exc}"
        return found + ([fault] if fault else [])


def record_fault(root: Path | str, key: str, stage: str, entry: dict | None) -> str | None:
    """Why results/{key}/ does not hold ``entry`` (a measured stage's latest version) as
    its artifact and sidecar, or None."""
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
    try:
        recorded = json.loads(sidecar.read_bytes()).get("provenance")
    except (ValueError, AttributeError):
        recorded = None
    if recorded != entry["provenance"]:
        return f"{rel}.prov.json is not the sidecar of register version {entry['version']}; {fix}"
    return None
