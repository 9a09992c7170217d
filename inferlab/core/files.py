"""Bytes on disk that must survive a kill or a full disk, hashes, and what git says.

A write here either completes (written, fsynced) or raises and leaves the target as it was.
A check that needs git and cannot run it says why (``CannotCheck``) instead of looking
like "git does not track it".
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from inferlab.core import layout

TMP_SUFFIX = ".tmp"      # a killed write's temp file is hidden (.name.pid.x.tmp), git-ignored
BACKUP_SUFFIX = ".bak"
# file systems without hard links (FAT, some network mounts) say so with these
NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def reject_nonfinite(obj, where: str = "obj") -> None:
    """json.dumps(allow_nan=False) says only that a float is out of range; this says where."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where}={obj!r}: NaN and infinity have no canonical JSON form; "
                         "use None (null) for a value that was not measured")
    if isinstance(obj, dict):
        for key, value in obj.items():
            reject_nonfinite(value, f"{where}[{key!r}]")
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            reject_nonfinite(value, f"{where}[{i}]")


def canonical_json(obj) -> bytes:
    """JSON with sorted keys and no whitespace, every non-ASCII character escaped: equal
    data gives equal bytes, and no byte of it is a line break but the ones JSON escapes."""
    reject_nonfinite(obj)
    try:
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"obj is not JSON data: {exc}") from exc
    return text.encode("utf-8")


def utc_now_iso() -> str:
    """UTC time as ISO 8601 with a Z, to the second (e.g. 2025-01-31T12:00:00Z)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def relative(path: Path | str, root: Path | str) -> str:
    """Path relative to root in POSIX form; a path outside root stays absolute."""
    path, root = Path(path).resolve(), Path(root).resolve()
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _write_all(fd: int, data: bytes, name: str) -> None:
    """os.write until every byte is out; a write that makes no progress is ENOSPC."""
    view, done = memoryview(data), 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror} writing {name} ({done} of "
                                     f"{len(data)} bytes written)") from exc
        if n <= 0:
            raise OSError(errno.ENOSPC, f"no progress writing {name} ({done} of "
                                        f"{len(data)} bytes written)")
        done += n


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.
    The temp file sits in the same folder (os.replace is atomic only within one file
    system); the folder is fsynced after the rename, so it survives a power cut."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.",
                               suffix=TMP_SUFFIX)
    try:
        try:
            _write_all(fd, data, str(path))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_append(path: Path, line: bytes) -> None:
    """Append ``line`` (ending in a newline) to ``path`` completely, or not at all: on
    any failure the file is truncated back to the length it had, and the error raised."""
    if not line.endswith(b"\n"):
        raise ValueError("line must end with a newline")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, line, str(path))
            os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, size)
            os.fsync(fd)
            raise
    finally:
        os.close(fd)


@contextmanager
def restored_on_failure(paths: list[Path]) -> Iterator[None]:
    """Files replaced inside the block keep their old content if the block raises.

    Each existing file gets a hard link (it needs no free space: a full disk cannot stop
    the restore), renamed back over the file on failure; a file that did not exist is
    removed. Without hard links a failed block leaves the new file (unregistered, which
    ``inferlab verify`` reports).
    """
    paths = [Path(p) for p in paths]
    new = [p for p in paths if not p.is_file()]
    backups: dict[Path, Path] = {}
    try:
        for path in paths:
            if path.is_file():
                backup = path.with_name(f".{path.name}.{os.getpid()}{BACKUP_SUFFIX}")
                backup.unlink(missing_ok=True)  # a dead process of the same pid left it
                try:
                    os.link(path, backup)  # a full disk may refuse even a name
                except OSError as exc:
                    if exc.errno not in NO_HARD_LINKS:
                        raise
                    continue  # no backup: a failed write leaves the new file, unregistered
                backups[path] = backup
    except BaseException:
        for backup in backups.values():
            backup.unlink(missing_ok=True)
        raise
    try:
        yield
    except BaseException:
        for path, backup in backups.items():
            os.replace(backup, path)
            backup.unlink(missing_ok=True)  # rename does nothing if both name one file
        for path in new:
            path.unlink(missing_ok=True)
        raise
    for backup in backups.values():
        backup.unlink()


# variables that point git at another repository than the one it finds from ``root`` (a
# git hook that runs `make` sets GIT_DIR): what they name is not this checkout
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")


def _ask(root: Path | str, *args: str) -> subprocess.CompletedProcess:
    """``git -C root ARGS`` (bytes out); ``CannotCheck`` when git cannot start."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECTS}
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              timeout=30, check=False, env=env)
    except FileNotFoundError:
        raise CannotCheck("git is not on the PATH") from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise CannotCheck(f"git did not run ({exc})") from None


def _said(out: subprocess.CompletedProcess) -> str:
    """git's first line of complaint."""
    text = out.stderr.decode(errors="replace").strip()
    return (text.splitlines() or [f"exit status {out.returncode}"])[0][:300]


class CannotCheck(Exception):
    """A check that needs git could not run it (``str()`` says why); callers that vouch
    for something (verify, adopt) fail on it."""


def git_state(root: Path | str) -> dict:
    """{"commit": HEAD, "dirty": uncommitted code changes}, each None when unknown."""
    # results, evidence and the report are outputs, not code: they do not make a tree dirty
    not_code = [f":(exclude){folder}" for folder in layout.OUTPUT_DIRS]
    try:
        head = _ask(root, "rev-parse", "--verify", "HEAD")
        status = _ask(root, "status", "--porcelain", "--", ".", *not_code)
    except CannotCheck:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.decode().strip() or None if head.returncode == 0 else None,
            "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def git_file(root: Path | str, rev: str, path: str) -> bytes | None:
    """The bytes of ``path`` (relative to ``root``) at ``rev``; None when git answers that
    there is none; ``CannotCheck`` when git cannot answer."""
    out = _ask(root, "show", f"{rev}:./{path}")
    if out.returncode == 0:
        return out.stdout
    if any(words in _said(out) for words in ("not a git repository", "does not exist",
                                             "exists on disk, but not in", "invalid object",
                                             "bad revision", "unknown revision")):
        return None
    raise CannotCheck(f"git show {rev}:{path} failed: {_said(out)}")


def git_changed(root: Path | str, paths: list[str]) -> set[str]:
    """The files under ``paths`` (relative to ``root``) that differ from HEAD, untracked
    included; ``CannotCheck`` when git cannot answer or there is no repository."""
    out = _ask(root, "status", "--porcelain", "-z", "--untracked-files=all", "--no-renames",
               "--", *paths)
    if out.returncode != 0:
        raise CannotCheck(f"git status failed: {_said(out)}")
    # "XY path\0" per file, the path relative to the repository's top, not to root
    prefix = _ask(root, "rev-parse", "--show-prefix").stdout.decode().strip()
    return {record[3:].removeprefix(prefix)
            for record in out.stdout.decode(errors="replace").split("\0") if len(record) > 3}
