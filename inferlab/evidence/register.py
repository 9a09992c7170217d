"""The evidence register: append-only, hash-chained, one per results key (machine, grid).

``evidence/{key}/register.jsonl`` holds one canonical-JSON entry per line, one per
artifact version: ``seq, stage, version, path, sha256, sidecar_sha256, provenance,
prev_hash, entry_hash`` (``schemas/register_entry.schema.json``). ``entry_hash`` is the
sha256 of the entry without it and ``prev_hash`` the previous line's ``entry_hash``, so
editing, deleting or reordering a line breaks the chain. Every version's artifact and
sidecar are kept in ``evidence/{key}/objects/<sha256>``, so a number printed from version
3 can still be audited after version 7 exists. The retained sidecar repeats the entry's
provenance, so editing the last line and recomputing its hash is still caught.

``Register`` is the register of one key: where its files are, its entries read back,
its retained copies, and the one ``append``. The jobs around it live beside it, each in
its module, and ``Register`` hands them its lines:

* ``keylock``: the key's lock (a ``flock`` on the folder evidence/{key}/), exclusive for
  a writer, shared for a reader;
* ``chain``: every line parsed and checked against the one before it, and its schema;
* ``anchor``: the working register against git (HEAD, the upstream branch and tags, the
  register's committed history), so a deleted tail, a rollback or a fork shows, and
  nothing is appended to such a register;
* ``integrity``: the retained copies, sidecars, results files and derived files;
* ``upkeep``: a torn final line and the debris of killed writes.

Entries appended since the last commit have no anchor yet: a consistent forged entry
there looks like a run made here, which is why ``inferlab adopt`` trusts only committed
entries. Each line goes out on an ``O_APPEND`` descriptor, checked and fsynced, or not
at all (``files.durable_append``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import (
    atomic_write,
    canonical_json,
    durable_append,
    sha256_bytes,
    sha256_file,
    split_lines,
)
from inferlab.core.pipeline import STAGES
from inferlab.evidence import integrity, upkeep
from inferlab.evidence.anchor import Anchor, anchor_of
from inferlab.evidence.chain import check_lines
from inferlab.evidence.entries import (  # noqa: F401 - Problem, entry_hash: the API tests use
    GENESIS_HASH,
    Problem,
    check_sha,
    decode_line,
    entry_hash,
)
from inferlab.evidence.keylock import key_lock


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
        with key_lock(self.dir, shared=True):
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
                        if upkeep.torn_tail(self.root, self.key)
                        else "`inferlab verify` says what else is wrong")
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

    # ---------------------------------------------------------------- retained copies

    def copy_path(self, sha256: str) -> Path:
        """Where the retained copy of the file with this sha256 lives."""
        return self.objects / check_sha("sha256", sha256)

    def read_copy(self, entry: dict, field: str = "sha256") -> bytes:
        """The retained copy of ``entry``'s artifact (or, ``field="sidecar_sha256"``, its
        sidecar), its sha256 checked; a ValueError naming the version and the copy when it
        is missing or no longer that file."""
        what = f"the retained copy of {entry.get('stage')} version {entry.get('version')}"
        sha = entry.get(field)
        path = self.copy_path(sha)
        rel = path.relative_to(self.root).as_posix()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{what} ({rel}) cannot be read: {exc.strerror or exc}; "
                             "`inferlab verify` names every missing copy") from None
        if sha256_bytes(data) != sha:
            raise ValueError(f"{what} ({rel}) is corrupt: its content's sha256 is "
                             f"{sha256_bytes(data)[:12]}…, not the {sha[:12]}… its entry "
                             f"records; restore it from git (`git checkout -- {rel}`), and "
                             "`inferlab verify` names every corrupt copy")
        return data

    def retain(self, data: bytes) -> str:
        """Keep ``data`` as ``objects/<sha256>`` (idempotent); return its sha256."""
        sha = sha256_bytes(data)
        target = self.copy_path(sha)
        if not (target.is_file() and sha256_file(target) == sha):
            atomic_write(target, data)
        return sha

    def n_copies(self) -> int:
        return len(integrity.retained_copies(self.objects))

    # ---------------------------------------------------------------- writing

    @contextmanager
    def locked(self, sweep: bool = True) -> Iterator[None]:
        """Hold the key's lock for a whole write (``provenance.write_artifact``: retained
        copies, results files and the entry), so two stage runs on one key cannot
        interleave, and (``sweep``) remove what killed writes left (``upkeep``) first."""
        with key_lock(self.dir):
            if sweep:
                upkeep.sweep_debris(self.root, self.key)
            yield

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
        with key_lock(self.dir):
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

    def check_chain(self) -> tuple[list[tuple[int, dict]], list[Problem]]:
        """Every line parsed and checked (``chain.check_lines``); the parsable entries."""
        return check_lines(self.root, self.key, self._lines())

    def anchor(self) -> Anchor:
        """The working register against git (``anchor.anchor_of``)."""
        return anchor_of(self.root, self.key, self.path, self._lines())

    def verify(self) -> list[Problem]:
        """Re-hash and re-link everything; return the problems found (empty when clean):
        the chain, the retained copies and sidecars, the results and derived files."""
        entries, problems = self.check_chain()
        problems += integrity.check_copies(self.key, self.objects, entries)
        problems += integrity.check_results(self.root, self.key, entries)
        problems += integrity.check_derived(self.root, self.key, self.objects, entries)
        return problems
