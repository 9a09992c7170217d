"""A stage's inputs: each upstream artifact read through the one loader
(``evidence.load_evidence``) once ``trust.doubt`` finds nothing wrong with it and the
inputs it was itself computed from are the files there now (``trust.stale_inputs``: no
claims judged on prefill version 4 with traffic computed from version 1), and, when a
stage fails on them, which of their cells are not finite (the likely cause)."""

from __future__ import annotations

from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import relative
from inferlab.evidence import artifacts
from inferlab.evidence.loading import Evidence, load_evidence
from inferlab.evidence.trust import doubt, stale_inputs


def read_input(root: Path, key: str, name: str, path: Path) -> Evidence:
    """An upstream artifact, trusted only after ``trust.doubt`` finds nothing: the
    register's chain and anchor intact, and this file and its sidecar its latest
    version, computed from the inputs there now; else a ValueError naming the file,
    what is wrong and what to rerun."""
    if not path.is_file():
        raise ValueError(f"stage input {relative(path, root)} does not exist: run the {name!r} "
                         f"stage for {key!r} first")
    if path.resolve() != layout.artifact_path(root, key, name).resolve():
        raise ValueError(f"stage input {path} is not where the register of {key!r} keeps "
                         f"{name}: {layout.artifact_path(root, key, name)}")
    why = doubt(root, key, name)
    if why is not None:
        raise ValueError(f"stage input {relative(path, root)} cannot be trusted: {why}. "
                         f"Refusing to compute from it; rerun the {name!r} stage (e.g. "
                         f"snakemake --forcerun {name}), or run `inferlab verify` to see more")
    evidence = load_evidence(root, key, name)
    if evidence.error is not None:  # registered, yet not what its schema describes
        raise ValueError(f"stage input {relative(path, root)} (register version "
                         f"{(evidence.entry or {}).get('version')}) is not a valid {name} "
                         f"artifact: {evidence.error}. Rerun the {name!r} stage (e.g. "
                         f"snakemake --forcerun {name})")
    stale = stale_inputs(root, evidence.entry)
    if stale is not None:
        raise ValueError(f"stage input {relative(path, root)} (register version "
                         f"{evidence.entry['version']}) cannot be used with the others: "
                         f"{stale}. Refusing to compute from artifacts of different versions; "
                         f"rerun the {name!r} stage first (snakemake --forcerun {name})")
    return evidence


def nonfinite_cells(evidence, root: Path, most: int = 5) -> list[str]:
    """'results/k/prefill.csv line 3 (impl=naive, fused_sdpa=False, T=64): median_ms=inf'
    for the first ``most`` non-finite number cells of the tables in ``evidence``."""
    found = []
    for item in evidence:
        if not isinstance(item.data, artifacts.Table):
            continue
        frame, marks = item.data.frame, item.data.nonfinite
        for i, column in zip(*marks.to_numpy().nonzero(), strict=True):
            row = frame.iloc[i]
            name = marks.columns[column]
            label = ", ".join(f"{c}={row[c]}" for c in frame.columns[:3])
            found.append(f"{relative(item.path, root)} line {i + 2} ({label}): "
                         f"{name}={row[name]}")
    return found[:most]
