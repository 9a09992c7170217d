"""Whether one artifact can be trusted now: the check everything makes before it reads one.

The runner (before a stage computes from its inputs), ``inferlab adopt``, ``audit``,
``inferlab claims`` and the report all ask ``doubt(root, key, stage)``, which re-checks

* the register's chain: every line parses, its ``entry_hash`` is its content's hash and
  its ``prev_hash`` links to the line before (``Register.check_chain``);
* its anchor: the register committed at git HEAD is a prefix of the working one, so
  committed entries were neither deleted (a tail with a matching rollback) nor rewritten;
* the files: ``results/{key}/`` holds the stage's *latest* registered version, the
  artifact and its sidecar both (not an edit, not an older version swapped in);
* the sidecar's content: a sidecar as its schema describes it, its ``sha256`` and
  ``provenance`` the entry's, so an entry forged with a consistent hash still disagrees
  with the sidecar it names.

``stale_inputs`` asks one more thing of a version: that the inputs it recorded are the
files there now (a traffic.csv computed from prefill version 1 is not evidence about
version 4). The runner asks it of every input before a stage computes, adopt of every
stage it would mark current.

An entry appended since the last commit passes (a run made here looks the same); the
caller that must not trust it unanchored (adopt) asks ``Register.anchor`` itself.
"""

from __future__ import annotations

from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import relative, sha256_file
from inferlab.core.pipeline import STAGES, code_files
from inferlab.evidence.entries import results_fault
from inferlab.evidence.integrity import DISAGREES, NOT_JSON, sidecar_fault
from inferlab.evidence.provenance import file_hashes
from inferlab.evidence.register import Register


def doubt(root: Path | str, key: str, stage: str) -> str | None:
    """Why the artifact of ``stage`` in results/{key}/ cannot be trusted now, or None."""
    register = Register(root, key)
    entries, problems = register.check_chain()
    problems += register.anchor().problems
    if problems:
        return f"the evidence register of {key} is broken: {problems[0].location}: " \
               f"{problems[0].message}"
    versions = [e for _, e in entries if e["stage"] == stage]
    if not versions:
        return f"no version of {stage} is in the evidence register of {key}"
    artifact = layout.artifact_path(root, key, stage)
    sidecar = layout.sidecar_path(artifact)
    for path, field in ((artifact, "sha256"), (sidecar, "sidecar_sha256")):
        fault = results_fault(path, field, stage, versions)
        if fault:
            return f"{relative(path, root)} {fault}"
    latest = versions[-1]
    fault = sidecar_fault(sidecar.read_bytes(), latest)
    if fault in (DISAGREES, NOT_JSON):
        return (f"{relative(sidecar, root)} disagrees with register version "
                f"{latest['version']} of {stage} (sha256 or provenance): a forged entry")
    if fault is not None:
        return f"{relative(sidecar, root)} {fault}"
    return None


def _version_of(root: Path, rel: str, sha: str) -> str:
    """'prefill version 1' for a recorded input (results/{key}/prefill.csv), else its sha256."""
    parts = rel.split("/")
    stage = next((s for s in STAGES if STAGES[s].artifact == parts[-1]), None)
    try:
        versions = Register(root, parts[1]).history(stage) \
            if stage and len(parts) == 3 and parts[0] == "results" else []
    except ValueError:  # not a key, or an unreadable register: the sha256 says enough
        versions = []
    found = [e.get("version") for e in versions if e.get("sha256") == sha]
    return f"{stage} version {found[-1]}" if found else f"sha256 {sha[:12]}…"


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
                    f"{_version_of(root, rel, now)})")
    return None


def code_changed(root: Path | str, name: str, recorded: dict[str, str]) -> list[str]:
    """The files of stage ``name``'s computing code (``pipeline.code_files``) whose sha256
    today is not the one the version recorded; the bookkeeping it recorded besides (an
    older version recorded its runner, register ... as code too) is not compared."""
    root = Path(root)
    today = file_hashes([root / f for f in code_files(name)], root)
    return sorted(f for f, sha in today.items() if recorded.get(f) != sha)
