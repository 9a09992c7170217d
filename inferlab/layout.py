"""Where things live: the one module that knows the results and evidence layout.

Every stage writes ``results/{machine}/{artifact}`` with a provenance sidecar
``{artifact}.prov.json`` beside it; the register for a machine lives in
``evidence/{machine}/``. Nothing else in the code builds these paths by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

# stage -> artifact file name (one artifact per stage)
ARTIFACTS: dict[str, str] = {
    "probe": "probe.json",
    "correctness": "correctness.csv",
    "prefill": "prefill.csv",
    "decode": "decode.csv",
    "traffic": "traffic.csv",
    "claims": "claims.json",
}
STAGES: tuple[str, ...] = tuple(ARTIFACTS)
SIDECAR_SUFFIX = ".prov.json"
REGISTER_FILE = "register.jsonl"
OBJECTS_DIR = "objects"
REPORT_DIR = "report"

_MACHINE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")


def check_machine(machine: str) -> str:
    """Return ``machine`` if it is a valid id (a lowercase slug), else raise ValueError."""
    if not isinstance(machine, str) or not _MACHINE_RE.match(machine):
        raise ValueError(
            f"machine={machine!r} is not a valid machine id: use a lowercase slug of "
            "letters, digits, '.', '_' or '-' (e.g. 'cpu-amd-epyc-2t')"
        )
    return machine


def check_stage(stage: str) -> str:
    if stage not in ARTIFACTS:
        raise ValueError(f"stage={stage!r} is not a stage; expected one of {list(STAGES)}")
    return stage


def results_dir(root: Path | str, machine: str) -> Path:
    return Path(root) / "results" / check_machine(machine)


def evidence_dir(root: Path | str, machine: str) -> Path:
    return Path(root) / "evidence" / check_machine(machine)


def artifact_path(root: Path | str, machine: str, stage: str) -> Path:
    return results_dir(root, machine) / ARTIFACTS[check_stage(stage)]


def log_path(root: Path | str, machine: str, stage: str) -> Path:
    """A stage's log (``stage`` may also be "report"); Snakemake's ``log:`` uses it too."""
    return Path(root) / "logs" / check_machine(machine) / f"{stage}.log"


def benchmark_path(root: Path | str, machine: str, stage: str) -> Path:
    """Snakemake's ``benchmark:`` file of a rule (wall time, RSS) for one machine."""
    return Path(root) / "benchmarks" / "out" / check_machine(machine) / f"{stage}.tsv"


def sidecar_path(artifact: Path | str) -> Path:
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + SIDECAR_SUFFIX)


def machines(root: Path | str) -> list[str]:
    """Machine ids that have a results folder under ``root``, sorted."""
    base = Path(root) / "results"
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and _MACHINE_RE.match(p.name))
