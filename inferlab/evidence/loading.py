"""Reading helpers over the register: whether a stage's code changed since a version
recorded it, the files a stage derives, and the device and GPU an artifact records.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import relative, sha256_file
from inferlab.core.pipeline import STAGES, code_files
from inferlab.evidence import artifacts
from inferlab.evidence.register import Evidence, file_hashes


def code_changed(root: Path | str, name: str, recorded: dict[str, str]) -> list[str]:
    """The files of stage ``name``'s computing code (``pipeline.code_files``) whose sha256
    today is not the one the version recorded."""
    root = Path(root)
    today = file_hashes([root / f for f in code_files(name)], root)
    return sorted(f for f, sha in today.items() if recorded.get(f) != sha)


def derived_status(root: Path, key: str, stage: str, recorded: dict) -> list[dict]:
    """Each file ``stage`` declares it derives (never a name the artifact makes up), against
    ``recorded`` (name -> sha256, from the artifact's ``files``)."""
    found = []
    for name in STAGES[stage].derived:
        path = layout.derived_path(root, key, stage, name)
        want = recorded.get(name)
        now = sha256_file(path) if path.is_file() else None
        status = ("not recorded in the artifact" if want is None else "missing" if now is None
                  else "sha256 OK" if now == want else "changed since the stage wrote it")
        found.append({"name": name, "path": path, "recorded": want, "ok": now == want
                      and want is not None, "status": status})
    return found


def derived_faults(root: Path, key: str, stage: str) -> list[str]:
    """What is wrong with the files ``stage`` derives from its artifact, with the fix."""
    if not STAGES[stage].derived:
        return []
    path = layout.artifact_path(root, key, stage)
    try:
        recorded = json.loads(path.read_bytes()).get("files") or {}
    except (OSError, ValueError, AttributeError):
        return []  # no artifact: named by doubt
    return [f"{relative(f['path'], root)}: {f['status']}; rerun the {stage!r} stage "
            f"(snakemake --forcerun {stage})"
            for f in derived_status(root, key, stage, recorded) if not f["ok"]]


def device_of(evidence: Evidence, key: str) -> str:
    """'cuda' or 'cpu': the device the artifact is about, from its effective config (a
    stage that runs nothing on the device may have been derived on another host, whose
    environment it records), else the recorded environment, else the key's prefix."""
    provenance = evidence.provenance
    device = str((provenance.get("config") or {}).get("device")
                 or (provenance.get("environment") or {}).get("device") or key)
    return "cuda" if device.startswith("cuda") else "cpu"


def gpu_of(evidence: dict[str, Evidence]) -> dict | None:
    """The GPU ({"name", "multiprocessors"}) of the first artifact whose environment has
    one, or None: a stage derived on another host records that host's environment."""
    for found in evidence.values():
        cuda = ((found.provenance.get("environment") or {}).get("cuda") or {}) \
            if found is not None else {}
        if cuda.get("device_name"):
            return {"name": cuda["device_name"], "multiprocessors": cuda.get("multiprocessors")}
    return None


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
