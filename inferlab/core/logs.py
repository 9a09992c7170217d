"""A stage's log: each line to stderr and, when given, to the rule's log file (flushed
line by line, for ``tail -f``, each line there after the seconds since the log opened, so
a log brought back from another machine says where a stage's time went); a log file that
cannot be written stops being written, and never hides the stage's own error."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path


class Log:
    """Lines to stderr and, when given, to a log file."""

    def __init__(self, path: Path | None):
        self._file = None
        self._opened = time.monotonic()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def __call__(self, line: str, echo: bool = True) -> None:
        if echo:
            print(line, file=sys.stderr, flush=True)
        if self._file:
            try:
                self._file.write(f"[{time.monotonic() - self._opened:7.1f}s] {line}\n")
                self._file.flush()
            except OSError as exc:  # a full disk must not hide the stage's own error
                print(f"(log file {self._file.name} not written further: {exc})",
                      file=sys.stderr, flush=True)
                self.close()

    def close(self) -> None:
        file, self._file = self._file, None
        if file:
            with contextlib.suppress(OSError):
                file.close()
