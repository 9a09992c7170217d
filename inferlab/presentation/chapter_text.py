"""The chapter's text as sentences and numbers, for the text check and the coverage list.

A number is digits (``8,192``, ``9.1``, ``.68``), a power of ten as the chapter writes it
(``4.7 \\times 10^{-5}``), a number word up to ninety-nine or "a dozen", with the unit that
follows it (``16 MiB``, ``53 per cent``) and its printed decimals. Digits glued to a letter
(fp16, A100) or after "letter-" (FlashAttention-2) are names; a version (0.26.0) is one
number, matched by its token. A sentence's *shape* is its text with every number as ``#``:
the key a draft's sentence is found by in docs/chapter/sentences.yaml.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 1_000_000  # the chapter is 25 kB; a file 40 times that is not a chapter


def _spaced(words) -> str:
    """An alternation of ``words``, longest first, any whitespace (a tab, a no-break space, a
    line break) standing for each space: "per\\tcent" is "per cent"."""
    return "|".join(r"\s+".join(re.escape(p) for p in w.split(" "))
                    for w in sorted(words, key=len, reverse=True))


def _normal(text: str) -> str:
    return " ".join(text.split()).lower()


_SMALL = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
WORDS = {w: i for i, w in enumerate(_SMALL) if i > 0} | dict(_TENS) | {"a dozen": 12}
WORDS |= {f"{t}-{o}": v + _SMALL.index(o) for t, v in _TENS.items() for o in _SMALL[1:10]}
_WORD_RE = _spaced(WORDS)
_SCI = r"(?P<mant>\d+(?:\.\d+)?)\s*\\times\s*10\^\{(?P<exp>-?\d+)\}"
_DIGITS = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
# a unit after a number, normalised: "per cent" and "%" alike, "microseconds" as "µs"
UNITS = {"per cent": "%", "percent": "%", "%": "%", "mib": "MiB", "gib": "GiB",
         "gb/s": "GB/s", "ms": "ms", "µs": "µs", "microseconds": "µs", "seconds": "s",
         "times": "×", "×": "×", "x": "×"}
_UNIT_RE = _spaced(UNITS)
NUMBER_RE = re.compile(
    rf"(?<![\w.\\])(?<![A-Za-z]-)(?:(?P<version>\d+(?:\.\d+){{2,}})|{_SCI}"
    rf"|(?P<digits>{_DIGITS}))(?![\d])"
    rf"|(?<![\w-])(?P<word>{_WORD_RE})(?![\w-])", re.IGNORECASE)
_UNIT_AFTER = re.compile(rf"\s*(?P<unit>{_UNIT_RE})(?![A-Za-z])", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass(frozen=True)
class Number:
    """One number as the text prints it: its token, value, unit (normalised, or None),
    decimals and where it is in its sentence."""

    token: str
    value: float
    unit: str | None
    decimals: int
    start: int
    end: int

    def equals(self, value: float, unit: str | None = None, fraction: bool = False) -> bool:
        """Whether this number prints ``value`` (in ``unit`` where both have one): the same
        value, or for a per cent its fraction (53 per cent is 0.53). ``fraction``: a figure
        with no unit of its own, which a per cent prints as its fraction only (0.53 per cent
        is not 0.53)."""
        if unit is not None and self.unit is not None and unit != self.unit:
            return False
        candidates = ([self.value / 100] if fraction else [self.value, self.value / 100]) \
            if self.unit == "%" else [self.value]
        return any(abs(c - value) <= 1e-9 * max(1.0, abs(value)) for c in candidates)


def _decimals(text: str) -> int:
    return len(text.partition(".")[2]) if "." in text else 0


def numbers_in(text: str) -> list[Number]:
    """Every number ``text`` prints, in order."""
    found = []
    for m in NUMBER_RE.finditer(text):
        if m.group("word"):
            value, decimals = float(WORDS[_normal(m.group("word"))]), 0
        elif m.group("version"):  # 0.26.0: matched by its token, never by value
            value, decimals = float("nan"), 0
        elif m.group("mant"):
            value = float(f"{m.group('mant')}e{m.group('exp')}")
            decimals = _decimals(m.group("mant"))
        else:
            value, decimals = float(m.group("digits").replace(",", "")), _decimals(m.group(0))
        unit = _UNIT_AFTER.match(text, m.end())
        found.append(Number(m.group(0), value, UNITS[_normal(unit.group("unit"))]
                            if unit else None, decimals, m.start(), m.end()))
    return found


def parse_figure(figure) -> Number:
    """A claim's printed figure ('16 MiB', 'a dozen', 4.7e-5) as a Number."""
    if isinstance(figure, int | float) and not isinstance(figure, bool):
        text = repr(float(figure))
        return Number(text, float(figure), None, _decimals(text), 0, len(text))
    found = numbers_in(str(figure))
    if len(found) != 1:
        raise ValueError(f"figure {figure!r} must print exactly one number, e.g. '16 MiB' "
                         f"or 'a dozen'; it prints {len(found)}")
    return found[0]


