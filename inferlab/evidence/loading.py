"""One stage's artifact on one results key, read and typed with its record, and the one
check made before anything computes from it.

The record is the sidecar beside the artifact (results/{key}/{artifact}.prov.json) and,
for a measured stage, the register's latest line, which the sidecar repeats. ``doubt``
asks what an honest author's mistake would break: the file is what its record says
(sha256; for a measured stage, the register's latest version) and the inputs it recorded
are the files there now (a traffic.csv computed from prefill version 1 is no evidence
about version 4). The runner asks it of every input, adopt, verify and the report of what
they show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import relative, sha256_file
from inferlab.core.pipeline import STAGES, code_files
from inferlab.evidence import artifacts
from inferlab.evidence.artifacts import Table
from inferlab.evidence.provenance import file_hashes
from inferlab.evidence.register import Register, record_fault


@dataclass
class Evidence:
    """One stage's artifact on one results key, as a check sees it."""

    stage: str
    path: Path
    data: Table | dict | None   # None when the artifact is missing
    entry: dict | None          # its record: the register's latest line, else the sidecar's
    sha256_now: str | None
    error: str | None = None    # why the file could not be read (then data is None)

    @property
    def table(self) -> Table:
        """The rows a check reads (probe.json: its availability list)."""
        return artifacts.probe_availability(self.data) if self.stage == "probe" else self.data

    @property
    def provenance(self) -> dict:
        return (self.entry or {}).get("provenance") or {}

    def describe(self, root: Path) -> dict:
        entry = self.entry or {}
        return {"stage": self.stage, "path": relative(self.path, root),
                "version": entry.get("version"), "sha256": entry.get("sha256")}


