"""What ``inferlab verify`` re-hashes beside the chain: retained copies, sidecars, the
results files and the files derived from them, each against the register's entries.

* every retained copy (``objects/<sha256>``) must hash to its name, and every entry's two
  copies must be there; a retained sidecar must be a sidecar (``schemas/sidecar.schema.json``)
  describing the entry's artifact with the entry's provenance;
* ``results/{key}/`` must hold each registered stage's *latest* version, artifact and
  sidecar (``entries.results_fault``);
* a stage that derives files from its artifact (``pipeline.Stage.derived``: the
  manuscript's numbers and tables) records their sha256 in it (``files``): each derived
  file must be there and be the one its latest version recorded. A ``numbers.tex`` edited
  by hand, or left from the previous version by a run killed between the register append
  and the derived files, fails; a recorded name the stage does not derive (``../../etc``)
  is named and never read;
* a retained copy that no entry names is an *orphan*: entries deleted, or a register
  replaced by another (a host's folders copied over another's), or a write killed between
  retaining and registering. ``orphans`` says which, as a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import sha256_bytes, sha256_file
from inferlab.core.pipeline import STAGES
from inferlab.evidence.entries import (
    SHA256_RE,
    SIDECAR_SCHEMA,
    Problem,
    results_fault,
    schema_fault,
)


def _object_location(sha: str) -> str:
    return f"{layout.OBJECTS_DIR}/{sha[:12]}…"


def retained_copies(objects: Path) -> list[Path]:
    """The retained copies in ``objects`` (not the hidden temp files of a write)."""
    if not objects.is_dir():
        return []
    return sorted(p for p in objects.iterdir() if p.is_file() and not p.name.startswith("."))


def object_faults(objects: Path) -> dict[str, str]:
    """sha -> fault for every retained copy whose content no longer matches its name."""
    return {p.name: "content does not match its sha256 name: copy modified"
            for p in retained_copies(objects) if sha256_file(p) != p.name}


DISAGREES = "disagrees with its entry (sha256 or provenance edited)"
NOT_JSON = "is not JSON"


def sidecar_fault(data: bytes, entry: dict) -> str | None:
    """Why the sidecar ``data`` does not describe ``entry``'s artifact, or None:
    ``NOT_JSON``, ``DISAGREES`` (it describes another artifact or provenance), or what it
    breaks of ``schemas/sidecar.schema.json``."""
    try:
        sidecar = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return NOT_JSON
    if not isinstance(sidecar, dict) or sidecar.get("sha256") != entry["sha256"] \
            or sidecar.get("provenance") != entry["provenance"]:
        return DISAGREES
    fault = schema_fault(SIDECAR_SCHEMA, sidecar)
    return None if fault is None else f"is not a sidecar as its schema describes it: {fault}"


def check_copies(key: str, objects: Path, entries: list[tuple[int, dict]]) -> list[Problem]:
    faults = object_faults(objects)
    problems = [Problem(key, _object_location(sha), msg) for sha, msg in faults.items()]
    for lineno, entry in entries:
        where = f"{layout.REGISTER_FILE} line {lineno}"
        for kind in ("sha256", "sidecar_sha256"):
            sha = entry[kind]
            if isinstance(sha, str) and SHA256_RE.fullmatch(sha) \
                    and not (objects / sha).is_file():
                problems.append(Problem(key, _object_location(sha), f"missing: the retained "
                                        f"{kind} copy of {where}"))
        sha = entry["sidecar_sha256"]
        copy = objects / sha if isinstance(sha, str) and SHA256_RE.fullmatch(sha) else None
        if copy is None or not copy.is_file() or sha in faults:
            continue
        fault = sidecar_fault(copy.read_bytes(), entry)
        if fault is DISAGREES:
            problems.append(Problem(key, where, "entry disagrees with its retained sidecar "
                                    "(sha256 or provenance edited)"))
        elif fault is not None:
            problems.append(Problem(key, where, f"retained sidecar {sha[:12]}… {fault}"))
    return problems


def check_results(root: Path, key: str, entries: list[tuple[int, dict]]) -> list[Problem]:
    """results/{key}/ must hold, for each registered stage, its latest version: both
    files present, and equal to that entry (not an older one, not an unregistered one)."""
    problems = []
    for stage in STAGES:
        artifact = layout.artifact_path(root, key, stage)
        mine = [e for _, e in entries if e["stage"] == stage]
        for path, field in ((artifact, "sha256"),
                            (layout.sidecar_path(artifact), "sidecar_sha256")):
            fault = results_fault(path, field, stage, mine)
            if fault:
                problems.append(Problem(key, path.relative_to(root).as_posix(), fault))
    return problems


# ------------------------------------------------------------------ derived files


def recorded_files(objects: Path, entry: dict) -> dict | None:
    """The ``files`` record (derived file -> sha256) of a registered version, read from its
    retained copy; {} when the artifact records none; None when the copy is missing or
    modified (verify names the copy)."""
    try:
        data = (objects / entry["sha256"]).read_bytes()
    except OSError:
        return None
    if sha256_bytes(data) != entry["sha256"]:
        return None
    try:
        record = json.loads(data.decode("utf-8")).get("files")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return {}
    return record if isinstance(record, dict) else {}


def derived_status(root: Path, key: str, stage: str, recorded: dict) -> list[dict]:
    """Each file ``stage`` derives (its declaration: never a name the artifact makes up),
    against ``recorded`` (name -> sha256): {"name", "path", "recorded", "ok", "status"}."""
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


def derived_faults(root: Path, key: str, objects: Path, stage: str,
                   versions: list[dict]) -> list[tuple[str, str]]:
    """(file, what is wrong) for the files ``stage`` derives, against its latest version."""
    if not STAGES[stage].derived or not versions:
        return []
    latest = versions[-1]
    recorded = recorded_files(objects, latest)
    if recorded is None:
        return []  # no readable copy: verify names the copy
    where = layout.results_dir(root, key).relative_to(root).as_posix()
    if not recorded:
        names = ", ".join(STAGES[stage].derived)
        return [(f"{where}/{STAGES[stage].artifact}", f"version {latest['version']} of "
                 f"{stage} records no sha256 of the files derived from it ({names}), so none "
                 f"of them can be checked; rerun the {stage!r} stage (snakemake --forcerun "
                 f"{stage})")]
    faults = [(f"{where}/{stage}", f"version {latest['version']} of {stage} records a file "
               f"{name!r} that the stage does not derive ({list(STAGES[stage].derived)}): "
               "never read or linked; a forged artifact")
              for name in recorded if name not in STAGES[stage].derived]
    for file in derived_status(root, key, stage, recorded):
        if file["ok"]:
            continue
        rel = file["path"].relative_to(root).as_posix()
        now = sha256_file(file["path"]) if file["path"].is_file() else None
        older = [e["version"] for e in versions[:-1] if now is not None
                 and (recorded_files(objects, e) or {}).get(file["name"]) == now]
        why = (f"missing, but version {latest['version']} of {stage} records it"
               if now is None else
               f"is the file of version {older[-1]} of {stage}, not of the latest "
               f"({latest['version']}): left by a run interrupted after it registered"
               if older else f"matches no version of {stage}: edited after version "
               f"{latest['version']} wrote it")
        faults.append((rel, f"{why}; rerun the {stage!r} stage (snakemake --forcerun {stage})"))
    return faults


def check_derived(root: Path, key: str, objects: Path,
                  entries: list[tuple[int, dict]]) -> list[Problem]:
    return [Problem(key, where, message) for stage in STAGES
            for where, message in derived_faults(root, key, objects, stage,
                                                 [e for _, e in entries if e["stage"] == stage])]


# ------------------------------------------------------------------ orphans


def orphans(key: str, objects: Path, entries: list[tuple[int, dict]]) -> list[str]:
    """A warning naming the retained copies no entry names (empty when there are none)."""
    named = {e[f] for _, e in entries for f in ("sha256", "sidecar_sha256")}
    lost = [p for p in retained_copies(objects) if p.name not in named]
    if not lost:
        return []
    sidecars = []
    for p in lost:
        try:
            prov = json.loads(p.read_bytes().decode("utf-8"))["provenance"]
            sidecars.append(f"{prov['stage']} made {prov['created_at']}")
        except (ValueError, UnicodeDecodeError, KeyError, TypeError):
            continue
    listed = "; ".join(sidecars[:5]) + ("; …" if len(sidecars) > 5 else "")
    rel = f"evidence/{key}/{layout.REGISTER_FILE}"
    return [f"WARN {key}: {layout.OBJECTS_DIR}/: {len(lost)} retained copies are named by no "
            f"entry (" + (f"{len(sidecars)} sidecars: {listed}" if sidecars else "no sidecar")
            + "): entries deleted from the register, or another register copied over this "
            "one (a host's folders merged over another's of the same id), or a write killed "
            f"before it registered; `git log -p -- {rel}` shows what was removed"]
