"""The evidence register: append-only, hash-chained, one per results key (machine, grid).

``evidence/{key}/register.jsonl`` holds one canonical-JSON entry per line, one per
artifact version: ``seq, stage, version, path, sha256, sidecar_sha256, provenance,
prev_hash, entry_hash`` (docs/contracts.md). ``entry_hash`` is the sha256 of the entry
without it and ``prev_hash`` the previous line's ``entry_hash``, so editing, deleting
or reordering a line breaks the chain. Every version's artifact and sidecar are kept in
``evidence/{key}/objects/<sha256>``, so a number printed from version 3 can still be
audited after version 7 exists. The retained sidecar repeats the entry's provenance,
which anchors even the last line: editing it and recomputing its hash is still caught.

Appends take an exclusive ``flock`` on ``evidence/{key}/.lock``, so two stages of one
machine running in parallel (``snakemake --cores 2``) cannot fork the chain. Each line
goes out in one ``write`` on an ``O_APPEND`` descriptor and is fsynced.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from inferlab import layout
from inferlab.files import atomic_write, canonical_json, durable_append, sha256_bytes, sha256_file
from inferlab.pipeline import STAGES

GENESIS_HASH = "0" * 64
ENTRY_FIELDS = ("seq", "stage", "version", "path", "sha256", "sidecar_sha256", "provenance",
                "prev_hash", "entry_hash")
LOCK_FILE = ".lock"
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class Problem(NamedTuple):
    """One finding of ``verify``: which results key, where (file and line or object), what."""

    key: str
    location: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.location}: {self.message}"


def entry_hash(entry: dict) -> str:
    """sha256 of the canonical JSON of ``entry`` without its ``entry_hash`` field."""
    return sha256_bytes(canonical_json({k: v for k, v in entry.items() if k != "entry_hash"}))


def _check_sha(name: str, value: str) -> str:
    if not isinstance(value, str) or not _SHA256_RE.match(value):
        raise ValueError(f"{name}={value!r} is not a sha256: expected 64 lowercase hex digits")
    return value


def _object_location(sha: str) -> str:
    return f"{layout.OBJECTS_DIR}/{sha[:12]}…"


class Register:
    """The register of one results key under ``root`` (``evidence/{key}/``)."""

    def __init__(self, root: Path | str, key: str):
        self.root = Path(root)
        self.key = layout.check_key(key)  # the results key: machine or machine@grid
        self.dir = layout.evidence_dir(root, key)
        self.path = layout.register_path(root, key)
        self.objects = layout.objects_dir(root, key)

    # ---------------------------------------------------------------- reading

    def _lines(self) -> list[str]:
        if not self.path.is_file():
            return []
        return self.path.read_text(encoding="utf-8").splitlines()

    def entries(self) -> list[dict]:
        """All entries in order. A line that is not JSON is a ValueError naming it."""
        entries = []
        for lineno, line in enumerate(self._lines(), start=1):
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path} line {lineno} is not valid JSON ({exc.msg}); "
                                 "run `inferlab verify` to see what else is wrong") from exc
        return entries

    def history(self, stage: str | None = None) -> list[dict]:
        """Entries of one stage (all stages when None), oldest first."""
        if stage is None:
            return self.entries()
        if stage not in STAGES:
            raise ValueError(f"stage={stage!r} is not a stage; expected one of {list(STAGES)}")
        return [e for e in self.entries() if e.get("stage") == stage]

    def latest(self, stage: str) -> dict | None:
        versions = self.history(stage)
        return versions[-1] if versions else None

    def entry(self, stage: str, version: int) -> dict:
        versions = self.history(stage)
        for e in versions:
            if e.get("version") == version:
                return e
        have = [e.get("version") for e in versions]
        raise ValueError(f"version={version!r} of stage {stage!r} is not in the register of "
                         f"{self.key!r}; registered versions: {have or 'none'}")

    def copy_path(self, sha256: str) -> Path:
        """Where the retained copy of the file with this sha256 lives."""
        return self.objects / _check_sha("sha256", sha256)

    # ---------------------------------------------------------------- writing

    def retain(self, data: bytes) -> str:
        """Keep ``data`` as ``objects/<sha256>`` (idempotent); return its sha256."""
        sha = sha256_bytes(data)
        target = self.copy_path(sha)
        if not (target.is_file() and sha256_file(target) == sha):
            atomic_write(target, data)
        return sha

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def append(self, stage: str, path: str, sha256: str, sidecar_sha256: str,
               provenance: dict) -> dict:
        """Append the next version of ``stage``; return the entry as written.

        ``path`` is the artifact's path relative to the root (results/{key}/...); both
        files must already be retained (``retain``), which is checked.
        """
        if stage not in STAGES:
            raise ValueError(f"stage={stage!r} is not a stage; expected one of {list(STAGES)}")
        if not isinstance(provenance, dict):
            raise ValueError(f"provenance={provenance!r} must be the sidecar's provenance dict")
        for name, sha in (("sha256", sha256), ("sidecar_sha256", sidecar_sha256)):
            if not self.copy_path(_check_sha(name, sha)).is_file():
                raise ValueError(f"{name}={sha} has no retained copy in {self.objects}; "
                                 "retain the file before registering it")
        with self._locked():
            entries = self.entries()
            entry = {
                "seq": len(entries),
                "stage": stage,
                "version": 1 + sum(e.get("stage") == stage for e in entries),
                "path": str(path),
                "sha256": sha256,
                "sidecar_sha256": sidecar_sha256,
                "provenance": provenance,
                "prev_hash": entries[-1]["entry_hash"] if entries else GENESIS_HASH,
            }
            entry["entry_hash"] = entry_hash(entry)
            durable_append(self.path, canonical_json(entry) + b"\n")
        return entry

    # ---------------------------------------------------------------- checking

    def verify(self) -> list[Problem]:
        """Re-hash and re-link everything; return the problems found (empty when clean)."""
        entries, problems = self._check_chain()
        problems += self._check_copies(entries)
        problems += self._check_results(entries)
        return problems

    def _problem(self, location: str, message: str) -> Problem:
        return Problem(self.key, location, message)

    def _check_chain(self) -> tuple[list[tuple[int, dict]], list[Problem]]:
        """Parse every line and check hash, link, seq and version; keep the parsable ones."""
        entries, problems = [], []
        prev_hash, next_seq, versions = GENESIS_HASH, 0, Counter()
        for lineno, line in enumerate(self._lines(), start=1):
            where = f"{layout.REGISTER_FILE} line {lineno}"
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(self._problem(where, f"not valid JSON ({exc.msg}): a corrupt "
                                              "or truncated line"))
                continue
            missing = [f for f in ENTRY_FIELDS if not isinstance(entry, dict) or f not in entry]
            if missing:
                problems.append(self._problem(where, f"not a register entry: missing {missing}"))
                continue
            problems += [self._problem(where, m)
                         for m in _entry_faults(entry, prev_hash, next_seq, versions)]
            prev_hash = entry["entry_hash"]
            if isinstance(entry["stage"], str) and isinstance(entry["version"], int):
                versions[entry["stage"]] = entry["version"]
            next_seq = entry["seq"] + 1 if isinstance(entry["seq"], int) else next_seq + 1
            entries.append((lineno, entry))
        return entries, problems

    def _object_faults(self) -> dict[str, str]:
        """sha -> fault for every retained copy whose content no longer matches its name."""
        if not self.objects.is_dir():
            return {}
        faults = {}
        for p in sorted(self.objects.iterdir()):
            if p.is_file() and not p.name.startswith(".") and sha256_file(p) != p.name:
                faults[p.name] = "content does not match its sha256 name: copy modified"
        return faults

    def _check_copies(self, entries: list[tuple[int, dict]]) -> list[Problem]:
        faults = self._object_faults()
        problems = [self._problem(_object_location(sha), msg) for sha, msg in faults.items()]
        for lineno, entry in entries:
            for kind in ("sha256", "sidecar_sha256"):
                sha = entry[kind]
                if not isinstance(sha, str) or not _SHA256_RE.match(sha):
                    continue  # already reported by _entry_faults
                if not (self.objects / sha).is_file():
                    problems.append(self._problem(
                        _object_location(sha), f"missing: the retained {kind} copy of "
                        f"{layout.REGISTER_FILE} line {lineno}"))
            problems += self._sidecar_faults(lineno, entry, faults)
        return problems

    def _sidecar_faults(self, lineno: int, entry: dict, faults: dict) -> list[Problem]:
        """The retained sidecar must describe the entry's artifact with the same provenance."""
        sha = entry["sidecar_sha256"]
        copy = self.objects / sha if isinstance(sha, str) and _SHA256_RE.match(sha) else None
        if copy is None or not copy.is_file() or sha in faults:
            return []
        where = f"{layout.REGISTER_FILE} line {lineno}"
        try:
            sidecar = json.loads(copy.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return [self._problem(where, f"retained sidecar {sha[:12]}… is not JSON")]
        if not isinstance(sidecar, dict) or sidecar.get("sha256") != entry["sha256"] \
                or sidecar.get("provenance") != entry["provenance"]:
            return [self._problem(where, "entry disagrees with its retained sidecar "
                                  "(sha256 or provenance edited)")]
        return []

    def _check_results(self, entries: list[tuple[int, dict]]) -> list[Problem]:
        """Each file in results/{key}/ must be a registered version of its stage."""
        problems = []
        for stage in STAGES:
            artifact = layout.artifact_path(self.root, self.key, stage)
            mine = [e for _, e in entries if e["stage"] == stage]
            for path, field in ((artifact, "sha256"),
                                (layout.sidecar_path(artifact), "sidecar_sha256")):
                if not path.is_file():
                    continue
                where = path.relative_to(self.root).as_posix()
                known = {e[field] for e in mine}
                if not known:
                    problems.append(self._problem(where, f"not in the register: no version "
                                                  f"of {stage} is registered"))
                elif sha256_file(path) not in known:
                    problems.append(self._problem(where, f"matches no registered version of "
                                                  f"{stage}: modified after it was registered "
                                                  "(or its write was interrupted)"))
        return problems

    def n_copies(self) -> int:
        if not self.objects.is_dir():
            return 0
        return sum(1 for p in self.objects.iterdir() if p.is_file() and not p.name.startswith("."))


def _entry_faults(entry: dict, prev_hash: str, next_seq: int, versions: Counter) -> list[str]:
    """What is wrong with one parsed entry, given the entries before it."""
    faults = []
    try:
        recomputed = entry_hash(entry)
    except ValueError:  # e.g. a NaN written into the line: not canonical JSON
        recomputed = None
    if recomputed != entry["entry_hash"]:
        faults.append("entry_hash does not match the entry's content: entry edited")
    if entry["prev_hash"] != prev_hash:
        faults.append("prev_hash does not link to the previous line: an entry before it "
                      "was deleted, edited or reordered")
    if entry["seq"] != next_seq:
        faults.append(f"seq {entry['seq']!r} where {next_seq} was expected: entries deleted "
                      "or reordered")
    stage = entry["stage"]
    if not isinstance(stage, str) or stage not in STAGES:
        faults.append(f"stage {stage!r} is not a stage; expected one of {list(STAGES)}")
    elif entry["version"] != versions[stage] + 1:
        faults.append(f"version {entry['version']!r} of {stage} where {versions[stage] + 1} "
                      "was expected: versions deleted or reordered")
    for field in ("sha256", "sidecar_sha256"):
        if not isinstance(entry[field], str) or not _SHA256_RE.match(entry[field]):
            faults.append(f"{field}={entry[field]!r} is not a sha256")
    return faults


# -------------------------------------------------------------------- command line


def cli_verify(root: Path | str, key: str | None = None) -> int:
    """``inferlab verify``: 0 when every register checked is clean, else 1."""
    root = Path(root)
    if key is not None and not layout.evidence_dir(root, key).is_dir():
        print(f"no evidence for {key!r}: {layout.evidence_dir(root, key)} does not exist")
        return 1
    names = [key] if key is not None else layout.evidence_keys(root)
    if not names:
        print(f"nothing to verify: no evidence/ or results/ machines under {root}")
        return 0
    clean = True
    for name in names:
        register = Register(root, name)
        problems = register.verify()
        clean = clean and not problems
        for p in problems:
            print(f"FAIL {p}")
        if not problems:
            print(f"OK {name}: {len(register.entries())} entries, "
                  f"{register.n_copies()} copies")
    return 0 if clean else 1


def _history_row(entry: dict) -> tuple[str, ...]:
    prov = entry.get("provenance") or {}
    commit = (prov.get("git_commit") or "none")[:10]
    if prov.get("git_dirty"):
        commit += "-dirty"
    return (str(entry.get("version")), str(entry.get("stage")), str(prov.get("created_at")),
            str(entry.get("sha256"))[:12], commit, str(entry.get("path")))


def cli_history(root: Path | str, key: str, stage: str | None = None) -> int:
    """``inferlab history``: one row per registered version, oldest first."""
    register = Register(root, key)
    if not register.path.is_file():
        print(f"no register for {key!r}: {register.path} does not exist")
        return 1
    rows = [("version", "stage", "created_at", "sha256", "commit", "path")]
    rows += [_history_row(e) for e in register.history(stage)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return 0
