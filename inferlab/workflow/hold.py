"""A defined point at which a stage can be stopped, for the tests of interruption.

A test that interrupts a run (a Ctrl-C, a SIGKILL) must land its signal while the stage
runs, not race the stage's end: the smoke run once finished ("6 of 6 steps done") before
the Ctrl-C arrived, under load. With ``INFERLAB_HOLD=<stage>:<file>`` in the environment,
the runner stops stage ``<stage>`` after it has computed its artifact and before anything
is written (``hold_before_write``): it creates ``<file>``, the state the test waits for,
and sleeps until a signal ends it. Snakemake has removed the old outputs by then, so the
test sees exactly the state it means to. Unset (always, outside tests), it does nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HOLD_VARIABLE = "INFERLAB_HOLD"


def hold_before_write(stage: str, environ: dict | None = None) -> None:
    """Hold stage ``stage`` here if ``INFERLAB_HOLD`` names it (see the module)."""
    value = (os.environ if environ is None else environ).get(HOLD_VARIABLE, "")
    name, sep, marker = value.partition(":")
    if not sep or name != stage:
        return
    if not marker:
        raise ValueError(f"{HOLD_VARIABLE}={value!r}: give <stage>:<file>, the file to create "
                         "once the stage is held")
    Path(marker).write_text(f"{os.getpid()}\n", encoding="utf-8")
    while True:  # a signal ends it: Ctrl-C raises KeyboardInterrupt, SIGKILL kills
        time.sleep(60)
