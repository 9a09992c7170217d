"""Whether one artifact can be trusted now: the check everything makes before it reads one.

The runner (before a stage computes from its inputs), ``inferlab adopt``, ``audit``,
``inferlab claims`` and the report all ask ``doubt(root, key, stage)``, which re-checks

* the register's chain: every line parses, its ``entry_hash`` is its content's hash and
  its ``prev_hash`` links to the line before (``Register.check_chain``);
* its anchor: the register committed at git HEAD is a prefix of the working one, so
  committed entries were neither deleted (a tail with a matching rollback) nor rewritten;
* the files: ``results/{key}/`` holds the stage's *latest* registered version, the
  artifact and its sidecar both (not an edit, not an older version swapped in);
* the sidecar's content: its ``sha256`` and ``provenance`` are the entry's, so an entry
  forged with a consistent hash still disagrees with the sidecar it names.

An entry appended since the last commit passes (a run made here looks the same); the
caller that must not trust it unanchored (adopt) asks ``Register.anchor`` itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferlab.core import layout
from inferlab.evidence.entries import results_fault
from inferlab.core.files import relative
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
    try:
        recorded = json.loads(sidecar.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        recorded = None
    if not isinstance(recorded, dict) or recorded.get("sha256") != latest["sha256"] \
            or recorded.get("provenance") != latest["provenance"]:
        return (f"{relative(sidecar, root)} disagrees with register version "
                f"{latest['version']} of {stage} (sha256 or provenance): a forged entry")
    return None
