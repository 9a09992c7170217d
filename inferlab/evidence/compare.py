"""Between runs: a timing artifact against the previous version made the same way.

A benchmark is only as good as its second run. The register keeps every version, so
for the latest version of a timing stage this module finds the previous one made with
the same code, the same effective config and on the same hardware (``comparable``),
and gives, per point (the stage's ``key_columns``), the relative difference of each
measured column between the two: ``inferlab history STAGE --compare`` prints it, and
between-run claims are judged on it.

Only entries that are whole register entries (``chain``: hash, link and schema) are
compared, and a version is read from its retained copy with that copy's sha256 checked
(``Register.read_copy``): a corrupt copy is named, never read as another table.
``left_out`` says which pairs of versions made alike were left out of a comparison, and
why.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register
from inferlab.measurement import intervals
from inferlab.measurement.environment import hardware

COMPARED = ("median_ms", "ratio")
# each compared column's 95 % interval in the artifact: (low, high)
INTERVALS = {"median_ms": ("ci_low_ms", "ci_high_ms"), "ratio": ("ratio_ci_low", "ratio_ci_high")}


def _made_alike(a: dict, b: dict) -> bool:
    """Same code, effective config and hardware (threads included: ``environment.hardware``)."""
    pa, pb = a["provenance"], b["provenance"]
    return (pa["code_sha256"] == pb["code_sha256"] and pa["config_sha256"] == pb["config_sha256"]
            and hardware(pa.get("environment") or {}) == hardware(pb.get("environment") or {}))


def whole_history(register: Register, stage: str) -> tuple[list[dict], list[str]]:
    """The versions of ``stage`` that are whole entries (``Register.check_chain`` finds no
    fault on their line), and a line per version left out, saying why."""
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r} is not a stage; expected one of {list(STAGES)}")
    entries, problems = register.check_chain()
    bad = {p.location: p.message for p in problems}
    whole, left = [], []
    for lineno, e in entries:
        if e["stage"] != stage:
            continue
        why = bad.get(f"{layout.REGISTER_FILE} line {lineno}")
        if why is None:
            whole.append(e)
        else:
            left.append(f"{stage} version {e['version']} (register line {lineno}): {why}")
    return whole, left


def comparable(register: Register, stage: str, entry: dict | None = None) -> dict | None:
    """The latest version of ``stage`` before ``entry`` (default: the latest one) that
    was made with the same code, config and hardware; None if there is none (also when
    ``entry`` is no whole register entry)."""
    history, _ = whole_history(register, stage)
    entry = entry or (history[-1] if history else None)
    if entry is None or entry not in history:
        return None
    earlier = [e for e in history if e["version"] < entry["version"] and _made_alike(e, entry)]
    return earlier[-1] if earlier else None


def table_of(register: Register, stage: str, entry: dict) -> artifacts.Table:
    """A registered version's table, read from the register's retained copy (its sha256
    checked); a ValueError naming the version and the copy when it cannot be."""
    data = register.read_copy(entry)
    try:
        return artifacts.decode(stage, data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the retained copy of {stage} version {entry['version']} "
                         f"({register.copy_path(entry['sha256']).relative_to(register.root)}"
                         f") is not a {stage} table as its schema describes it: {exc}") from None


def left_out(root: Path | str, key: str, stage: str) -> list[str]:
    """Why versions of ``stage`` on ``key`` are missing from its comparisons: a version
    that is no whole entry, a pair made alike whose retained copy cannot be read."""
    register = Register(root, key)
    history, lines = whole_history(register, stage)
    for entry in history:
        previous = comparable(register, stage, entry)
        if previous is None:
            continue
        for version in (previous, entry):
            try:
                table_of(register, stage, version)
            except ValueError as exc:
                lines.append(f"{stage} {previous['version']} → {entry['version']}: {exc}")
                break
    return lines


def differences(stage: str, old: artifacts.Table, new: artifacts.Table) -> pd.DataFrame:
    """Per point present in both (status ok in both): each compared column's old and new
    value, the relative difference (new - old) / old, the symmetric spread max / min - 1
    (the chapter's "differed by 67 per cent": 13.0 against 7.8 ms), both runs' 95 %
    intervals and ``<c>_agree``: each run's value lies inside the other run's interval
    (NA where an interval is missing). A "95 %" interval that holds on the next run agrees
    at about 95 % of the points; one built from one process's rounds agreed at 35-54 %."""
    keys = list(STAGES[stage].key_columns)
    cols = [c for c in COMPARED if c in new.frame.columns]
    bounds = [b for c in cols for b in INTERVALS[c] if b in new.frame and b in old.frame]
    frames = [t.frame[t.frame["status"] == "ok"][keys + cols + bounds] for t in (old, new)]
    merged = frames[0].merge(frames[1], on=keys, suffixes=("_old", "_new"))
    for c in cols:
        old_v, new_v = merged[f"{c}_old"].astype(float), merged[f"{c}_new"].astype(float)
        merged[f"{c}_diff"] = (new_v - old_v) / old_v
        merged[f"{c}_spread"] = pd.concat([old_v, new_v], axis=1).max(axis=1) / \
            pd.concat([old_v, new_v], axis=1).min(axis=1) - 1
        if all(b in bounds for b in INTERVALS[c]):
            merged[f"{c}_agree"] = _agree(merged, c, *INTERVALS[c])
    merged["status"] = "ok"
    return merged


def _inside(value: pd.Series, low: pd.Series, high: pd.Series) -> pd.Series:
    return (low.astype(float) <= value.astype(float)) & (value.astype(float) <= high.astype(float))


def _agree(merged: pd.DataFrame, c: str, low: str, high: str) -> pd.Series:
    """Each run's ``c`` inside the other's [low, high]; NA where a bound is missing."""
    agree = (_inside(merged[f"{c}_new"], merged[f"{low}_old"], merged[f"{high}_old"])
             & _inside(merged[f"{c}_old"], merged[f"{low}_new"], merged[f"{high}_new"]))
    known = merged[[f"{b}_{w}" for b in (low, high) for w in ("old", "new")]].notna().all(axis=1)
    return agree.astype("boolean").where(known, pd.NA)


def pair_points(stage: str, old: artifacts.Table,
                new: artifacts.Table) -> list[tuple[float, float]]:
    """Per paired ratio of two versions (status ok, not a case against itself, an interval
    over two or more processes in both): (d², v), d = ln(new / old) and v the variance both
    runs' intervals allot it (``intervals.process_var``), for ``intervals.run_variance``."""
    keys = list(STAGES[stage].key_columns)
    cols = ["impl", "ratio_to", "ratio", "ratio_ci_high", "workers", "ratio_process_sd"]
    frames = []
    for t in (old, new):
        if not all(c in t.frame for c in cols[:5]):
            return []
        f = t.frame[(t.frame["status"] == "ok") & (t.frame["ratio_to"] != t.frame["impl"])]
        frames.append(f.reindex(columns=list(dict.fromkeys(keys + cols))))
    both = frames[0].merge(frames[1], on=keys, suffixes=("_old", "_new"))
    points = []
    for _, r in both.iterrows():
        allotted = [intervals.process_var(*(_number(r[f"{c}_{w}"]) for c in
                                            ("ratio", "ratio_ci_high", "workers",
                                             "ratio_process_sd")))
                    for w in ("old", "new")]
        if None in allotted:
            continue
        d = math.log(float(r["ratio_new"]) / float(r["ratio_old"]))
        points.append((d * d, sum(allotted)))
    return points


def _number(value) -> float | None:
    return None if pd.isna(value) else float(value)


# the stages whose tables pair their times (ratio): the timing stages the series pools
PAIRED = tuple(STAGES["series"].reads)


def check_paired(stage: str, flag: str) -> None:
    """A ValueError unless ``stage`` pairs its times (R8-19: probe, timed but JSON, crashed
    --record with an AttributeError; model printed rows of "0 paired ratios")."""
    if stage not in PAIRED:
        raise ValueError(f"{flag} compares paired ratios, which only {', '.join(PAIRED)} "
                         f"have; {stage!r} has none")


def compare_latest(root: Path | str, key: str, stage: str) -> tuple[dict, dict, pd.DataFrame]:
    """(previous entry, latest entry, differences) for ``stage`` on ``key``; ValueError
    saying why when there is no comparable previous version."""
    check_paired(stage, "--compare")
    register = Register(root, key)
    latest = register.latest(stage)
    if latest is None:
        raise ValueError(f"{key!r} has no registered {stage} version")
    whole, broken = whole_history(register, stage)
    if latest not in whole:
        raise ValueError(f"{broken[-1]}; `inferlab verify` says what else is wrong")
    previous = comparable(register, stage, latest)
    if previous is None:
        raise ValueError(f"{stage} version {latest['version']} of {key!r} has no earlier "
                         "version made with the same code, config and hardware")
    old, new = table_of(register, stage, previous), table_of(register, stage, latest)
    return previous, latest, differences(stage, old, new)


def format_differences(previous: dict, latest: dict, diffs: pd.DataFrame, stage: str) -> str:
    keys = [k for k in STAGES[stage].key_columns if diffs[k].nunique(dropna=False) > 1]
    lines = [f"{stage}: version {latest['version']} against version {previous['version']} "
             "(same code, config and hardware)"]
    header = keys + [f"{c} {w}" for c in COMPARED if f"{c}_diff" in diffs
                     for w in ("old", "new", "diff")]
    rows = [header]
    for _, r in diffs.iterrows():
        cells = [str(r[k]) for k in keys]
        for c in COMPARED:
            if f"{c}_diff" in diffs:
                d = r[f"{c}_diff"]
                cells += [f"{r[f'{c}_old']:.4g}", f"{r[f'{c}_new']:.4g}",
                          "—" if math.isnan(d) else f"{d:+.1%}"]
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    for c in COMPARED:
        if f"{c}_diff" in diffs and diffs[f"{c}_diff"].notna().any():
            a = diffs[f"{c}_diff"].abs()
            lines.append(f"{c}: median |diff| {a.median():.1%}, max {a.max():.1%} over "
                         f"{int(a.notna().sum())} points" + agreement(diffs, c))
    return "\n".join(lines)


def agreement(diffs: pd.DataFrame, c: str) -> str:
    """'; each run inside the other's 95 % interval at 21 of 24 points (88 %)', counted
    over the points that have both intervals (a ratio of 1, a case against itself, not
    counted); '' when there are none."""
    if f"{c}_agree" not in diffs:
        return ""
    known = diffs[f"{c}_agree"].dropna()
    if c == "ratio":
        known = known[diffs.loc[known.index, "ratio_new"].astype(float) != 1.0]
    if not len(known):
        return ""
    n, ok = len(known), int(known.sum())
    return f"; each run inside the other's 95 % interval at {ok} of {n} points ({ok / n:.0%})"
