"""``inferlab verify`` and ``inferlab history``: the evidence registers, checked for people.

``verify`` re-hashes every register under a root (``Register.verify``: chain and schema,
retained copies, results files and the files derived from them), compares each with git
(``Register.anchor``: HEAD, the upstream branch and tags, the register's committed
history: a deleted tail, a rewritten line, a fork, an amended rollback or a whole
machine's deleted folders show), warns of retained copies no entry names (entries lost),
and with ``--repair`` first removes a torn final line and the temp files killed writes
left, saying what it removes. It reads each register under its lock, so an append under
way is waited for, not reported as a torn line. A check that cannot run (git missing, or
refusing the repository) fails: "could not check", never a pass. Exit status: 0 clean, 1
a problem, a check that could not run, or nothing to verify.
"""

from __future__ import annotations

from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import git_subfolders, split_lines
from inferlab.evidence import integrity, upkeep
from inferlab.evidence.entries import Problem
from inferlab.evidence.register import Register


def _preview(data: bytes, width: int = 60) -> str:
    text = data.decode(errors="replace")  # bytes decode as UTF-8
    return repr(text if len(text) <= width else text[:width] + "…")


def repair(register: Register) -> bool:
    """Cut a torn final line, printing what goes; True when something was cut. Under the
    key's lock: an append under way is waited for, and then there is nothing to cut."""
    with register.locked(sweep=False):  # debris is swept (and named) by _sweep
        return _repair(register)


def _repair(register: Register) -> bool:
    tail = upkeep.torn_tail(register.root, register.key)
    if not tail:
        return False
    line = len(split_lines(register.path.read_bytes()))
    where = register.path.relative_to(register.root).as_posix()
    print(f"REPAIR {register.key}: {where} line {line} is torn (an append interrupted: "
          f"{len(tail)} bytes, no newline): {_preview(tail)}")
    cut = upkeep.cut_torn_tail(register.root, register.key)
    print(f"REPAIR {register.key}: " + (f"removed those {len(cut)} bytes; every complete "
                                        "entry is untouched" if cut else
                                        "it is a whole entry: only its newline was added"))
    return bool(cut)


def _sweep(register: Register) -> None:
    for p in upkeep.sweep_debris(register.root, register.key):
        print(f"REPAIR {register.key}: removed {p.relative_to(register.root).as_posix()} "
              "(left by an interrupted write)")


def _debris_warnings(register: Register) -> list[str]:
    return [f"WARN {register.key}: {p.relative_to(register.root).as_posix()}: left by an "
            "interrupted write; `inferlab verify --repair` removes it"
            for p in upkeep.debris(register.root, register.key)]


def _orphans(register: Register) -> list[str]:
    entries, _ = register.check_chain()
    return integrity.orphans(register.key, register.objects, entries)


def _anchor_problems(register: Register) -> list[Problem]:
    anchor = register.anchor()
    if anchor.unchecked is not None:  # fail closed: an anchor that cannot be read is none
        return [Problem(register.key, layout.REGISTER_FILE,
                        f"could not check its anchor in git: {anchor.unchecked}; a deleted "
                        "tail or a rollback cannot be ruled out (run verify where git runs "
                        "on this repository)")]
    return anchor.problems


def _notes(register: Register) -> list[str]:
    """What verify cannot vouch for: entries with no anchor in git."""
    anchor = register.anchor()
    rel = register.path.relative_to(register.root).as_posix()
    if anchor.unchecked is not None:
        return []  # a FAIL already
    if anchor.committed is None:
        return [f"NOTE {register.key}: not anchored: git does not track {rel} at HEAD, so a "
                "deleted tail or a consistent forged entry cannot be told from a real one "
                "(commit evidence/ to anchor it)"]
    if anchor.unanchored:
        first = anchor.committed + 1
        return [f"NOTE {register.key}: entries {first}-{anchor.working} were appended since "
                "the last commit: checked, but not anchored until committed"]
    return []


def cli_verify(root: Path | str, key: str | None = None, fix: bool = False) -> int:
    """``inferlab verify [--repair]``: 0 when every register checked is clean, else 1."""
    root = Path(root)
    if key is not None and not layout.evidence_dir(root, key).is_dir() \
            and key not in git_subfolders(root, "HEAD", "evidence"):
        print(f"no evidence for {key!r}: {layout.evidence_dir(root, key)} does not exist")
        return 1
    # a key committed at HEAD whose folders were deleted whole is checked too: its anchor
    # then says every committed entry is gone (nothing else is left to hash)
    names = [key] if key is not None else sorted(
        set(layout.evidence_keys(root)) | set(git_subfolders(root, "HEAD", "evidence")))
    if not names:
        print(f"nothing to verify: no evidence/ or results/ folders under {root.resolve()} "
              "(is --root the repository?)")
        return 1
    clean = True
    for name in names:
        register = Register(root, name)
        if fix:
            repair(register)
            _sweep(register)
        problems = register.verify() + _anchor_problems(register)
        clean = clean and not problems
        for p in problems:
            print(f"FAIL {p}")
        if upkeep.torn_tail(register.root, name) and not fix:
            print(f"HINT {name}: the last line is torn; `inferlab verify --repair` removes it")
        for note in _notes(register) + _debris_warnings(register) + _orphans(register):
            print(note)
        if not problems:
            print(f"OK {name}: {len(register.entries())} entries, "
                  f"{register.n_copies()} copies")
    return 0 if clean else 1


def _history_row(entry: dict) -> tuple[str, ...]:
    prov = entry.get("provenance") or {}
    commit = (prov.get("git_commit") or "none")[:10]
    if prov.get("git_dirty"):
        commit += "-dirty"
    return (str(entry.get("version")), str(entry.get("stage")), str(prov.get("created_at")),
            str(entry.get("sha256"))[:12], commit, str(entry.get("path")))


def cli_history(root: Path | str, key: str, stage: str | None = None) -> int:
    """``inferlab history``: one row per registered version, oldest first."""
    register = Register(root, key)
    if not register.path.is_file():
        print(f"no register for {key!r}: {register.path} does not exist")
        return 1
    rows = [("version", "stage", "created_at", "sha256", "commit", "path")]
    rows += [_history_row(e) for e in register.history(stage)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return 0