@functools.lru_cache(maxsize=4096)  # a text check shapes each entry once per sentence
def shape(text: str) -> str:
    """The sentence with every number replaced by '#' and spaces collapsed."""
    return " ".join(NUMBER_RE.sub("#", text).split())


@dataclass(frozen=True)
class Sentence:
    line: int
    section: str
    text: str


def _is_heading(line: str) -> bool:
    return (len(line.split()) <= 6 and not line.startswith(("•", "-", "*"))
            and not re.search(r"[=(@#]", line)
            and not line.rstrip().endswith((".", ":", "?", "!", ";", ",", ")")))


def sentences(text: str) -> list[Sentence]:
    """The text's sentences with their line and the heading above them; a heading is no
    sentence."""
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


# the words that name a setting's dimension, after the number ("2,048 tokens") or before it
# ("batch 1", "blocks of 128"): a number they name is a setting of that column only
NAMED_AFTER = {"tokens": {"T"}, "token": {"T"}, "keys": {"cache_len"}, "heads": {"heads"},
               "splits": {"splits"}, "split": {"splits"}}
NAMED_BEFORE = {"batch": {"batch"}, "blocks of": {"block_q", "block_k"},
                "block of": {"block_q", "block_k"}}


def dimension(text: str, number: Number) -> set[str] | None:
    """The columns the word beside ``number`` names, or None where no such word is."""
    after = text[number.end:].lstrip().lower()
    before = " ".join(text[:number.start].lower().split())
    for word, columns in NAMED_AFTER.items():
        if after.startswith(word) and not after[len(word):len(word) + 1].isalpha():
            return columns
    for word, columns in NAMED_BEFORE.items():
        if before.endswith(word):
            return columns
    return None


def read_chapter(path: Path | str) -> str:
    """The chapter's text: a regular UTF-8 file of at most MAX_BYTES; anything else is an
    error that says what it is and what is expected."""
    path = Path(path)
    if not path.is_file():  # a pipe is refused before it is read: reading it would block
        what = ("is a folder" if path.is_dir() else "is not a regular file (a pipe or device)"
                if path.exists() else "does not exist")
        raise ValueError(f"chapter file {str(path)!r} {what}; give the chapter's text file")
    data = path.read_bytes()
    if len(data) > MAX_BYTES:
        raise ValueError(f"chapter file {str(path)!r} is {len(data):,} bytes; the limit is "
                         f"{MAX_BYTES:,} (a chapter is tens of kB)")
    if b"\0" in data:
        raise ValueError(f"chapter file {str(path)!r} holds NUL bytes: binary, or UTF-16; "
                         "save it as UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"chapter file {str(path)!r} is not UTF-8 text (byte "
                         f"{data[exc.start]:#04x} at offset {exc.start}); save it as UTF-8") \
            from None
