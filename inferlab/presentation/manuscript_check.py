"""``inferlab manuscript check FILE``: every number a chapter prints, and what covers it.

A chapter (Markdown or plain text, like the seed) is read sentence by sentence; every
number it prints (digits, ``4.7 \\times 10^{-5}``, the number words eleven to
ninety-nine) is matched to the claims of ``claims.yaml`` whose sentence is this one and
prints that number (those whose chapter value prints it, when any do), and each such
claim's verdict per results key is shown. A number no claim covers must be of a kind
listed, with its reason, in ``docs/chapter/not_claims.yaml`` (a chapter number, an
exercise's size, a code literal, ...); one that is neither makes the check fail, so CI
keeps claims.yaml and the text in step. Digits glued to a letter (fp16, A100,
FlashAttention-2) are names, not numbers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from inferlab.presentation.manuscript import ONES, TENS

NOT_CLAIMS_FILE = Path(__file__).resolve().parents[2] / "docs" / "chapter" / "not_claims.yaml"

_NUMBER_WORDS = {w.lower(): i for i, w in enumerate(ONES) if i > 10}
_NUMBER_WORDS |= {f"{t.lower()}-{o.lower()}" if o else t.lower(): 10 * i + j
                  for i, t in enumerate(TENS) if i >= 2
                  for j, o in enumerate(["", *ONES[1:10]])}
_SCI = r"\d+(?:\.\d+)?\s*\\times\s*10\^\{-?\d+\}"
_DIGITS = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_WORDS = "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
# digits glued to a letter or after "letter-" are names (fp16, A100, FlashAttention-2)
_NUMBER_RE = re.compile(rf"(?<![\w.])(?<![A-Za-z]-)(?:{_SCI}|{_DIGITS})(?![\d])"
                        rf"|\b(?:{_WORDS})\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z“\"(\\•])")


def number_value(token: str) -> float:
    """'8,192' -> 8192, '4.7 \\times 10^{-5}' -> 4.7e-05, 'sixty-four' -> 64."""
    sci = re.match(r"(\d+(?:\.\d+)?)\s*\\times\s*10\^\{(-?\d+)\}", token)
    if sci:
        return float(f"{sci.group(1)}e{sci.group(2)}")
    if token.lower() in _NUMBER_WORDS:
        return float(_NUMBER_WORDS[token.lower()])
    return float(token.replace(",", ""))


def numbers_in(text: str) -> list[tuple[str, float, int, int]]:
    """(token, value, start, end) of every number ``text`` prints."""
    return [(m.group(0), number_value(m.group(0)), m.start(), m.end())
            for m in _NUMBER_RE.finditer(text)]


@dataclass(frozen=True)
class Sentence:
    line: int
    section: str
    text: str


def _is_heading(line: str) -> bool:
    return (len(line.split()) <= 6 and not line.startswith(("•", "-", "*"))
            and not line.rstrip().endswith((".", ":", "?", "!", ";", ",", ")")))


def sentences(text: str) -> list[Sentence]:
    """The text's sentences with their line and the heading above them."""
    found, section = [], ""
    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip().lstrip("#").strip()
        if not line:
            continue
        if _is_heading(line) and not numbers_in(line):
            section = line
            continue
        pieces = [s for s in _SENTENCE_END.split(line) if s.strip()]
        for j in range(len(pieces) - 1, 0, -1):  # "1. Prove that ...": a list marker
            if re.fullmatch(r"\d+[.)]", pieces[j - 1].strip()):
                pieces[j - 1:j + 1] = [f"{pieces[j - 1]} {pieces[j]}"]
        found += [Sentence(i, section, s) for s in pieces]
    return found


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w.,\\^{}-]+", " ", text.lower()).split())


def _words_of(text: str) -> set[str]:
    return set(re.findall(r"[a-z]{3,}", text.lower()))


def _same_sentence(claim_sentence: str, chapter_sentence: str) -> bool:
    """The claim quotes this sentence (or part of it, or the sentence is part of it)."""
    a, b = _normal(claim_sentence), _normal(chapter_sentence)
    if a in b or b in a:
        return True
    words = _words_of(claim_sentence)
    return bool(words) and len(words & _words_of(chapter_sentence)) >= 0.7 * len(words)


def covering_claims(value: float, sentence: str, claims) -> list:
    """The claims whose sentence is this one and prints ``value``; those whose chapter
    value prints it first, when any does."""
    def prints(text):
        return any(abs(v - value) <= 1e-9 * max(1.0, abs(value)) for _, v, _, _ in
                   numbers_in(text))
    same = [c for c in claims if _same_sentence(c.sentence, sentence) and prints(c.sentence)]
    exact = [c for c in same if prints(c.chapter_value)]
    return exact or same


@dataclass(frozen=True)
class NotClaim:
    """A kind of number that is not a claim: it matches ``pattern`` around the number, or
    stands under the heading ``section``."""

    kind: str
    reason: str
    pattern: re.Pattern | None = None
    section: str | None = None

    def covers(self, sentence: Sentence, start: int, end: int) -> bool:
        if self.section is not None and sentence.section == self.section:
            return True
        return self.pattern is not None and any(
            m.start() <= start and end <= m.end() for m in self.pattern.finditer(sentence.text))


