"""docs/chapter/sentences.yaml, where each sentence of both seeds is stored with the claims
that check it (or a reason of a fixed kind) and its numbers that are no measurement; and
docs/claims-coverage.md, generated from it (``inferlab claims --coverage``).

An entry is ``{text, claims: [ids]}`` or ``{text, reason}`` (``REASONS``), with optional
``by`` (claims of other sentences that check the rest of it), ``why``, ``numbers: {kind:
[values]}`` (kinds from docs/chapter/not_claims.yaml) and ``order`` (where two claims'
figures interleave: ``[[claim, figure], ...]`` in print order).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from inferlab.judging.claims import SENTENCES_FILE
from inferlab.presentation.chapter_text import shape
from inferlab.presentation.formats import md_cell

NOT_CLAIMS_FILE = Path("docs") / "chapter" / "not_claims.yaml"
COVERAGE_FILE = Path("docs") / "claims-coverage.md"
REASONS = {"not_a_claim": "says nothing a number or a comparison could check (narrative, a "
                          "definition, an instruction, a heading-like line)",
           "not_checkable_here": "a statement this pipeline cannot test (another chapter's "
                                 "or another author's account, the book's own history)",
           "covered_by": "restates what the claims named in `by` check"}
ENTRY_KEYS = {"text", "claims", "reason", "by", "why", "numbers", "order"}


@dataclass(frozen=True)
class Entry:
    """One sentence of a seed and what covers it."""

    text: str
    claims: tuple[str, ...] = ()
    reason: str | None = None
    by: tuple[str, ...] = ()
    why: str | None = None
    numbers: dict = field(default_factory=dict)   # kind -> declared values
    order: tuple[tuple[str, str], ...] = ()       # (claim, figure) in print order

    @property
    def checked_by(self) -> tuple[str, ...]:
        """The claims whose figures its numbers are matched to."""
        return self.claims or self.by


@dataclass(frozen=True)
class Seed:
    name: str
    seed: str
    copy: str
    entries: tuple[Entry, ...]


def _load_yaml(path: Path, what: str):
    if not path.is_file():
        raise ValueError(f"{what} {str(path)!r} does not exist or is not a file")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {path.name} is not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start}); save it as UTF-8") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} {path.name} is not valid YAML: "
                         f"{' '.join(str(exc).split())}") from None


def load_kinds(path: Path | str) -> dict[str, str]:
    """docs/chapter/not_claims.yaml: {kind: reason} of the numbers that are no measurement."""
    path = Path(path)
    data = _load_yaml(path, "not-claims file")
    if not isinstance(data, dict) or not isinstance(data.get("kinds"), list):
        raise ValueError(f"{path.name}: expected a mapping with a list 'kinds:' of "
                         "{kind: ..., reason: ...}; got " + type(data).__name__)
    kinds: dict[str, str] = {}
    for i, entry in enumerate(data["kinds"]):
        where = f"{path.name} entry {i}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: {entry!r} is not a mapping of kind and reason")
        kind, reason = entry.get("kind"), entry.get("reason")
        if not isinstance(kind, str) or not kind or not isinstance(reason, str) or not reason:
            raise ValueError(f"{where}: needs a 'kind' and a 'reason', both text; got "
                             f"kind={kind!r}, reason={reason!r}")
        unknown = set(entry) - {"kind", "reason"}
        if unknown:
            raise ValueError(f"{where} ({kind}): unknown keys {sorted(unknown)}; an entry "
                             "is a kind and its reason (the numbers are declared per "
                             f"sentence in {SENTENCES_FILE})")
        if kind in kinds:
            raise ValueError(f"{where}: kind {kind!r} is listed twice")
        kinds[kind] = " ".join(reason.split())
    return kinds


def _entry(raw, where: str, known_ids: set[str], kinds: dict[str, str]) -> Entry:
    if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
        raise ValueError(f"{where}: an entry is a mapping with the sentence's 'text'")
    unknown = set(raw) - ENTRY_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; expected {sorted(ENTRY_KEYS)}")
    claims, reason = tuple(raw.get("claims") or ()), raw.get("reason")
    if bool(claims) == (reason is not None):
        raise ValueError(f"{where}: give either claims: [ids] or a reason ({', '.join(REASONS)})")
    if reason is not None and reason not in REASONS:
        raise ValueError(f"{where}: reason {reason!r} is not one of {list(REASONS)}")
    by = tuple(raw.get("by") or ())
    if reason == "covered_by" and not by:
        raise ValueError(f"{where}: reason covered_by needs by: [claim ids]")
    if by and reason != "covered_by" and not claims:
        raise ValueError(f"{where}: by: [claim ids] goes with reason covered_by, or beside "
                         "claims: [ids] for the rest of what the sentence says")
    if set(claims) & set(by):
        raise ValueError(f"{where}: {sorted(set(claims) & set(by))} listed in claims and by")
    for cid in (*claims, *by):
        if cid not in known_ids:
            raise ValueError(f"{where}: claim {cid!r} is not in claims.yaml")
    numbers = raw.get("numbers") or {}
    if not isinstance(numbers, dict):
        raise ValueError(f"{where}: numbers must map a kind to its values")
    for kind, values in numbers.items():
        if kind not in kinds:
            raise ValueError(f"{where}: number kind {kind!r} is not a kind of the "
                             f"not-claims file ({', '.join(kinds)}); add it there "
                             f"({NOT_CLAIMS_FILE}) or use one of those")
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: numbers.{kind} must be a list of values")
    order = raw.get("order") or ()
    if order and not claims:
        raise ValueError(f"{where}: order: [[claim id, figure], ...] goes with claims: [ids]")
    for pair in order:
        if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in claims):
            raise ValueError(f"{where}: order entry {pair!r} is not [a claim of claims: "
                             f"{list(claims)}, the figure it prints]")
    return Entry(raw["text"], claims, reason, by, raw.get("why"),
                 {k: tuple(v) for k, v in numbers.items()},
                 tuple((cid, str(fig)) for cid, fig in order))


def load_sentences(root: Path | str, known_ids: set[str], kinds: dict[str, str]
                   ) -> tuple[Seed, ...]:
    """Both seeds' sentence lists, validated: errors name the seed, the entry and the fix."""
    path = Path(root) / SENTENCES_FILE
    data = _load_yaml(path, "sentence list")
    if not isinstance(data, dict) or not isinstance(data.get("seeds"), list):
        raise ValueError(f"{path.name}: expected 'seeds:', a list of {{name, seed, copy, "
                         "sentences}}")
    seeds = []
    for s in data["seeds"]:
        entries = tuple(_entry(raw, f"{path.name} {s['name']} sentence {i + 1}", known_ids,
                               kinds) for i, raw in enumerate(s["sentences"]))
        seeds.append(Seed(s["name"], s["seed"], s["copy"], entries))
    return tuple(seeds)


