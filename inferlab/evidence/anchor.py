"""The register's anchor outside itself, in git: what a consistent rewrite cannot fake.

A chain of hashes shows an edited or deleted line, but not a register rolled back to an
earlier, consistent state (a tail deleted with matching results files), nor one replaced
whole by another consistent register of the same key (another host of the same machine
id, its folders copied over these). So the working register is compared with

* the register committed at HEAD: it must be a prefix of the working one. A line that
  differs is a rewrite, or a *fork* when the differing line is a consistent entry of
  another history; a shorter working register had its tail deleted;
* the register at every witness of the history that HEAD cannot rewrite (the upstream
  branch, annotated or signed tags: ``files.git_witness_refs``): it must be a prefix of
  the working one too, unless HEAD is an ancestor of that ref (this clone is behind
  it). This is what shows a rollback committed with ``git commit --amend`` or ``git
  reset``: HEAD moved, the remote-tracking branch or the tag did not;
* the register's own committed history: every commit on HEAD's first-parent line only
  added lines to it (``files.git_removals``), so entries lost in a commit (a fork
  committed over the register it replaced) are named with that commit.

What a repository with no remote and no tag cannot show is said in docs/attacks.md: a
rewritten HEAD (``--amend``, a reset and a new commit) is then the only witness, and
it agrees with the rewrite.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import NamedTuple

from inferlab.core import layout
from inferlab.core.files import (
    CannotCheck,
    git_commit,
    git_file,
    git_is_ancestor,
    git_removals,
    git_witness_refs,
    split_lines,
)
from inferlab.evidence.entries import GENESIS_HASH, Problem, hash_matches


class Anchor(NamedTuple):
    """The working register against the one committed at git HEAD (``Register.anchor``)."""

    committed: int | None  # entries committed at HEAD; None when git does not track it
    working: int           # entries (lines) in the working register
    problems: list[Problem]
    unchecked: str | None = None  # why git could not be asked (then committed is None)

    @property
    def unanchored(self) -> int:
        """Entries appended since the last commit (all of them when nothing is committed)."""
        return self.working - (self.committed or 0) if not self.problems else 0


def anchor_of(root: Path, key: str, path: Path, lines: list[bytes]) -> Anchor:
    """Compare the working register of ``key`` (``lines``, read from ``path``) with git."""
    rel = path.relative_to(root).as_posix()
    try:
        committed = git_file(root, "HEAD", "./" + rel)
    except CannotCheck as exc:
        return Anchor(None, len(lines), [], unchecked=str(exc))
    if committed is None:
        return Anchor(None, len(lines), [])
    head = split_lines(committed)
    where = f"{layout.REGISTER_FILE} (committed at HEAD: {len(head)} entries)"
    problems = [Problem(key, where, m) for m in _against_head(key, rel, head, lines)]
    if not problems:
        problems = _witness_problems(root, key, rel, lines) + _history_problems(root, key, rel)
    return Anchor(len(head), len(lines), problems)


def _forks(theirs: list[bytes], lines: list[bytes], lineno: int) -> bool:
    """Whether line ``lineno`` (1-based) of ``lines`` is another entry than ``theirs`` has
    there, whole and linked to the line before it: a consistent entry of another history
    (another host's register, or a forgery), not an edit of this one."""
    try:
        entry, old = json.loads(lines[lineno - 1]), json.loads(theirs[lineno - 1])
        before = json.loads(lines[lineno - 2])["entry_hash"] if lineno > 1 else GENESIS_HASH
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return False
    return (isinstance(entry, dict) and isinstance(old, dict) and hash_matches(entry)
            and entry.get("prev_hash") == before
            and entry.get("entry_hash") != old.get("entry_hash"))


def _fork_message(key: str, lineno: int, theirs: int, ours: int, where: str, ref: str) -> str:
    machine, _ = layout.split_key(key)
    return (f"line {lineno} differs from {where}: a fork: from line {lineno} on this register "
            f"({ours} entries) holds another history of {key} than the one at {ref} ({theirs} "
            "entries), as when another host of the same machine id copied its folders over "
            "these, or an entry was forged. Neither may replace the other: restore this key's "
            f"with `git checkout {ref} -- evidence/{key} results/{key}` and keep the other "
            f"host's under an id of its own (rerun there with --config machine={machine}-<host>"
            ", or merge its folders into a clone of their own)")


def _against_head(key: str, rel: str, head: list[bytes], lines: list[bytes]) -> list[str]:
    for lineno, (old, new) in enumerate(zip(head, lines, strict=False), start=1):
        if old != new:
            if _forks(head, lines, lineno):
                return [_fork_message(key, lineno, len(head), len(lines),
                                      "the committed register", "HEAD")]
            return [f"line {lineno} differs from the committed register: history rewritten "
                    f"(`git diff -- {rel}` shows how)"]
    if len(lines) < len(head):
        return [f"the working register has {len(lines)} entries: entries {len(lines) + 1}-"
                f"{len(head)} were deleted (a tail deletion or rollback); `git checkout -- "
                f"{rel}` restores them"]
    return []


@functools.lru_cache(maxsize=256)
def _register_at(root: str, commit: str, rel: str) -> tuple[bytes, ...] | None:
    """The register at a commit (immutable, so asked of git once per process)."""
    try:
        data = git_file(root, commit, "./" + rel)
    except CannotCheck:
        return None
    return None if data is None else tuple(split_lines(data))


def _witness_problems(root: Path, key: str, rel: str, lines: list[bytes]) -> list[Problem]:
    problems = []
    for ref in git_witness_refs(root):
        commit = git_commit(root, ref)
        theirs = None if commit is None else _register_at(str(root), commit, rel)
        if theirs is None or list(theirs) == lines[:len(theirs)]:
            continue  # not there, or a prefix of this one
        if lines == list(theirs[:len(lines)]) and git_is_ancestor(root, "HEAD", ref):
            continue  # this clone is behind the ref: `git pull` brings the rest
        name = ref.removeprefix("refs/remotes/").removeprefix("refs/tags/")
        where = f"{layout.REGISTER_FILE} (at {name}: {len(theirs)} entries)"
        lineno = next((i for i, (a, b) in enumerate(zip(theirs, lines, strict=False), 1)
                       if a != b), None)
        if lineno is not None and _forks(list(theirs), lines, lineno):
            message = _fork_message(key, lineno, len(theirs), len(lines),
                                    f"the register at {name}", name)
        else:
            gone = f"line {lineno} differs" if lineno else \
                f"entries {len(lines) + 1}-{len(theirs)} are missing"
            message = (f"{gone} from the register at {name}, and HEAD does not contain "
                       f"{name}: history rewritten since {name} was made (a rollback "
                       f"committed with `git commit --amend` or a reset), unless this clone "
                       f"has not merged {name} yet (`git pull` first); `git diff {name} -- "
                       f"{rel}` shows how, `git checkout {name} -- evidence/{key} "
                       f"results/{key}` restores it")
        problems.append(Problem(key, where, message))
    return problems


def _history_problems(root: Path, key: str, rel: str) -> list[Problem]:
    head = git_commit(root, "HEAD")
    return [] if head is None else list(_history_at(str(root), head, key, rel))


@functools.lru_cache(maxsize=64)
def _history_at(root: str, head: str, key: str, rel: str) -> tuple[Problem, ...]:
    """The commits before ``head`` that removed lines of the register (once a process)."""
    return tuple(Problem(key, f"{layout.REGISTER_FILE} (commit {commit[:10]})", (
        f"that commit removed or changed {n} committed line(s) of the register: entries "
        f"lost from its history (a fork or rollback committed over it); `git show "
        f"{commit[:10]} -- {rel}` shows them, `git checkout {commit[:10]}~1 -- "
        f"evidence/{key} results/{key}` restores the register before it"))
        for commit, n in git_removals(root, rel))
