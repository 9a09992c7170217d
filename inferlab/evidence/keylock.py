"""The lock of one results key's register: who may write it, and when a reader may read it.

A writer takes an exclusive ``flock`` on the folder ``evidence/{key}/`` itself, a reader a
shared one, so two stages of one machine running in parallel (``snakemake --cores 2``)
cannot fork the chain and a reader never sees half a line that is still being written.

The lock is the folder, not a file in it: a lock file (``.lock``, as before issue 35) can
be deleted while a write holds it (``git clean -x`` does), and the next writer then locks
a new file and is not serialised with the first. The folder holds the register itself, so
nothing deletes it while there is a register to protect; ``flock`` works on a folder's
descriptor (opened read-only) on every local file system Linux has.

Taken again inside itself (a write reads the register) the lock is already held by this
thread and the inner take is a no-op. A reader that cannot open the folder (none yet, or
a checkout it may not read) reads without the lock: there is no writer to wait for.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HELD = threading.local()  # folders this thread holds the lock of


@contextmanager
def key_lock(folder: Path | str, shared: bool = False) -> Iterator[None]:
    """Hold the lock of the register folder ``folder``: exclusive (a writer, which creates
    the folder) or ``shared`` (a reader)."""
    folder = Path(folder)
    if not shared:
        folder.mkdir(parents=True, exist_ok=True)
    name = str(folder.resolve())
    held = _HELD.__dict__.setdefault("names", set())
    if name in held:
        yield
        return
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY)
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
