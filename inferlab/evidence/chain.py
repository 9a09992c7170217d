"""The register read as a chain: every line parsed and checked against the line before it.

Each line must be JSON, a whole register entry as ``schemas/register_entry.schema.json``
describes it (provenance included: a register whose entries lack ``code_sha256`` is
broken, and nothing downstream meets a ``KeyError``), its ``entry_hash`` the hash of its
content, its ``prev_hash`` the line before's, its ``seq`` and version the next ones, and
of this results key (``entries.key_faults``). ``check_lines`` keeps every entry it could
parse, so the checks of files and copies still run on a register with one bad line.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import sha256_bytes
from inferlab.evidence.entries import (
    ENTRY_FIELDS,
    ENTRY_SCHEMA,
    GENESIS_HASH,
    Problem,
    decode_line,
    entry_faults,
    key_faults,
    schema_fault,
)

_CHECKED: dict[tuple, tuple[list, list]] = {}  # check_lines' answers, oldest first
# sha256 of lines already found to be what the schema describes: a line's bytes decide it,
# and a register is checked many times in one process (each stage's inputs, adopt, report)
_SCHEMA_OK: set[str] = set()


def _schema_fault(line: bytes, entry: dict) -> str | None:
    digest = sha256_bytes(line)
    if digest in _SCHEMA_OK:
        return None
    fault = schema_fault(ENTRY_SCHEMA, entry)
    if fault is None:
        _SCHEMA_OK.add(digest)
    return fault


def parse_line(line: bytes) -> tuple[dict | None, str | None]:
    """(the entry, None), or (None, what is wrong with the line)."""
    try:
        entry = json.loads(decode_line(line))
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}): a corrupt or truncated line"
    except ValueError as exc:
        return None, f"{exc}: a corrupt line"
    missing = [f for f in ENTRY_FIELDS if not isinstance(entry, dict) or f not in entry]
    if missing:
        return None, f"not a register entry: missing {missing}"
    return entry, None


def check_lines(root: Path, key: str,
                lines: list[bytes]) -> tuple[list[tuple[int, dict]], list[Problem]]:
    """Parse every line of the register of ``key`` and check hash, link, seq, version and
    schema; return the parsable entries (with their line numbers) and the problems. The
    same lines give the same answer: it is kept for the next ask (new lists each time)."""
    memo = (str(root), key, sha256_bytes(b"\n".join(lines)), len(lines))
    if memo not in _CHECKED:
        if len(_CHECKED) >= 32:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[memo] = _check(root, key, lines)
    entries, problems = _CHECKED[memo]
    return list(entries), list(problems)


def _check(root: Path, key: str,
           lines: list[bytes]) -> tuple[list[tuple[int, dict]], list[Problem]]:
    entries, problems = [], []
    prev_hash, next_seq, versions = GENESIS_HASH, 0, Counter()
    for lineno, line in enumerate(lines, start=1):
        where = f"{layout.REGISTER_FILE} line {lineno}"
        entry, fault = parse_line(line)
        if entry is None:
            problems.append(Problem(key, where, fault))
            continue
        faults = entry_faults(entry, prev_hash, next_seq, versions) + key_faults(root, key, entry)
        if not faults:  # the schema last: a fault found above is said once, in its words
            fault = _schema_fault(line, entry)
            faults = [f"not a register entry as its schema describes it: {fault}"] if fault \
                else []
        problems += [Problem(key, where, m) for m in faults]
        prev_hash = entry["entry_hash"]
        if isinstance(entry["stage"], str) and isinstance(entry["version"], int):
            versions[entry["stage"]] = entry["version"]
        next_seq = entry["seq"] + 1 if isinstance(entry["seq"], int) else next_seq + 1
        entries.append((lineno, entry))
    return entries, problems
