"""What an attacker with write access to a working tree does to the evidence, for tests.

Each helper leaves the tampering as consistent as it can be made without the anchor in
git: a rollback puts matching retained files back; a forgery retains its copies and
appends a correctly hashed and chained entry.
"""

from __future__ import annotations

from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import canonical_json
from inferlab.evidence.provenance import sidecar_bytes
from inferlab.evidence.register import Register, entry_hash


def rollback_results(root: Path, key: str, stage: str, version: int) -> None:
    """Put version ``version``'s retained artifact and sidecar back into results/."""
    register = Register(root, key)
    entry = register.entry(stage, version)
    artifact = layout.artifact_path(root, key, stage)
    artifact.write_bytes(register.copy_path(entry["sha256"]).read_bytes())
    layout.sidecar_path(artifact).write_bytes(
        register.copy_path(entry["sidecar_sha256"]).read_bytes())


def delete_tail(root: Path, key: str, n: int) -> None:
    """Drop the register's last ``n`` lines."""
    path = layout.register_path(root, key)
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:-n]))


def forge(root: Path, key: str, stage: str, content: bytes,
          provenance: dict | None = None) -> dict:
    """Append, by hand, a consistent entry for a forged artifact: retained copies, results
    files, a correctly hashed and chained line with the latest version's provenance.
    ``provenance`` (if given) goes into the entry but not into the sidecar."""
    register = Register(root, key)
    entries = register.entries()
    latest = register.latest(stage)
    artifact = layout.artifact_path(root, key, stage)
    sidecar = sidecar_bytes(stage, artifact.name, content, latest["provenance"])
    artifact.write_bytes(content)
    layout.sidecar_path(artifact).write_bytes(sidecar)
    entry = {"seq": len(entries), "stage": stage, "version": latest["version"] + 1,
             "path": latest["path"], "sha256": register.retain(content),
             "sidecar_sha256": register.retain(sidecar),
             "provenance": provenance or latest["provenance"],
             "prev_hash": entries[-1]["entry_hash"]}
    entry["entry_hash"] = entry_hash(entry)
    with open(register.path, "ab") as f:
        f.write(canonical_json(entry) + b"\n")
    return entry
