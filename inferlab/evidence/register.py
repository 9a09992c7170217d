"""The evidence register: append-only, hash-chained, one per results key (machine, grid).

``evidence/{key}/register.jsonl`` holds one canonical-JSON entry per line, one per
artifact version: ``seq, stage, version, path, sha256, sidecar_sha256, provenance,
prev_hash, entry_hash`` (docs/contracts.md). ``entry_hash`` is the sha256 of the entry
without it and ``prev_hash`` the previous line's ``entry_hash``, so editing, deleting
or reordering a line breaks the chain. Every version's artifact and sidecar are kept in
``evidence/{key}/objects/<sha256>``, so a number printed from version 3 can still be
audited after version 7 exists. The retained sidecar repeats the entry's provenance,
so editing the last line and recomputing its hash is still caught.

The chain's head is anchored outside it, in git (``anchor``): the register committed at
HEAD must be a prefix of the working one, so deleting committed entries (a tail with a
matching rollback of results/) or rewriting them shows, and nothing is appended to
such a register. Entries appended since the last commit have no anchor yet: a
consistent forged entry there looks like a run made here, which is why ``inferlab
adopt`` trusts only committed entries.

Appends take an exclusive ``flock`` on ``evidence/{key}/.lock``, so two stages of one
machine running in parallel (``snakemake --cores 2``) cannot fork the chain. Each line
goes out on an ``O_APPEND`` descriptor, checked and fsynced, or not at all
(``files.durable_append``); a line torn by a power cut is what ``cut_torn_tail`` removes.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from inferlab.core import layout
from inferlab.evidence.entries import (  # noqa: F401 - Problem, entry_hash, results_fault: the API
    ENTRY_FIELDS,
    GENESIS_HASH,
    SHA256_RE,
    Problem,
    check_sha,
    decode_line,
    entry_faults,
    entry_hash,
    is_whole_entry,
    key_faults,
    results_fault,
)
from inferlab.core.files import (
    CannotCheck,
    atomic_write,
    canonical_json,
    debris,
    durable_append,
    git_file,
    sha256_bytes,
    sha256_file,
    split_lines,
)
from inferlab.core.pipeline import STAGES

LOCK_FILE = ".lock"
_HELD = threading.local()  # lock files this thread holds, so a nested take is a no-op


def _object_location(sha: str) -> str:
    return f"{layout.OBJECTS_DIR}/{sha[:12]}…"


class Anchor(NamedTuple):
    """The working register against the one committed at git HEAD (``Register.anchor``)."""

    committed: int | None  # entries committed at HEAD; None when git does not track it
    working: int           # entries (lines) in the working register
    problems: list[Problem]
    unchecked: str | None = None  # why git could not be asked (then committed is None)

    @property
    def unanchored(self) -> int:
        """Entries appended since the last commit (all of them when nothing is committed)."""
        return self.working - (self.committed or 0) if not self.problems else 0


class Register:
    """The register of one results key under ``root`` (``evidence/{key}/``)."""

    def __init__(self, root: Path | str, key: str):
        self.root = Path(root)
        self.key = layout.check_key(key)  # the results key: machine or machine@grid
        self.dir = layout.evidence_dir(root, key)
        self.path = layout.register_path(root, key)
        self.objects = layout.objects_dir(root, key)

    # ---------------------------------------------------------------- reading

    def _lines(self) -> list[bytes]:
        """The register's lines, split on b"\\n" only, read while no append is under way
        (a shared lock: a reader never sees half a line that is still being written)."""
        if not self.path.is_file():
            return []
        with self._locked(shared=True):
            return split_lines(self.path.read_bytes())

    def entries(self) -> list[dict]:
        """All entries in order. A line that is not JSON is a ValueError naming it."""
        entries = []
        for lineno, line in enumerate(self._lines(), start=1):
            try:
                entries.append(json.loads(decode_line(line)))
            except ValueError as exc:  # JSONDecodeError is one too
                what = f"not valid JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError) \
                    else str(exc)
                hint = ("`inferlab verify --repair` removes a torn final line"
                        if self.torn_tail() else "`inferlab verify` says what else is wrong")
                raise ValueError(f"{self.path} line {lineno} is {what}; {hint}") from None
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

    def torn_tail(self) -> bytes:
        """The bytes after the last newline: what an interrupted append left (b"" if none)."""
        data = self.path.read_bytes() if self.path.is_file() else b""
        return data[data.rfind(b"\n") + 1:]

    def anchor(self) -> Anchor:
        """Compare the working register with the one committed at git HEAD."""
        lines = self._lines()
        try:
            committed = git_file(self.root, "HEAD",
                                 "./" + self.path.relative_to(self.root).as_posix())
        except CannotCheck as exc:
            return Anchor(None, len(lines), [], unchecked=str(exc))
        if committed is None:
            return Anchor(None, len(lines), [])
        head = split_lines(committed)
        where = f"{layout.REGISTER_FILE} (committed at HEAD: {len(head)} entries)"
        for lineno, (old, new) in enumerate(zip(head, lines, strict=False), start=1):
            if old != new:
                return Anchor(len(head), len(lines), [self._problem(where, (
                    f"line {lineno} differs from the committed register: history rewritten "
                    f"(`git diff -- {self.path.relative_to(self.root)}` shows how)"))])
        if len(lines) < len(head):
            return Anchor(len(head), len(lines), [self._problem(where, (
                f"the working register has {len(lines)} entries: entries {len(lines) + 1}-"
                f"{len(head)} were deleted (a tail deletion or rollback); `git checkout -- "
                f"{self.path.relative_to(self.root)}` restores them"))])
        return Anchor(len(head), len(lines), [])

    def copy_path(self, sha256: str) -> Path:
        """Where the retained copy of the file with this sha256 lives."""
        return self.objects / check_sha("sha256", sha256)

    # ---------------------------------------------------------------- writing

    def retain(self, data: bytes) -> str:
        """Keep ``data`` as ``objects/<sha256>`` (idempotent); return its sha256."""
        sha = sha256_bytes(data)
        target = self.copy_path(sha)
        if not (target.is_file() and sha256_file(target) == sha):
            atomic_write(target, data)
        return sha

    @contextmanager
    def _locked(self, shared: bool = False) -> Iterator[None]:
        """The key's lock: exclusive for a writer, shared for a reader. Taken again inside
        itself (a write reads the register) it is already held. A reader that cannot
        create the lock file (a read-only checkout) reads without it."""
        name = str((self.dir / LOCK_FILE).resolve())
        held = _HELD.__dict__.setdefault("names", set())
        if name in held:
            yield
            return
        if not shared:
            self.dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            if not shared:
                raise
            yield
            return
        held.add(name)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            held.discard(name)
            os.close(fd)  # closing releases the lock

    @contextmanager
    def locked(self, sweep: bool = True) -> Iterator[None]:
        """Hold the key's lock for a whole write (``provenance.write_artifact``: retained
        copies, results files and the entry), so two stage runs on one key cannot
        interleave, and (``sweep``) remove what killed writes left (``debris``) first."""
        with self._locked():
            if sweep:
                self.sweep_debris()
            yield

    def debris(self) -> list[Path]:
        """Temp and backup files killed writes left in results/{key}/ and objects/."""
        return debris(layout.results_dir(self.root, self.key)) + debris(self.objects)

    def sweep_debris(self) -> list[Path]:
        """Remove ``debris`` (under the lock, so no live writer's file); return what went."""
        with self._locked():
            gone = self.debris()
            for p in gone:
                p.unlink(missing_ok=True)
        return gone

    def cut_torn_tail(self) -> bytes:
        """Remove a torn final line (the bytes after the last newline); return them.

        A complete entry always ends with its newline, so no complete entry is touched;
        a tail that is a whole, intact entry only lacking its newline gets the newline.
        """
        with self._locked():
            tail = self.torn_tail()
            if tail and is_whole_entry(tail):
                durable_append(self.path, b"\n")
                return b""
            if tail:
                fd = os.open(self.path, os.O_RDWR)
                try:
                    os.ftruncate(fd, os.fstat(fd).st_size - len(tail))
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return tail

    def append(self, stage: str, path: str, sha256: str, sidecar_sha256: str,
               provenance: dict) -> dict:
        """Append the next version of ``stage``; return the entry as written.

        ``path`` is the artifact's path relative to the root (results/{key}/...); both
        files must already be retained (``retain``): each copy is re-hashed here.
        """
        if stage not in STAGES:
            raise ValueError(f"stage={stage!r} is not a stage; expected one of {list(STAGES)}")
        if not isinstance(provenance, dict):
            raise ValueError(f"provenance={provenance!r} must be the sidecar's provenance dict")
        for name, sha in (("sha256", sha256), ("sidecar_sha256", sidecar_sha256)):
            copy = self.copy_path(check_sha(name, sha))
            if not copy.is_file():
                raise ValueError(f"{name}={sha} has no retained copy in {self.objects}; "
                                 "retain the file before registering it")
            if sha256_file(copy) != sha:
                raise ValueError(f"{name}={sha}: its retained copy in {self.objects} is not "
                                 "that file (modified); retain the file again to register it")
        with self._locked():
            entries = self.entries()
            for problem in self.anchor().problems:  # never extend a rewritten history
                raise ValueError(f"refusing to append to {self.path}: {problem.message}")
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
        entries, problems = self.check_chain()
        problems += self._check_copies(entries)
        problems += self._check_results(entries)
        return problems

    def _problem(self, location: str, message: str) -> Problem:
        return Problem(self.key, location, message)

    def check_chain(self) -> tuple[list[tuple[int, dict]], list[Problem]]:
        """Parse every line and check hash, link, seq and version; keep the parsable ones."""
        entries, problems = [], []
        prev_hash, next_seq, versions = GENESIS_HASH, 0, Counter()
        for lineno, line in enumerate(self._lines(), start=1):
            where = f"{layout.REGISTER_FILE} line {lineno}"
            try:
                entry = json.loads(decode_line(line))
            except json.JSONDecodeError as exc:
                problems.append(self._problem(where, f"not valid JSON ({exc.msg}): a corrupt "
                                              "or truncated line"))
                continue
            except ValueError as exc:
                problems.append(self._problem(where, f"{exc}: a corrupt line"))
                continue
            missing = [f for f in ENTRY_FIELDS if not isinstance(entry, dict) or f not in entry]
            if missing:
                problems.append(self._problem(where, f"not a register entry: missing {missing}"))
                continue
            problems += [self._problem(where, m)
                         for m in entry_faults(entry, prev_hash, next_seq, versions)
                         + key_faults(self.root, self.key, entry)]
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
                if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
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
        copy = self.objects / sha if isinstance(sha, str) and SHA256_RE.fullmatch(sha) \
            else None
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
        """results/{key}/ must hold, for each registered stage, its latest version: both
        files present, and equal to that entry (not an older one, not an unregistered one)."""
        problems = []
        for stage in STAGES:
            artifact = layout.artifact_path(self.root, self.key, stage)
            mine = [e for _, e in entries if e["stage"] == stage]
            for path, field in ((artifact, "sha256"),
                                (layout.sidecar_path(artifact), "sidecar_sha256")):
                where = path.relative_to(self.root).as_posix()
                fault = results_fault(path, field, stage, mine)
                if fault:
                    problems.append(self._problem(where, fault))
        return problems

    def n_copies(self) -> int:
        if not self.objects.is_dir():
            return 0
        return sum(1 for p in self.objects.iterdir() if p.is_file() and not p.name.startswith("."))
