"""What interrupted writes leave in a register's folders, and removing it safely.

* a torn final line: the bytes after the register's last newline, left by an append cut
  short (a power cut: ``files.durable_append`` truncates back on any error it sees);
  ``cut_torn_tail`` removes it, and only it, or adds the newline to a whole entry;
* debris: the temp and backup files (``.<name>.<pid>.*.tmp``, ``.bak``) a killed write
  left in results/{key}/ and objects/; ``sweep_debris`` removes them.

Both run under the key's lock (``keylock``), so no live writer's file or line is ever
taken for debris. ``inferlab verify --repair`` says what each removes.
"""

from __future__ import annotations

import os
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import debris as debris_in
from inferlab.core.files import durable_append
from inferlab.evidence.entries import is_whole_entry
from inferlab.evidence.keylock import key_lock


def torn_tail(root: Path, key: str) -> bytes:
    """The bytes after the last newline: what an interrupted append left (b"" if none)."""
    path = layout.register_path(root, key)
    data = path.read_bytes() if path.is_file() else b""
    return data[data.rfind(b"\n") + 1:]


def cut_torn_tail(root: Path, key: str) -> bytes:
    """Remove a torn final line (the bytes after the last newline); return them.

    A complete entry always ends with its newline, so no complete entry is touched;
    a tail that is a whole, intact entry only lacking its newline gets the newline.
    """
    path = layout.register_path(root, key)
    with key_lock(path.parent):
        tail = torn_tail(root, key)
        if tail and is_whole_entry(tail):
            durable_append(path, b"\n")
            return b""
        if tail:
            fd = os.open(path, os.O_RDWR)
            try:
                os.ftruncate(fd, os.fstat(fd).st_size - len(tail))
                os.fsync(fd)
            finally:
                os.close(fd)
    return tail


def debris(root: Path, key: str) -> list[Path]:
    """Temp and backup files killed writes left in results/{key}/ and objects/."""
    return debris_in(layout.results_dir(root, key)) + debris_in(layout.objects_dir(root, key))


def sweep_debris(root: Path, key: str) -> list[Path]:
    """Remove ``debris`` (under the lock, so no live writer's file); return what went."""
    with key_lock(layout.evidence_dir(root, key)):
        gone = debris(root, key)
        for p in gone:
            p.unlink(missing_ok=True)
    return gone
