"""``inferlab adopt``: let Snakemake treat committed, still-valid results as up to date.

A fresh clone has no ``.snakemake/`` metadata and checkout mtimes in no useful order, so
Snakemake would either redo everything or trust whatever happens to look newer. Adopt
decides instead, stage by stage in DAG order: a stage is *current* when its artifact and
sidecar are the register's latest version of it, that entry's own hash is intact, the
code and effective config it was made with equal today's (the same effective config the
Snakefile hands the rule), and it was measured on this hardware (CPU model and ISA level,
or GPU), not merely under this machine id. A current stage's outputs get an mtime newer than their
inputs and in the past; every other stage, and all downstream of it, an old one, so
that it reruns.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from inferlab import layout
from inferlab.config import Config, load_config, resolve
from inferlab.environment import fingerprint, hardware
from inferlab.files import sha256_file
from inferlab.pipeline import STAGES, code_files
from inferlab.provenance import code_hash, config_hash
from inferlab.register import Register, entry_hash


def why_stale(root: Path, config: Config, name: str, here: dict) -> str | None:
    """None if the committed artifact of stage ``name`` is current, else why it must rerun.
    ``here`` is this machine's ``environment.hardware``: results measured on other
    hardware under the same id are not this machine's."""
    path = layout.artifact_path(root, config.key, name)
    sidecar = layout.sidecar_path(path)
    entry = Register(root, config.key).latest(name)
    if entry is None or not path.is_file() or not sidecar.is_file():
        return "no artifact, sidecar or register entry"
    if entry_hash(entry) != entry["entry_hash"]:
        return f"its register entry (version {entry['version']}) was edited"
    if sha256_file(path) != entry["sha256"] or sha256_file(sidecar) != entry["sidecar_sha256"]:
        return f"{entry['path']} or its sidecar differs from its latest register entry (edited?)"
    if code_hash([root / f for f in code_files(name)], root) != \
            entry["provenance"]["code_sha256"]:
        return "its code changed since it was made"
    if config_hash(config.effective(name)) != entry["provenance"]["config_sha256"]:
        return "its effective config changed since it was made"
    there = hardware(entry["provenance"].get("environment") or {})
    if there != here:
        return f"it was made on other hardware ({there}; here {here})"
    return None


def cli_adopt(root: Path | str, machine: str | None = None, configfiles=()) -> int:
    root = Path(root)
    if (root / ".snakemake" / "metadata").is_dir():
        print("adopt: .snakemake/metadata exists; Snakemake already tracks these results")
        return 0
    config = resolve(load_config(configfiles, base=root / "config.yaml"), machine=machine)
    here = hardware(fingerprint(config.device, collect_env=False))
    stale: set[str] = set()
    now = time.time()
    for i, name in enumerate(STAGES):
        stale_up = sorted(stale & set(STAGES[name].reads))
        why = (f"upstream {', '.join(stale_up)} reruns" if stale_up
               else why_stale(root, config, name, here))
        # adopted: newer than the checkout, older than now, in DAG order; stale: 1970
        stamp = now - (len(STAGES) - i) * 0.01 if why is None else 0
        path = layout.artifact_path(root, config.key, name)
        for p in (path, layout.sidecar_path(path)):
            if p.is_file():
                os.utime(p, (stamp, stamp))
        if why is not None:
            stale.add(name)
        print(f"adopt: {config.key}: {name}: " +
              ("adopted (current)" if why is None else f"will rerun: {why}"))
    return 0