def index(seeds: tuple[Seed, ...]) -> dict[str, Entry]:
    """Every entry by its sentence's shape (numbers as '#')."""
    return {shape(e.text): e for s in seeds for e in s.entries}


def coverage_markdown(seeds: tuple[Seed, ...], claims) -> str:
    """docs/claims-coverage.md: per seed, every sentence and what covers it."""
    kinds = {c.id: c.kind for c in claims}
    used = {cid for s in seeds for e in s.entries for cid in e.checked_by}
    lines = ["# Which claim checks each sentence", "",
             f"Generated from `{SENTENCES_FILE}` by `python -m inferlab claims --coverage`; do "
             "not edit. Every sentence of both seeds has the claims that check it or a reason "
             "of a fixed kind:", ""]
    lines += [f"- `{r}`: {why}" for r, why in REASONS.items()]
    for s in seeds:
        counts = Counter("claims" if e.claims else e.reason for e in s.entries)
        lines += ["", f"## {s.name} (`{s.seed}`, copy `{s.copy}`)", "",
                  f"{len(s.entries)} sentences: " + ", ".join(
                      f"{n} {k.replace('_', ' ')}" for k, n in sorted(counts.items())) + ".",
                  "", "| # | sentence | claims | reason | numbers that are no measurement |",
                  "|---|---|---|---|---|"]
        for i, e in enumerate(s.entries, start=1):
            ids = ", ".join(f"{c} ({kinds[c]})" for c in e.claims)
            reason = (e.reason or ("also covered by" if e.by else "")) + \
                (f" {', '.join(e.by)}" if e.by else "") + (f": {e.why}" if e.why else "")
            numbers = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in e.numbers.items())
            lines.append(f"| {i} | {md_cell(e.text)} | {ids} | {md_cell(reason)} | "
                         f"{md_cell(numbers)} |")
    orphans = [c.id for c in claims if c.id not in used]
    lines += ["", "## Claims no sentence names", "",
              ", ".join(orphans) if orphans else "None: every claim checks a sentence."]
    return "\n".join(lines) + "\n"


def cli_coverage(root: Path | str, check: bool = False) -> int:
    """Write docs/claims-coverage.md from the sentence list (``check``: exit 1 if stale)."""
    from inferlab.judging.claims import load
    from inferlab.presentation.claims_review import write_generated

    claims = load(Path(root) / "claims.yaml").claims
    seeds = load_sentences(root, {c.id for c in claims}, load_kinds(Path(root) /
                                                                    NOT_CLAIMS_FILE))
    return write_generated(root, COVERAGE_FILE, coverage_markdown(seeds, claims), check,
                           "python -m inferlab claims --coverage")