def load_not_claims(path: Path | str | None = None) -> list[NotClaim]:
    """The explicit list of non-claim numbers; each entry needs kind, reason and exactly
    one of pattern (a regular expression) or section (a heading)."""
    path = Path(path or NOT_CLAIMS_FILE)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    kinds = []
    for i, entry in enumerate(data.get("kinds") or []):
        where = f"{path.name} entry {i} ({entry.get('kind', '?')})"
        if not entry.get("kind") or not entry.get("reason"):
            raise ValueError(f"{where}: needs a 'kind' and a 'reason'")
        if ("pattern" in entry) == ("section" in entry):
            raise ValueError(f"{where}: give exactly one of 'pattern' or 'section'")
        try:
            pattern = re.compile(entry["pattern"]) if "pattern" in entry else None
        except re.error as exc:
            raise ValueError(f"{where}: pattern {entry['pattern']!r} is not a regex: {exc}") \
                from None
        kinds.append(NotClaim(entry["kind"], " ".join(entry["reason"].split()), pattern,
                              entry.get("section")))
    return kinds


def check_text(text: str, claims, verdicts: dict[str, dict[str, str]],
               not_claims: list[NotClaim]) -> list[dict]:
    """Every number ``text`` prints: its sentence, the claims that cover it with their
    verdict per key (``verdicts``: key -> claim id -> verdict), else the non-claim kind
    it is, else neither (``uncovered``)."""
    found = []
    for sentence in sentences(text):
        for token, value, start, end in numbers_in(sentence.text):
            covering = covering_claims(value, sentence.text, claims)
            kind = None if covering else next(
                (k for k in not_claims if k.covers(sentence, start, end)), None)
            found.append({
                "line": sentence.line, "number": token, "sentence": sentence.text,
                "claims": [{"id": c.id, "verdicts": {key: v.get(c.id, "no verdict")
                                                     for key, v in verdicts.items()}}
                           for c in covering],
                "not_claim": None if kind is None else {"kind": kind.kind,
                                                        "reason": kind.reason},
                "uncovered": not covering and kind is None})
    return found


def format_check(found: list[dict], name: str) -> str:
    lines = []
    for f in found:
        if f["claims"]:
            what = "; ".join(f"{c['id']} (" + (", ".join(f"{k}: {v}" for k, v in
                                                        c["verdicts"].items()) or "no results")
                             + ")" for c in f["claims"])
        elif f["not_claim"]:
            what = f"no claim: {f['not_claim']['kind']}"
        else:
            what = "NO CLAIM and no reason: add a claim to claims.yaml or a kind to " \
                   "docs/chapter/not_claims.yaml"
        sentence = f["sentence"] if len(f["sentence"]) <= 90 else f["sentence"][:87] + "..."
        lines.append(f"{name}:{f['line']}: {f['number']!r}: {what}\n    {sentence}")
    covered = sum(bool(f["claims"]) for f in found)
    kinds: dict[str, int] = {}
    for f in found:
        if f["not_claim"]:
            kinds[f["not_claim"]["kind"]] = kinds.get(f["not_claim"]["kind"], 0) + 1
    uncovered = sum(f["uncovered"] for f in found)
    lines.append(f"{name}: {len(found)} numbers: {covered} covered by a claim, "
                 f"{sum(kinds.values())} not claims ("
                 + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())) + f"), "
                 f"{uncovered} with no claim and no reason")
    return "\n".join(lines)


def key_verdicts(root: Path | str) -> dict[str, dict[str, str]]:
    """key -> claim id -> verdict, from each key's claims.json read through the artifact
    reader; a key whose claims.json cannot be trusted says so in every verdict, and one
    that cannot be read (made by older code, another schema) says that instead."""
    from inferlab.core import layout
    from inferlab.evidence import artifacts
    from inferlab.evidence.trust import doubt
    from inferlab.judging.claims import load

    found = {}
    for key in layout.keys(root):
        path = layout.artifact_path(root, key, "claims")
        if not path.is_file():
            continue
        why = doubt(root, key, "claims")
        try:
            claims = artifacts.read(path, "claims")["claims"]
        except ValueError as exc:
            found[key] = {c.id: f"unknown: its claims.json cannot be read ({exc}); rerun its "
                          "claims stage" for c in load().claims}
            continue
        found[key] = {c["id"]: c["verdict"] + (f" (untrusted: {why})" if why else "")
                      for c in claims}
    return found


def cli_check(path: Path | str, root: Path | str = ".", not_claims: Path | str | None = None,
              as_json: bool = False) -> int:
    """``inferlab manuscript check FILE``: 1 when a number has no claim and no reason."""
    from inferlab.judging.claims import load

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"chapter file {str(path)!r} does not exist")
    found = check_text(path.read_text(encoding="utf-8"), load().claims, key_verdicts(root),
                       load_not_claims(not_claims))
    print(json.dumps(found, indent=2, ensure_ascii=False) if as_json
          else format_check(found, path.name))
    return 1 if any(f["uncovered"] for f in found) else 0
