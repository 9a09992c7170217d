"""Where things live: the one module that builds paths (docs/contracts.md shows the tree).

A machine's book evidence (the default grid of ``config.yaml``) lives under its machine
id, ``results/{machine}/``; a run on any other grid under ``{machine}@{grid}``, so it can
never replace the book evidence. That folder name is the *results key*.
"""

from __future__ import annotations

import re
from pathlib import Path

from inferlab.core.pipeline import stage as stage_of

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO_ROOT / "schemas"
CLAIMS_FILE = REPO_ROOT / "claims.yaml"
CONFIG_FILE = REPO_ROOT / "config.yaml"
TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "presentation" / "templates"

SIDECAR_SUFFIX = ".prov.json"
REGISTER_FILE = "register.jsonl"
OUTPUT_DIRS = ("results", "evidence", "report")

_MACHINE = r"[a-z0-9][a-z0-9._-]{0,79}"
_GRID = r"[a-z0-9][a-z0-9._-]{0,39}"
# always fullmatch: "$" (and match) would take "smoke\n", a name over two lines
_MACHINE_RE = re.compile(_MACHINE)
_GRID_RE = re.compile(_GRID)
_KEY_RE = re.compile(rf"({_MACHINE})(?:@({_GRID}))?")


def check_machine(machine: str) -> str:
    if not isinstance(machine, str) or not _MACHINE_RE.fullmatch(machine):
        raise ValueError(
            f"machine={machine!r} is not a valid machine id: use a lowercase slug of "
            "letters, digits, '.', '_' or '-' (e.g. 'cpu-amd-epyc-2c')")
    return machine


def check_grid(grid: str) -> str:
    if not isinstance(grid, str) or not _GRID_RE.fullmatch(grid):
        raise ValueError(f"grid={grid!r} is not a valid grid name: use a lowercase slug of "
                         "letters, digits, '.', '_' or '-' (e.g. 'smoke')")
    return grid


def results_key(machine: str, grid: str | None = None) -> str:
    """``machine`` for the book grid (None), ``machine@grid`` for any other grid."""
    check_machine(machine)
    return machine if grid is None else f"{machine}@{check_grid(grid)}"


def check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"results key {key!r} is not 'machine' or 'machine@grid' "
                         "(lowercase slugs, e.g. 'cpu-amd-epyc-2c@smoke')")
    return key


def split_key(key: str) -> tuple[str, str | None]:
    """('machine', grid or None) of a results key."""
    match = _KEY_RE.fullmatch(check_key(key))
    return match.group(1), match.group(2)


def results_dir(root: Path | str, key: str) -> Path:
    return Path(root) / "results" / check_key(key)


def evidence_dir(root: Path | str, key: str) -> Path:
    return Path(root) / "evidence" / check_key(key)


def artifact_path(root: Path | str, key: str, stage: str) -> Path:
    return results_dir(root, key) / stage_of(stage).artifact


def derived_path(root: Path | str, key: str, stage: str, name: str) -> Path:
    """results/{key}/{stage}/{name}, ``name`` one the stage declares: a name read from an
    artifact ("../../etc/x") never makes a path outside the key's folder."""
    declared = stage_of(stage)
    if name not in declared.derived:
        raise ValueError(f"{name!r} is not a file stage {stage!r} derives; it derives "
                         f"{list(declared.derived)}")
    return results_dir(root, key) / declared.name / name


def tuning_path(root: Path | str, key: str) -> Path:
    """The launch configurations ``inferlab tune`` chose, which prefill and decode read."""
    return results_dir(root, key) / "tuning.json"


def sidecar_path(artifact: Path | str) -> Path:
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + SIDECAR_SUFFIX)


def register_path(root: Path | str, key: str) -> Path:
    return evidence_dir(root, key) / REGISTER_FILE


def version_path(root: Path | str, key: str, stage: str, version: int) -> Path:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version={version!r} must be a version number, an int >= 1")
    suffix = Path(stage_of(stage).artifact).suffix
    return evidence_dir(root, key) / stage / f"v{version}{suffix}"


def log_path(root: Path | str, key: str, rule: str) -> Path:
    """A rule's log (a stage or "report"); Snakemake's ``log:`` uses it too."""
    return Path(root) / "logs" / check_key(key) / f"{rule}.log"


def benchmark_path(root: Path | str, key: str, rule: str) -> Path:
    """Snakemake's ``benchmark:`` file of a rule (wall time, RSS)."""
    return Path(root) / "benchmarks" / "out" / check_key(key) / f"{rule}.tsv"


def report_path(root: Path | str) -> Path:
    return Path(root) / "report" / "index.html"


def profile_path(grid: str) -> Path:
    return REPO_ROOT / "profiles" / f"{check_grid(grid)}.yaml"


def schema_path(name: str) -> Path:
    return SCHEMA_DIR / name


def keys(root: Path | str) -> list[str]:
    """Results keys that have a folder under ``root/results``, sorted."""
    base = Path(root) / "results"
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if p.is_dir() and _KEY_RE.fullmatch(p.name))


def evidence_keys(root: Path | str) -> list[str]:
    """Results keys with a folder under ``root/evidence`` or ``root/results`` (one without a
    register is unverifiable and must show up), sorted."""
    base = Path(root) / "evidence"
    found = set(keys(root))
    if base.is_dir():
        found |= {p.name for p in base.iterdir() if p.is_dir() and _KEY_RE.fullmatch(p.name)}
    return sorted(found)
