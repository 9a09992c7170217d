"""One register entry: its canonical hash, its line as text, and what can be wrong with it
(the checks ``inferlab.evidence.chain`` runs line by line and ``inferlab.evidence.trust``
asks of results), its schema and its sidecar's (``schemas/register_entry.schema.json``,
``schemas/sidecar.schema.json``) applied when they are read.

The canonical form is JSON with sorted keys, no whitespace and every non-ASCII character
escaped (``files.canonical_json``); a register written before that (issue 23) hashed the
raw UTF-8 form, which ``hash_matches`` still accepts, so old evidence keeps verifying.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from inferlab.core import layout, validation
from inferlab.core.files import canonical_json, sha256_bytes, sha256_file
from inferlab.core.pipeline import STAGES

GENESIS_HASH = "0" * 64
ENTRY_FIELDS = ("seq", "stage", "version", "path", "sha256", "sidecar_sha256", "provenance",
                "prev_hash", "entry_hash")
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # always fullmatch: "$" matches before a "\n"


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


def hash_matches(entry: dict) -> bool:
    """``entry``'s ``entry_hash`` is its content's hash: in today's ASCII-escaped canonical
    form, or in the raw UTF-8 form of registers written before it (same data, so an edit
    still shows in both)."""
    body = {k: v for k, v in entry.items() if k != "entry_hash"}
    for ascii_only in (True, False):  # a lone surrogate has only the ASCII form
        try:
            if entry.get("entry_hash") == sha256_bytes(canonical_json(body, ascii_only)):
                return True
        except ValueError:  # e.g. a NaN written into the line: not canonical JSON
            return False
    return False


def decode_line(line: bytes) -> str:
    """A register line as text; a ValueError saying which byte is not UTF-8."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte 0x{line[exc.start]:02x} at column "
                         f"{exc.start + 1})") from None


def check_sha(name: str, value: str) -> str:
    if not isinstance(value, str) or not SHA256_RE.fullmatch(value):
        raise ValueError(f"{name}={value!r} is not a sha256: expected 64 lowercase hex digits")
    return value


def key_faults(root: Path, key: str, entry: dict) -> list[str]:
    """An entry must be of ``key``: its path in results/{key}/ and its provenance's machine
    and grid the key's (a copied folder of another machine is not this one's)."""
    stage = entry["stage"]
    if stage not in STAGES:
        return []  # already reported
    faults = []
    mine = layout.artifact_path(root, key, stage).relative_to(root).as_posix()
    if entry["path"] != mine:
        faults.append(f"path {entry['path']} is not this key's ({mine}): an entry of another "
                      "results key copied here")
    prov = entry["provenance"] if isinstance(entry["provenance"], dict) else {}
    machine, grid = layout.split_key(key)
    if (prov.get("machine"), prov.get("grid")) != (machine, grid):
        faults.append(f"machine {prov.get('machine')!r}, grid {prov.get('grid')!r} in its "
                      f"provenance is not this key's ({machine!r}, {grid!r})")
    return faults


def is_whole_entry(data: bytes) -> bool:
    try:
        entry = json.loads(data)
        return isinstance(entry, dict) and hash_matches(entry)
    except (ValueError, UnicodeDecodeError):
        return False


def results_fault(path: Path, field: str, stage: str, versions: list[dict]) -> str | None:
    """What is wrong with one results file given its stage's registered versions."""
    if not versions:
        return f"not in the register: no version of {stage} is registered" \
            if path.is_file() else None
    latest = versions[-1]
    if not path.is_file():
        return (f"missing, but the register has version {latest['version']} of {stage}: "
                f"deleted, or its rerun was interrupted; rerun the {stage!r} stage")
    now = sha256_file(path)
    if now == latest[field]:
        return None
    older = [e["version"] for e in versions if e[field] == now]
    if older:
        return (f"is version {older[-1]} of {stage}, but the register's latest is version "
                f"{latest['version']}: rolled back or swapped; rerun the {stage!r} stage")
    return (f"matches no registered version of {stage}: modified after it was registered "
            "(or its write was interrupted)")


def entry_faults(entry: dict, prev_hash: str, next_seq: int, versions: Counter) -> list[str]:
    """What is wrong with one parsed entry, given the entries before it."""
    faults = []
    if not hash_matches(entry):
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
        if not isinstance(entry[field], str) or not SHA256_RE.fullmatch(entry[field]):
            faults.append(f"{field}={entry[field]!r} is not a sha256")
    return faults


# ------------------------------------------------------------------ schemas

ENTRY_SCHEMA, SIDECAR_SCHEMA = "register_entry.schema.json", "sidecar.schema.json"


def _local_refs(node, base: str):
    """``node`` with every ``$ref`` into the schema ``base`` made local (``#/$defs/...``)."""
    if isinstance(node, dict):
        return {k: (v.removeprefix(base) if k == "$ref" and isinstance(v, str)
                    else _local_refs(v, base)) for k, v in node.items()}
    if isinstance(node, list):
        return [_local_refs(v, base) for v in node]
    return node


@functools.cache
def _validator(name: str):
    """A validator of ``schemas/<name>``; the register entry's schema gets the sidecar's
    definitions (its provenance, sha256) copied in, so it needs no schema registry."""
    def load(file: str) -> dict:
        return json.loads(layout.schema_path(file).read_text(encoding="utf-8"))

    schema, sidecar = load(name), load(SIDECAR_SCHEMA)
    if name != SIDECAR_SCHEMA:
        schema = _local_refs(copy.deepcopy(schema), sidecar["$id"])
        schema["$defs"] = {**sidecar["$defs"], **schema.get("$defs", {})}
    return validation.validator(schema, strict_integers=True)


def schema_fault(name: str, data) -> str | None:
    """What ``data`` breaks of ``schemas/<name>`` ('provenance: 'code_sha256' is a required
    property'), or None when it is what the schema describes."""
    error = validation.best_match(_validator(name).iter_errors(data))
    if error is None:
        return None
    at = "/".join(map(str, error.absolute_path)) or "(top level)"
    return f"{at}: {error.message[:300]} (schemas/{name})"
