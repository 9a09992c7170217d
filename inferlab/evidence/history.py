"""A stage's earlier versions, read back from the register only where they can be trusted:
the input of the series stage, which pools a machine's runs.

A version is read when its chain holds (``Register.check_chain``: every entry's hash and
link), its retained copy's bytes hash to the entry's sha256 and decode under the schema,
and it is *anchored* (in the register committed at git HEAD) or was written by this
checkout itself (``record_own``: the runner notes each entry it appends in
``.inferlab/own-writes.jsonl``, which git ignores, so a register tail merged from elsewhere
or forged by hand is not this checkout's). Everything left out is said, with the version
and why (``Versions.left_out``): a retained copy that was tampered with, a version nobody
here wrote or committed, a value that is not finite or that no clock measures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import sha256_bytes
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register

OWN_WRITES = Path(".inferlab") / "own-writes.jsonl"
# the columns a series pools: a version with one of them not finite in an ok row is left out
POOLED = ("median_ms", "ratio", "causal_over_full")
# ... and one whose value no clock measures: a time under a nanosecond (perf_counter's and
# CUDA events' resolution, 1e-6 ms) or over 1e10 ms (four months: longer than any run),
# a ratio of two such times outside [1e-16, 1e16]. A finite 1e300 passed the old check and
# overflowed the pooling (exp of its log's interval) after the whole timing run.
PLAUSIBLE = {"median_ms": (1e-6, 1e10), "ratio": (1e-16, 1e16),
             "causal_over_full": (1e-16, 1e16)}
# ... and the processes' sd of each (of the log value): finite, and at most 5 (a factor of
# e^5 = 148 between two processes of one run is no timing; 1e3 passed and widened every
# interval of the stage to about [1e-129, 1e129], 1e200 overflowed the pooling)
PROCESS_SD = ("process_sd", "ratio_process_sd", "causal_over_full_process_sd")
MAX_PROCESS_SD = 5.0


@dataclass(frozen=True)
class Version:
    entry: dict
    table: artifacts.Table
    anchored: bool


@dataclass
class Versions:
    """The trusted versions of one stage on one key, oldest first, and what was left out."""

    key: str
    stage: str
    found: list[Version] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # "prefill v7: <why>"


def record_own(root: Path | str, key: str, entry: dict) -> None:
    """Note that this checkout appended ``entry`` to ``key``'s register."""
    path = Path(root) / OWN_WRITES
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"key": key, "entry_hash": entry["entry_hash"]}, sort_keys=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _own(root: Path, key: str) -> set[str]:
    path = root / OWN_WRITES
    if not path.is_file():
        return set()
    own = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn line of a killed write: that entry is not trusted
        if isinstance(record, dict) and record.get("key") == key:
            own.add(record.get("entry_hash"))
    return own


def _nonfinite(table: artifacts.Table) -> str | None:
    frame = table.frame
    ok = frame["status"] == "ok" if "status" in frame else None
    for column in POOLED:
        if column not in frame or ok is None:
            continue
        values = frame.loc[ok.fillna(False), column].dropna().astype(float)
        low, high = PLAUSIBLE[column]
        bad = values[~values.map(math.isfinite) | (values <= 0)]
        if len(bad):
            return f"{column}={float(bad.iloc[0])!r} in an ok row: not a time or ratio"
        bad = values[(values < low) | (values > high)]
        if len(bad):
            return (f"{column}={float(bad.iloc[0])!r} in an ok row: outside [{low:g}, {high:g}], "
                    "which no clock measures")
    for column in PROCESS_SD:
        if column not in frame or ok is None:
            continue
        values = frame.loc[ok.fillna(False), column].dropna().astype(float)
        bad = values[~values.map(math.isfinite) | (values < 0) | (values > MAX_PROCESS_SD)]
        if len(bad):
            return (f"{column}={float(bad.iloc[0])!r} in an ok row: a processes' sd (of the "
                    f"log time) outside [0, {MAX_PROCESS_SD:g}], which no timing gives")
    return None


def trusted_versions(root: Path | str, key: str, stage: str) -> Versions:
    """Every version of ``stage`` on ``key`` that can be trusted (see the module's
    docstring), oldest first, and why each other one was left out."""
    root = Path(root)
    out = Versions(key, stage)
    if not layout.register_path(root, key).is_file():
        return out
    register = Register(root, key)
    chained, problems = register.check_chain()
    if problems:
        out.left_out.append(f"{key}: the register's chain is broken ({problems[0].message}): "
                            "no earlier version is read")
        return out
    anchor = register.anchor()
    committed = 0 if anchor.problems else (anchor.committed or 0)
    own = _own(root, key)
    for _, entry in chained:
        if entry.get("stage") != stage:
            continue
        name = f"{key} {stage} v{entry.get('version')}"
        anchored = entry.get("seq", committed) < committed
        if not anchored and entry.get("entry_hash") not in own:
            out.left_out.append(f"{name}: neither committed nor written by this checkout")
            continue
        try:
            data = register.copy_path(entry["sha256"]).read_bytes()
        except OSError as exc:
            out.left_out.append(f"{name}: its retained copy cannot be read ({exc.strerror})")
            continue
        if sha256_bytes(data) != entry["sha256"]:
            out.left_out.append(f"{name}: its retained copy does not hash to the register's "
                                "sha256 (edited after it was registered)")
            continue
        try:
            table = artifacts.decode(stage, data)
        except (ValueError, UnicodeDecodeError) as exc:
            out.left_out.append(f"{name}: its retained copy is not a valid {stage} table "
                                f"({exc})")
            continue
        why = _nonfinite(table)
        if why:
            out.left_out.append(f"{name}: {why}")
            continue
        out.found.append(Version(entry, table, anchored))
    return out


def kind_keys(root: Path | str, key: str) -> list[str]:
    """The book keys (no ``@grid``) under ``root`` whose machines are of ``key``'s kind:
    the same device class and number of logical CPUs, read from each key's latest
    register entry, ``key`` itself included."""
    def kind(k: str) -> tuple | None:
        try:
            entries = Register(root, k).entries()
        except (OSError, ValueError):
            return None
        if not entries:
            return None
        env = (entries[-1].get("provenance") or {}).get("environment") or {}
        return (env.get("device"), (env.get("host") or {}).get("logical_cpus"))

    mine = kind(key)
    return [k for k in layout.keys(root) if "@" not in k and (k == key or kind(k) == mine)]