def sidecar_record(path: Path) -> dict | None:
    """The sidecar beside ``path`` as an entry ({stage, version None, sha256, provenance}),
    or None when it is missing or no sidecar."""
    try:
        sidecar = json.loads(layout.sidecar_path(path).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(sidecar, dict) or not isinstance(sidecar.get("provenance"), dict):
        return None
    return {"stage": sidecar["provenance"].get("stage"), "version": None,
            "sha256": sidecar.get("sha256"), "provenance": sidecar["provenance"]}


def load_evidence(root: Path | str, key: str, stage: str) -> Evidence:
    """Read one stage's artifact (typed) with its record."""
    path = layout.artifact_path(root, key, stage)
    entry = Register(root, key).latest(stage) if STAGES[stage].measured else None
    entry = entry or sidecar_record(path)
    if not path.is_file():
        return Evidence(stage, path, None, entry, None)
    sha = sha256_file(path)
    try:
        return Evidence(stage, path, artifacts.read(path, stage), entry, sha)
    except (ValueError, UnicodeDecodeError) as exc:  # corrupted or edited: say so, go on
        return Evidence(stage, path, None, entry, sha, error=str(exc))


def doubt(root: Path | str, key: str, stage: str) -> str | None:
    """Why the artifact of ``stage`` in results/{key}/ cannot be computed from now, or
    None: it is not what its record says, or its recorded inputs are not the files there."""
    root = Path(root)
    path = layout.artifact_path(root, key, stage)
    rel = relative(path, root)
    if STAGES[stage].measured:
        fault = record_fault(root, key, stage, Register(root, key).latest(stage))
        if fault:
            return fault
    record = sidecar_record(path)
    if record is None:
        return f"{rel} or its sidecar is missing or unreadable; rerun the {stage!r} stage"
    if not path.is_file() or sha256_file(path) != record["sha256"]:
        return (f"{rel} is not the file its sidecar describes (edited, or a write was "
                f"interrupted); rerun the {stage!r} stage (snakemake --forcerun {stage})")
    return stale_inputs(root, record)


def stale_inputs(root: Path | str, entry: dict) -> str | None:
    """Why the inputs ``entry`` recorded ({path: sha256}) are not the files there now, or
    None: 'it was computed from another version of results/k/prefill.csv than the one
    there now (from prefill version 1; there now: prefill version 4)'."""
    root = Path(root)
    inputs = (entry.get("provenance") or {}).get("inputs")
    if not isinstance(inputs, dict):
        return "its provenance records no inputs"
    for rel, sha in sorted(inputs.items()):
        path = root / rel
        if not path.is_file():
            return f"its input {rel} is missing"
        now = sha256_file(path)
        if now != sha:
            return (f"it was computed from another version of {rel} than the one there now "
                    f"(from {_version_of(root, rel, sha)}; there now: "
                    f"{_version_of(root, rel, now)}); rerun it")
    return None


def _version_of(root: Path, rel: str, sha: str) -> str:
    """'prefill version 1' for a recorded input of a measured stage, else its sha256."""
    parts = rel.split("/")
    stage = next((s for s in STAGES if STAGES[s].artifact == parts[-1]), None)
    versions = []
    if stage and STAGES[stage].measured and len(parts) == 3 and parts[0] == "results":
        try:
            versions = Register(root, parts[1]).history(stage)
        except ValueError:  # not a key, or an unreadable register: the sha256 says enough
            versions = []
    found = [e["version"] for e in versions if e["sha256"] == sha]
    return f"{stage} version {found[-1]}" if found else f"sha256 {sha[:12]}…"


def read_input(root: Path, key: str, name: str, path: Path) -> Evidence:
    """An upstream artifact, read once ``doubt`` finds nothing; else a ValueError naming
    the file, what is wrong and what to rerun."""
    if path.resolve() != layout.artifact_path(root, key, name).resolve():
        raise ValueError(f"stage input {path} is not where results/{key}/ keeps {name}: "
                         f"{layout.artifact_path(root, key, name)}")
    if not path.is_file():
        raise ValueError(f"stage input {relative(path, root)} does not exist: run the {name!r} "
                         f"stage for {key!r} first")
    why = doubt(root, key, name)
    if why is not None:
        raise ValueError(f"stage input {relative(path, root)} cannot be used: {why}. Refusing "
                         "to compute from it (`inferlab verify` shows every such file)")
    evidence = load_evidence(root, key, name)
    if evidence.error is not None:  # recorded, yet not what its schema describes
        version = (evidence.entry or {}).get("version")
        which = "" if version is None else f" (register version {version})"
        raise ValueError(f"stage input {relative(path, root)}{which} is not a valid {name} "
                         f"artifact: {evidence.error}. Rerun the {name!r} stage (e.g. "
                         f"snakemake --forcerun {name})")
    return evidence


def code_changed(root: Path | str, name: str, recorded: dict[str, str]) -> list[str]:
    """The files of stage ``name``'s computing code (``pipeline.code_files``) whose sha256
    today is not the one the version recorded."""
    root = Path(root)
    today = file_hashes([root / f for f in code_files(name)], root)
    return sorted(f for f, sha in today.items() if recorded.get(f) != sha)


def derived_status(root: Path, key: str, stage: str, recorded: dict) -> list[dict]:
    """Each file ``stage`` derives (its declaration: never a name the artifact makes up),
    against ``recorded`` (name -> sha256, from the artifact's ``files``):
    {"name", "path", "recorded", "ok", "status"}."""
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
    """What is wrong with the files ``stage`` derives from its artifact (the manuscript's
    numbers and tables: each must be the one the artifact records), with the fix."""
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


# ----------------------------------------------------------------- reading helpers


def device_of(evidence: Evidence, key: str) -> str:
    """'cuda' or 'cpu': the device the artifact is about, from its effective config (a
    stage that runs nothing on the device may have been derived on another host, whose
    environment it records), else the recorded environment, else the key's prefix."""
    provenance = evidence.provenance
    device = str((provenance.get("config") or {}).get("device")
                 or (provenance.get("environment") or {}).get("device") or key)
    return "cuda" if device.startswith("cuda") else "cpu"


def gpu_of(evidence: dict[str, Evidence]) -> dict | None:
    """The GPU the measured stages ran on ({"name", "multiprocessors"}, from the first
    artifact whose recorded environment has one), or None: a stage derived on another
    host records that host's environment, the measured ones the GPU's."""
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
