"""A stage's kept versions, read back from the register: the input of the series stage.

A version is read when its kept file hashes to its line's sha256, decodes under the
stage's schema and holds values a clock can measure; every other one is left out with
the version and why (``Versions.left_out``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register

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


@dataclass
class Versions:
    """The kept versions of one stage on one key, oldest first, and what was left out."""

    key: str
    stage: str
    found: list[Version] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # "prefill v7: <why>"


def _nonfinite(table: artifacts.Table) -> str | None:
    frame = table.frame
    if "status" not in frame:
        return None
    ok = (frame["status"] == "ok").fillna(False)
    for column in (c for c in POOLED if c in frame):
        values = frame.loc[ok, column].dropna().astype(float)
        low, high = PLAUSIBLE[column]
        bad = values[~values.map(math.isfinite) | (values <= 0)]
        if len(bad):
            return f"{column}={float(bad.iloc[0])!r} in an ok row: not a time or ratio"
        bad = values[(values < low) | (values > high)]
        if len(bad):
            return (f"{column}={float(bad.iloc[0])!r} in an ok row: outside [{low:g}, {high:g}], "
                    "which no clock measures")
    for column in (c for c in PROCESS_SD if c in frame):
        values = frame.loc[ok, column].dropna().astype(float)
        bad = values[~values.map(math.isfinite) | (values < 0) | (values > MAX_PROCESS_SD)]
        if len(bad):
            return (f"{column}={float(bad.iloc[0])!r} in an ok row: a processes' sd (of the "
                    f"log time) outside [0, {MAX_PROCESS_SD:g}], which no timing gives")
    return None


def kept_versions(root: Path | str, key: str, stage: str) -> Versions:
    """Every readable version of ``stage`` on ``key``, oldest first, and the others'
    reasons."""
    out = Versions(key, stage)
    register = Register(root, key)
    try:
        entries = register.history(stage)
    except ValueError as exc:  # a line that is not an entry: the register says which
        out.left_out.append(f"{key}: {exc}: no earlier version is read")
        return out
    for entry in entries:
        name = f"{key} {stage} v{entry['version']}"
        try:
            table = artifacts.decode(stage, register.read_copy(entry))
        except (ValueError, UnicodeDecodeError) as exc:
            out.left_out.append(f"{name}: {exc}")
            continue
        why = _nonfinite(table)
        if why:
            out.left_out.append(f"{name}: {why}")
            continue
        out.found.append(Version(entry, table))
    return out


def kind_keys(root: Path | str, key: str) -> list[str]:
    """The book keys (no ``@grid``) whose latest register entry has ``key``'s device
    class and logical CPUs, ``key`` included."""
    def kind(k: str) -> tuple | None:
        try:
            entries = Register(root, k).entries()
        except ValueError:
            return None
        if not entries:
            return None
        env = (entries[-1].get("provenance") or {}).get("environment") or {}
        return (env.get("device"), (env.get("host") or {}).get("logical_cpus"))

    mine = kind(key)
    return [k for k in layout.keys(root) if "@" not in k and (k == key or kind(k) == mine)]
