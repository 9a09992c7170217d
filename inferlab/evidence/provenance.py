"""The one provenance writer: every artifact is written here, with its sidecar and, for a
measured stage, its version in the register, so each number in results/ can be traced to
the code, config, inputs, machine and command that produced it.

``write_artifact`` is the only function that writes into ``results/``. The stage has
computed everything in memory first; then, for a measured stage under the register's lock
(``Register.locked``):

1. keep the artifact as its version's file, ``evidence/{key}/{stage}/v{N}.csv``;
2. write the artifact, then its sidecar, into ``results/{key}/``, each atomically (a temp
   file in the same folder, fsynced, then ``os.replace``);
3. append the register line, last.

A kill at any point leaves complete files only; a results file no line names yet is what
``inferlab verify`` and the next stage's input check name. A write that *fails* (a full
disk) raises and leaves the register as it was and results/ holding the files it held
before (``restored_on_failure``). A derived stage writes step 2 only: git keeps its history.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import (
    atomic_write,
    canonical_json,
    git_state,
    reject_nonfinite,
    relative,
    restored_on_failure,
    sha256_bytes,
    utc_now_iso,
)
from inferlab.core.pipeline import STAGES, content_sha256
from inferlab.evidence.register import Register


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
    """The sidecar's provenance dict (docs/contracts.md). ``code_files`` computed the
    artifact (they decide whether it is current); ``bookkeeping_files``, when given, are
    the rest of what ran (recorded, no rerun trigger)."""
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


def sidecar_bytes(stage: str, artifact_name: str, content: bytes, provenance: dict,
                  schema_version: int = 1) -> bytes:
    """The sidecar file: indented for people to read, keys sorted so it is reproducible,
    non-ASCII escaped (as in the register: no character of a value is a line break)."""
    sidecar = {
        "schema": f"inferlab/{stage}",
        "schema_version": schema_version,
        "artifact": artifact_name,
        "sha256": sha256_bytes(content),
        "provenance": provenance,
    }
    reject_nonfinite(sidecar, "sidecar")
    return (json.dumps(sidecar, sort_keys=True, indent=2, ensure_ascii=True,
                       allow_nan=False) + "\n").encode("utf-8")


def _check_write_args(content, seed, command, environment, schema_version) -> None:
    if not isinstance(content, bytes):
        raise ValueError(f"content must be bytes (the artifact as written), got "
                         f"{type(content).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} must be an int")
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"command={command!r} must be the command line that reproduces it")
    if not isinstance(environment, dict):
        raise ValueError(f"environment={environment!r} must be a dict (environment.fingerprint)")
    if isinstance(schema_version, bool) or not isinstance(schema_version, int) \
            or schema_version < 1:
        raise ValueError(f"schema_version={schema_version!r} must be an int >= 1")


def write_artifact(root: Path | str, key: str, stage: str, content: bytes, *,
                   config: dict, code_files: list, inputs: list[Path], seed: int,
                   command: str, environment: dict, schema_version: int = 1,
                   bookkeeping_files: list | None = None) -> dict:
    """Write one stage artifact with its sidecar (and for a measured stage its kept version
    and register line); return the entry (``version`` None for a derived stage). See the
    module docstring for why the steps come in this order.

    Args:
        content: the artifact's bytes (CSV or JSON text), computed in memory by the stage.
        config: the effective stage config; code_files: library and script files that ran;
        inputs: artifacts this one was computed from; environment: environment.fingerprint;
        bookkeeping_files: the other files that ran (runner, register ...), recorded only.
    """
    _check_write_args(content, seed, command, environment, schema_version)
    artifact = layout.artifact_path(root, key, stage)
    provenance = build_provenance(root, key, stage, config=config, code_files=code_files,
                                  inputs=inputs, seed=seed, command=command,
                                  environment=environment, bookkeeping_files=bookkeeping_files)
    sidecar = sidecar_bytes(stage, artifact.name, content, provenance, schema_version)
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
