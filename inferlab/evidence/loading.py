"""One stage's artifact on one results key, read and typed, with its register entry:
what a claim is judged on, and what the audit and the report check the integrity of."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import relative, sha256_file
from inferlab.evidence import artifacts
from inferlab.evidence.artifacts import Table
from inferlab.evidence.register import Register


@dataclass
class Evidence:
    """One stage's artifact on one results key, as a check sees it."""

    stage: str
    path: Path
    data: Table | dict | None   # None when the artifact is missing
    entry: dict | None          # the register's latest entry for this stage
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

    def hash_warning(self) -> str:
        if self.sha256_now is None:
            return ""
        if self.entry is None:
            return "WARNING: this artifact is not in the evidence register. "
        if self.sha256_now != self.entry.get("sha256"):
            return (f"WARNING: the results file's sha256 {self.sha256_now} no longer matches "
                    f"register version {self.entry.get('version')} "
                    f"({self.entry.get('sha256')}). ")
        return ""


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


def load_evidence(root: Path | str, key: str, stage: str) -> Evidence:
    """Read one stage's artifact (typed) with its latest register entry."""
    path = layout.artifact_path(root, key, stage)
    entry = Register(root, key).latest(stage)
    if not path.is_file():
        return Evidence(stage, path, None, entry, None)
    sha = sha256_file(path)
    try:
        return Evidence(stage, path, artifacts.read(path, stage), entry, sha)
    except (ValueError, UnicodeDecodeError) as exc:  # corrupted or edited: say so, go on
        return Evidence(stage, path, None, entry, sha, error=str(exc))
