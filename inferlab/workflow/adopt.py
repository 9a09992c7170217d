"""``inferlab adopt``: let Snakemake treat committed, still-valid results as up to date.

A fresh clone has no ``.snakemake/`` metadata and checkout mtimes in no useful order, so
Snakemake would redo everything or trust whatever looks newer. Adopt decides instead,
stage by stage in DAG order. A stage is *current* when its artifact passes ``doubt`` and
its derived files are the recorded ones; git vouches for it (its files and register line
committed, unmodified: a run made here since the last commit is rerun); its computing
code and effective config equal today's; and it was measured on this hardware with the
threads the run would give it, not merely under this machine id.

A current stage's outputs get mtimes newer than its code and upstream outputs, yet in the
past (Snakemake stops a run whose outputs look older than their inputs, and fails the
report on a file from the future); every other stage, and all downstream of it, an old
one, so that it reruns. Then Snakemake records the current ones (``record``): without a
record it never compares their params.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from base64 import urlsafe_b64encode
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import CannotCheck, canonical_json, git_changed, git_file
from inferlab.core.pipeline import STAGES, code_files
from inferlab.evidence.loading import code_changed, derived_faults
from inferlab.evidence.register import Register, config_hash, doubt, sidecar_record
from inferlab.measurement.environment import fingerprint, hardware
from inferlab.workflow.config import Config, load_config, resolve, resolve_threads

STEP_S = 0.001      # between the stamps of consecutive stages
MAX_WAIT_S = 2.0    # how far in the future a checked-out file may lie before adopt refuses


def outputs(root: Path, key: str, name: str) -> list[Path]:
    """The files stage ``name`` writes: its artifact, sidecar and derived files."""
    path = layout.artifact_path(root, key, name)
    return [path, layout.sidecar_path(path),
            *(layout.derived_path(root, key, name, f) for f in STAGES[name].derived)]


def not_committed(root: Path, key: str, name: str) -> str | None:
    """Why git does not vouch for the artifact of stage ``name`` (its files or register
    line are not HEAD's), or None."""
    files = outputs(root, key, name)
    register = Register(root, key)
    entry = register.latest(name) if STAGES[name].measured else None
    if entry is not None:
        files.append(register.version_path(entry))
    rel = [p.relative_to(root).as_posix() for p in files]
    try:
        changed = sorted(git_changed(root, rel) & set(rel))
        committed = git_file(root, "HEAD", register.rel) if entry is not None else b""
    except CannotCheck as exc:
        return f"git cannot vouch for it ({exc})"
    if changed:
        return (f"{', '.join(changed)} differ from the last commit (a run made here, or an "
                "edit): git does not vouch for them; commit evidence/ and results/ to adopt "
                "them")
    if entry is not None and canonical_json(entry) not in (committed or b"").split(b"\n"):
        return (f"its version {entry['version']} was registered after the last commit: git "
                "does not vouch for it; commit evidence/ and results/ to adopt it")
    return None


def why_stale(root: Path, config: Config, name: str, here: dict) -> str | None:
    """None if the committed artifact of stage ``name`` is current, else why it must rerun
    (``here``: this machine's ``environment.hardware``)."""
    why = doubt(root, config.key, name)
    if why is not None:
        return why
    derived = derived_faults(root, config.key, name)
    if derived:
        return "a file derived from it is not the one it recorded: " + "; ".join(derived)
    why = not_committed(root, config.key, name)
    if why is not None:
        return why
    provenance = sidecar_record(layout.artifact_path(root, config.key, name))["provenance"]
    changed = code_changed(root, name, provenance.get("code_files") or {})
    if changed:
        return f"its code changed since it was made ({', '.join(changed)})"
    if config_hash(config.effective(name)) != provenance.get("config_sha256"):
        return "its effective config changed since it was made"
    there = hardware(provenance.get("environment") or {})
    if there != here:
        return f"it was made on other hardware ({there}; here {here})"
    return None


def stamps(root: Path, n: int) -> list[float]:
    """``n`` increasing mtimes after the newest code file of any stage, and before now."""
    files = {f for name in STAGES for f in code_files(name)}
    newest = max((root / f).stat().st_mtime for f in files if (root / f).is_file())
    wait = newest + (n + 1) * STEP_S - time.time()
    if wait > MAX_WAIT_S:
        raise ValueError(f"a code file's mtime is {wait:.1f} s in the future (clock skew?): "
                         "fix the clock or touch the files, then run adopt again")
    if wait > 0:
        time.sleep(wait)
    return [newest + (i + 1) * STEP_S for i in range(n)]


def tracked(root: Path, key: str) -> bool:
    """Whether Snakemake's metadata holds a record (a file named by the output's path in
    URL-safe base64) of one of ``key``'s artifacts: a dry run makes the folder, no record."""
    meta = root / ".snakemake" / "metadata"
    rels = (layout.artifact_path(root, key, n).relative_to(root).as_posix() for n in STAGES)
    return any((meta / urlsafe_b64encode(rel.encode()).decode()).is_file() for rel in rels)


def cli_adopt(root: Path | str, machine: str | None = None, configfiles=(),
              cores: int = 1) -> int:
    """``inferlab adopt [--cores N]``: the snakemake run after it gets ``--cores``, which
    caps the threads of every stage."""
    root = Path(root)
    config = resolve(load_config(configfiles, base=root / "config.yaml"), machine=machine)
    if tracked(root, config.key):
        print(f"adopt: Snakemake already tracks {config.key}'s results (.snakemake/metadata "
              "has their records)")
        return 0
    threads = min(resolve_threads(config.raw, cores), cores)  # as Snakemake caps them
    here = {**hardware(fingerprint(config.device, collect_env=False)), "threads": threads}
    stale: set[str] = set()
    when = stamps(root, len(STAGES))
    for i, name in enumerate(STAGES):
        stale_up = sorted(stale & set(STAGES[name].reads))
        why = (f"upstream {', '.join(stale_up)} reruns" if stale_up
               else why_stale(root, config, name, here))
        stamp = when[i] if why is None else 0  # stale: 1970, older than anything
        for p in outputs(root, config.key, name):
            if p.is_file():
                os.utime(p, (stamp, stamp))
        if why is not None:
            stale.add(name)
        print(f"adopt: {config.key}: {name}: " +
              ("adopted (current)" if why is None else f"will rerun: {why}"))
    adopted = [layout.artifact_path(root, config.key, n) for n in STAGES if n not in stale]
    if adopted:
        record(root, adopted, machine, configfiles)
    return 0


def record(root: Path, artifacts: list[Path], machine: str | None, configfiles) -> None:
    """Have Snakemake record the adopted stages as if it had run them (``--touch``), so that
    a change it compares by record (``params``) reruns one. The adopted stages are closed
    upstream (a stage with a stale input is stale), so forcing their DAG touches only them."""
    command = [sys.executable, "-m", "snakemake", "--touch", "--forceall", "--cores", "1",
               "--quiet", "all",
               *(arg for path in configfiles for arg in ("--configfile", str(path))),
               *(["--config", f"machine={machine}"] if machine else []),
               "--", *(p.relative_to(root).as_posix() for p in artifacts)]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"adopt: `{shlex.join(command[2:])}` (recording the adopted stages "
                         f"in Snakemake's metadata) failed: {done.stderr.strip()[-1500:]}")
    print(f"adopt: Snakemake records the {len(artifacts)} adopted stages (snakemake --touch)")
