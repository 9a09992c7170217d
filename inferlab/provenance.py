"""The one provenance writer: every artifact is written here, with its sidecar and its
register entry, so that each number in results/ can be traced to the code, config,
inputs, machine and command that produced it.

``write_artifact`` is the only function that writes into ``results/``. The stage has
computed everything in memory first; this module then makes it durable in an order
that a process killed at any point cannot break:

1. retain the artifact and its sidecar in ``evidence/{machine}/objects/<sha256>``
   (content-addressed, fsynced), so no register entry can ever lack its copies;
2. write the artifact, then its sidecar, into ``results/{machine}/`` atomically (a temp
   file in the same folder, flushed and fsynced, then ``os.replace``), so results/ never
   holds a half-written file; a kill here leaves a hidden ``.<name>.*.tmp`` that the
   next write removes;
3. append the register entry, last: a results file with no entry (a write interrupted
   before step 3, or an edit) is what ``inferlab verify`` flags.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from inferlab import layout

# results, evidence and the report are outputs, not code: they do not make a tree dirty
_NOT_CODE = (":(exclude)results", ":(exclude)evidence", f":(exclude){layout.REPORT_DIR}")
_TMP_SUFFIX = ".tmp"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _reject_nan(obj, where: str = "obj") -> None:
    """json.dumps(allow_nan=False) says only that a float is out of range; this says where."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where}={obj!r}: NaN and infinity have no canonical JSON form; "
                         "use None (null) for a value that was not measured")
    if isinstance(obj, dict):
        for key, value in obj.items():
            _reject_nan(value, f"{where}[{key!r}]")
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            _reject_nan(value, f"{where}[{i}]")


def canonical_json(obj) -> bytes:
    """UTF-8 JSON with sorted keys and no whitespace: equal data gives equal bytes."""
    _reject_nan(obj)
    try:
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"obj is not JSON data: {exc}") from exc
    return text.encode("utf-8")


def config_hash(config: dict) -> str:
    if not isinstance(config, dict):
        raise ValueError(f"config={config!r} must be a dict")
    return sha256_bytes(canonical_json(config))


def _rel(path: Path | str, root: Path | str) -> str:
    """Path relative to root in POSIX form; a path outside root stays absolute."""
    path, root = Path(path).resolve(), Path(root).resolve()
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def file_hashes(files: list[Path | str], root: Path | str) -> dict[str, str]:
    """{relative path: sha256} for each file; a missing file is a ValueError naming it."""
    hashes = {}
    for f in files:
        if not Path(f).is_file():
            raise ValueError(f"file {str(f)!r} does not exist (or is not a file)")
        hashes[_rel(f, root)] = sha256_file(f)
    return dict(sorted(hashes.items()))


def code_hash(files: list[Path | str], root: Path | str) -> str:
    """sha256 over the sorted (relative path, file sha256) pairs: renames count too."""
    return _hash_of_file_hashes(file_hashes(files, root))


def _hash_of_file_hashes(hashes: dict[str, str]) -> str:
    return sha256_bytes(canonical_json(sorted(hashes.items())))


def _git(root: Path | str, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(root: Path | str) -> dict:
    """{"commit": HEAD or None, "dirty": uncommitted code changes or None}; never raises.

    None means unknown: not a git repository, git missing, or (commit) no commit yet.
    """
    head = _git(root, "rev-parse", "--verify", "HEAD")
    status = _git(root, "status", "--porcelain", "--", ".", *_NOT_CODE)
    commit = head.stdout.strip() if head is not None and head.returncode == 0 else None
    dirty = bool(status.stdout.strip()) if status is not None and status.returncode == 0 \
        else None
    return {"commit": commit or None, "dirty": dirty}


def utc_now_iso() -> str:
    """UTC time as ISO 8601 with a Z, to the second (e.g. 2025-01-31T12:00:00Z)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    The temp file sits in the same folder (os.replace is atomic only within one file
    system) and is fsynced before the rename; the folder is fsynced after it so the
    rename itself survives a power cut.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_stale_temps(path: Path) -> None:
    """Remove temp files a killed earlier write of ``path`` left behind."""
    for tmp in path.parent.glob(f".{path.name}.*{_TMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)


def build_provenance(root, machine, stage, *, config, code_files, inputs, seed, command,
                     environment) -> dict:
    """The sidecar's provenance dict (docs/contracts.md)."""
    git = git_state(root)
    code = file_hashes(code_files, root)
    return {
        "stage": stage,
        "machine": machine,
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
    """The sidecar file: indented for people to read, keys sorted so it is reproducible."""
    sidecar = {
        "schema": f"inferlab/{stage}",
        "schema_version": schema_version,
        "artifact": artifact_name,
        "sha256": sha256_bytes(content),
        "provenance": provenance,
    }
    _reject_nan(sidecar, "sidecar")
    return (json.dumps(sidecar, sort_keys=True, indent=2, ensure_ascii=False,
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


def write_artifact(root: Path | str, machine: str, stage: str, content: bytes, *,
                   config: dict, code_files: list, inputs: list[Path], seed: int,
                   command: str, environment: dict, schema_version: int = 1) -> dict:
    """Write one stage artifact with its sidecar, retain both, register them; return the
    register entry. See the module docstring for why the steps come in this order.

    Args:
        content: the artifact's bytes (CSV or JSON text), computed in memory by the stage.
        config: the effective stage config; code_files: library and script files that ran;
        inputs: artifacts this one was computed from; environment: environment.fingerprint.
    """
    from inferlab.register import Register  # register imports this module's helpers

    _check_write_args(content, seed, command, environment, schema_version)
    artifact = layout.artifact_path(root, machine, stage)
    provenance = build_provenance(root, machine, stage, config=config, code_files=code_files,
                                  inputs=inputs, seed=seed, command=command,
                                  environment=environment)
    sidecar = sidecar_bytes(stage, artifact.name, content, provenance, schema_version)
    register = Register(root, machine)
    content_sha, sidecar_sha = register.retain(content), register.retain(sidecar)
    for path, data in ((artifact, content), (layout.sidecar_path(artifact), sidecar)):
        _remove_stale_temps(path)
        atomic_write(path, data)
    return register.append(stage, _rel(artifact, root), content_sha, sidecar_sha, provenance)
