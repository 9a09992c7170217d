"""``inferlab verify`` and ``inferlab history``: the evidence, checked and listed for people.

``verify`` checks each results key's register (``Register.problems``), then every derived
artifact (``register.doubt``) and the files derived from them. A check that cannot run
(git missing, or refusing the repository) fails: "could not check", never a pass.
``--repair`` first removes what a killed write can leave: a torn final register line and
hidden temp and backup files. Exit status: 0 clean, 1 a problem or nothing to verify.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import BACKUP_SUFFIX, TMP_SUFFIX
from inferlab.core.pipeline import STAGES
from inferlab.evidence.loading import derived_faults
from inferlab.evidence.register import Register, doubt


def _debris(root: Path, key: str) -> list[Path]:
    """The temp and backup files killed writes left in the key's folders."""
    folders = [layout.results_dir(root, key), layout.evidence_dir(root, key)]
    return sorted(p for folder in folders if folder.is_dir() for p in folder.rglob(".*")
                  if p.is_file() and p.name.endswith((TMP_SUFFIX, BACKUP_SUFFIX)))


def repair(root: Path, key: str) -> None:
    """Cut a torn final register line and remove temp files, saying what goes."""
    register = Register(root, key)
    cut = register.cut_torn_tail()
    if cut:
        print(f"REPAIR {key}: {register.rel}: removed a torn last line ({cut} bytes, an "
              "append interrupted); every complete line is untouched")
    for p in _debris(root, key):
        p.unlink()
        print(f"REPAIR {key}: removed {p.relative_to(root).as_posix()} (an interrupted write)")


def problems(root: Path, key: str) -> list[str]:
    register = Register(root, key)
    found = register.problems()
    data = register.path.read_bytes() if register.path.is_file() else b""
    if data and not data.endswith(b"\n"):
        found.append(f"{register.rel}: the last line is torn (an append interrupted); "
                     "`inferlab verify --repair` removes it")
    for name in STAGES:
        if STAGES[name].measured or not layout.artifact_path(root, key, name).is_file():
            continue
        why = doubt(root, key, name)
        if why:  # doubt names the file where the file is at fault; a stale input, not
            rel = layout.artifact_path(root, key, name).relative_to(root).as_posix()
            found.append(why if why.startswith(rel) else f"{rel}: {why}")
        found += derived_faults(root, key, name)
    found += [f"{p.relative_to(root).as_posix()}: left by an interrupted write; `inferlab "
              "verify --repair` removes it" for p in _debris(root, key)]
    return found


def cli_verify(root: Path | str, key: str | None = None, fix: bool = False) -> int:
    """``inferlab verify [--repair]``: 0 when every key checked is clean, else 1."""
    root = Path(root)
    names = [key] if key is not None else layout.evidence_keys(root)
    if key is not None and key not in layout.evidence_keys(root):
        print(f"no evidence for {key!r}: neither {layout.results_dir(root, key)} nor "
              f"{layout.evidence_dir(root, key)} exists")
        return 1
    if not names:
        print(f"nothing to verify: no evidence/ or results/ folders under {root.resolve()} "
              "(is --root the repository?)")
        return 1
    clean = True
    for name in names:
        if fix:
            repair(root, name)
        found = problems(root, name)
        clean = clean and not found
        for p in found:
            print(f"FAIL {name}: {p}")
        if not found:
            counts = Counter(e["stage"] for e in Register(root, name).entries())
            print(f"OK {name}: " + (", ".join(f"{s} {n}" for s, n in counts.items())
                                    + " versions kept" if counts else "no measured versions"))
    return 0 if clean else 1


def cli_history(root: Path | str, key: str, stage: str | None = None) -> int:
    """``inferlab history [STAGE]``: one row per kept version, oldest first."""
    register = Register(root, key)
    if stage is not None and not STAGES[stage].measured:
        print(f"{stage} is derived, not kept: git holds its history (git log -p -- "
              f"{layout.artifact_path('.', key, stage).as_posix()})")
        return 1
    if not register.path.is_file():
        print(f"no register for {key!r}: {register.path} does not exist")
        return 1
    rows = [("version", "stage", "created_at", "sha256", "commit", "file")]
    for e in register.history(stage):
        prov = e["provenance"]
        commit = (prov.get("git_commit") or "none")[:10] + ("-dirty" if prov.get("git_dirty")
                                                           else "")
        rows.append((str(e["version"]), e["stage"], str(prov.get("created_at")),
                     e["sha256"][:12], commit,
                     register.version_path(e).relative_to(register.root).as_posix()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return 0
