"""``inferlab manuscript check FILE`` by value (inferlab.presentation.manuscript_check): the
seeds pass as they are, every number of them changed in a copy fails naming it, wrong numbers
that read as another kind fail, and the file and list errors name the fix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.judging.claims import load
from inferlab.presentation.chapter_text import MAX_BYTES, WORDS, numbers_in, sentences, shape
from inferlab.presentation.coverage import NOT_CLAIMS_FILE, index, load_kinds, load_sentences
from inferlab.presentation.manuscript_check import check_text, cli_check
from inferlab.workflow.cli import main as cli_main

ROOT = layout.REPO_ROOT
CHAPTER_DIR = ROOT / "docs" / "chapter"
SEEDS = ("chapter.txt", "qa.txt")
KEY = "cpu-test-box"
CHAPTER = (CHAPTER_DIR / "chapter.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def listed():
    claims = load().claims
    seeds = load_sentences(ROOT, {c.id for c in claims}, load_kinds(ROOT / NOT_CLAIMS_FILE))
    return claims, seeds


def failures(text: str, listed, measured=None, strict=False) -> list[dict]:
    claims, seeds = listed
    return [r for r in check_text(text, claims, index(seeds), measured or {}, strict, seeds)
            if r.get("failure")]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_seeds_pass_naming_each_claim_not_reproduced_per_machine_and_what_strict_does(
        seed, listed, capsys):
    """The seeds as they are pass; the claims of the text's sentences not reproduced on a
    machine are named under it (read from the committed numbers.json), and the figure of
    each one fails --strict."""
    _, seeds = listed
    path = CHAPTER_DIR / seed
    listed = {cid for e in index(seeds).values() for cid in e.checked_by
              if shape(e.text) in {shape(s.text) for s in sentences(path.read_text("utf-8"))}}
    missed = {}
    for key in layout.keys(ROOT):
        numbers = json.loads(layout.derived_path(ROOT, key, "manuscript", "numbers.json")
                             .read_text(encoding="utf-8"))["numbers"]
        missed[key] = sorted(n["claim"] for n in numbers
                             if n["verdict"] == "not reproduced" and n["claim"] in listed)
    assert any(missed.values())  # C13-17 on each machine, as committed
    assert cli_main(["--root", str(ROOT), "manuscript", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"numbers: .* 0 failing\b.*$", out.strip()), out[-3000:]
    named = re.findall(r"^  (\S+): (\S+) \(lines? [\d, ]+\): (.*)$", out, flags=re.M)
    assert sorted((key, cid) for key, cid, _ in named) == \
        sorted((key, cid) for key, ids in missed.items() for cid in ids)
    figures = {why for _, _, why in named if why.startswith("--strict fails its figure")}
    assert "--strict fails each figure of one, exit 1" in out
    assert cli_main(["--root", str(ROOT), "manuscript", "check", str(path), "--strict"]) == \
        (1 if figures else 0)
    failing = capsys.readouterr().out.strip().splitlines()[-1]
    assert failing.endswith(f" {len(figures)} failing")


def mutations(text: str, change):
    """(line, new token, the text with one number changed) for every number of ``text``
    that ``change`` changes."""
    lines = text.split("\n")
    for s in sentences(text):
        line = lines[s.line - 1]
        at = line.find(s.text)
        for n in numbers_in(s.text):
            new = change(n.token)
            if new is None or new == n.token:
                continue
            edited = line[:at + n.start] + new + line[at + n.end:]
            yield s.line, new, "\n".join(lines[:s.line - 1] + [edited] + lines[s.line:])


def last_digit_up(token: str) -> str | None:
    digits = [i for i, ch in enumerate(token) if ch.isdigit()]
    if not digits:
        return None
    i = digits[-1]
    return token[:i] + str((int(token[i]) + 1) % 10) + token[i + 1:]


NEXT_WORD = {w: next((k for k, v in WORDS.items() if v == value + 1), None)
             for w, value in WORDS.items()}


def next_word(token: str) -> str | None:
    word = NEXT_WORD.get(token.lower())
    return None if word is None else (word.capitalize() if token[0].isupper() else word)


@pytest.mark.parametrize(("seed", "change", "at_least"), [
    ("chapter.txt", last_digit_up, 120), ("qa.txt", last_digit_up, 15),
    # sixteen, eighteen, fourteen, a dozen, sixty-four, one, two, ...
    ("chapter.txt", next_word, 20)])
def test_every_number_changed_in_its_last_digit_or_word_fails_naming_it(seed, change,
                                                                         at_least, listed):
    text = (CHAPTER_DIR / seed).read_text(encoding="utf-8")
    tried, missed = 0, []
    for line, new, copy in mutations(text, change):
        tried += 1
        if not any(r["line"] == line and r["number"] == new for r in failures(copy, listed)):
            missed.append(f"line {line}: {new}")
    assert tried >= at_least
    assert missed == []


WRONG = [  # (old, new, each failure: its number and the claim or setting columns it names)
    # a number another of its sentence prints
    ("9.4 and 8.6 (first run)", "9.5 and 8.6 (first run)", [("9.5", "C13-63")]),
    ("9.1, 10.3, 11.1 and 11.5", "9.1, 11.1, 11.1 and 11.5", [("11.1", "C13-19")]),
    ("(7.8 and 13.0 ms", "(7.8 and 13.5 ms", [("13.5", "C13-57")]),
    ("9.4 and 8.6 (first run)", "8.6 and 9.4 (first run)",
     [("8.6", "C13-63"), ("9.4", "C13-09")]),
    ("53 per cent of the block pairs had to be computed; with blocks of 64, 52 per cent",
     "52 per cent of the block pairs had to be computed; with blocks of 64, 53 per cent",
     [("52", "C13-11"), ("53", "C13-12")]),
    # interleaved figures ("7.8, 13.5, 9.4 and 8.6 (first run), and 7.8, 13.5, 9.5 and 5.5
    # (second)"): the claim that checks it, not the claim whose turn it would be
    ("9.4 and 8.6 (first run)", "9.4 and 8.7 (first run)", [("8.7", "C13-09")]),
    ("9.4 and 8.6 (first run)", "9.3 and 8.6 (first run)", [("9.3", "C13-63")]),
    ("9.5 and 5.5 (second)", "9.5 and 5.4 (second)", [("5.4", "C13-09")]),
    ("and 7.8, 13.5, 9.5", "and 7.8, 13.6, 9.5", [("13.6", "C13-62")]),
    # a figure replaced by a setting of its claim (128: a block; 8,192: a length)
    ("that alone is 1.2 seconds", "that alone is 128 seconds", [("128", "C13-14")]),
    ("with blocks of 64, 52 per cent", "with blocks of 64, 128 per cent", [("128", "C13-12")]),
    ("that alone is 1.2 seconds", "that alone is 8,192 seconds", [("8,192", "C13-14")]),
    # a setting or declared number printed twice, or out of its order
    ("split count from 1 to 64,", "split count from 1 to 1,", [("1", None)]),
    ("split count from 1 to 64,", "split count from 64 to 1,", [("1", None)]),
    ("for 12 heads of dimension 64", "for 64 heads of dimension 12", [("12", None)]),
    # a per cent that is the figure's fraction, not the figure
    (" 53 per cent of the block pairs", " 0.53 per cent of the block pairs", [("0.53", "C13-11")]),
    # a setting where the word beside it names another dimension
    ("For blocks of 128 at 2,048", "For blocks of 64 at 2,048", [("64", "block_k block_q")]),
    ("with blocks of 64, 52 per cent", "with blocks of 128, 52 per cent",
     [("128", "block_k block_q")]),
    ("blocks of 128 at 2,048 tokens", "blocks of 2,048 at 128 tokens",
     [("2,048", "block_k block_q"), ("128", "T")]),
    ("At 16,384 keys, the unfused", "At 1 keys, the unfused", [("1", "cache_len")]),
    ("fused kernel at batch 1 (571", "fused kernel at batch 16,384 (571", [("16,384", "batch")]),
]


@pytest.mark.parametrize(("old", "new", "named"), WRONG)
def test_a_wrong_number_fails_naming_the_claim_or_setting_it_breaks(old, new, named, listed):
    assert old in CHAPTER
    found = failures(CHAPTER.replace(old, new, 1), listed)
    assert [(r["number"], r["expected"]["claim"] if r.get("expected") else
             " ".join(r["setting"]["columns"]) if r.get("setting") else None)
            for r in found] == named
    assert all(r["setting"]["values"] for r in found if r.get("setting"))


def test_an_order_figure_that_is_not_its_claims_is_a_clear_error(listed):
    claims, seeds = listed
    entry = next(e for s in seeds for e in s.entries if e.order)
    bad = replace(entry, order=((entry.order[0][0], "99.9"), *entry.order[1:]))
    with pytest.raises(ValueError, match=r"'99.9' is not a figure of C13-62"):
        check_text(entry.text, claims, {shape(entry.text): bad}, {}, False, ())


def test_a_failure_names_the_line_the_figure_and_the_value_measured_here(capsys, tmp_path):
    root = measured_root(tmp_path, {"C13-19": {"text": "9.09×", "verdict": "reproduced"}})
    chapter = tmp_path / "chapter.txt"
    chapter.write_text(CHAPTER.replace("moves 9.1,", "moves 9.7,"), encoding="utf-8")
    assert cli_check(chapter, root) == 1
    out = capsys.readouterr().out
    assert "chapter.txt:67: '9.7': C13-19 prints 9.1 here (measured: cpu-test-box: 9.09×)" \
        in out


def measured_root(tmp_path: Path, numbers: dict[str, dict]) -> Path:
    """A root with the repository's claims and sentence lists and one key's numbers.json."""
    root = tmp_path / "root"
    (root / "docs" / "chapter").mkdir(parents=True)
    shutil.copy(ROOT / "claims.yaml", root)
    for name in ("sentences.yaml", "not_claims.yaml", "chapter.txt", "qa.txt"):
        shutil.copy(CHAPTER_DIR / name, root / "docs" / "chapter")
    path = layout.derived_path(root, KEY, "manuscript", "numbers.json")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"numbers": [{"claim": c, **n} for c, n in numbers.items()]}))
    return root


def test_strict_fails_a_figure_whose_claim_is_not_reproduced_on_the_key(tmp_path, capsys):
    root = measured_root(tmp_path, {"C13-06": {"text": "0.705×",
                                               "verdict": "not reproduced"}})
    chapter = CHAPTER_DIR / "chapter.txt"
    assert cli_check(chapter, root) == 0
    assert cli_check(chapter, root, strict=True, key=KEY) == 1
    out = capsys.readouterr().out
    assert "'sixteen': C13-06 is not reproduced on cpu-test-box" in out


def test_a_number_without_a_leading_zero_and_a_sentence_with_an_equals_sign(listed):
    """".55" is a number, and an "=" does not make a sentence's numbers code."""
    assert [(n.token, n.value) for n in numbers_in("x .68 y")] == [(".68", 0.68)]
    assert [r["number"] for r in failures(CHAPTER.replace("between 5.5 and", "between .55 and"),
                                          listed)] == [".55"]
    assert [r["number"] for r in failures(CHAPTER.replace("-inf, 0, 0", "-inf, 0, 7"),
                                          listed)] == ["7"]
    qa = (CHAPTER_DIR / "qa.txt").read_text(encoding="utf-8")
    assert [r["number"] for r in failures(qa.replace("block=2", "block=3"), listed)] == ["3"]


def test_a_sentence_the_list_does_not_hold_fails_when_it_prints_a_number(tmp_path, capsys):
    chapter = tmp_path / "chapter.md"
    chapter.write_text("# Notes\n\nA new sentence. The kernel took 7,357 microseconds.\n")
    assert cli_main(["manuscript", "check", str(chapter)]) == 1
    out = capsys.readouterr().out
    assert "'7,357': a sentence docs/chapter/sentences.yaml does not list" in out
    assert "A new sentence" not in out  # no number: nothing to check


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p.write_bytes("Chapter 8.\n".encode("utf-16")), "NUL bytes"),
    (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00"), "NUL bytes"),
    (lambda p: p.write_bytes(b"caf\xe9 8\n"), "is not UTF-8 text (byte 0xe9 at offset 3)"),
    (lambda p: p.write_bytes(b"x" * (MAX_BYTES + 1)), f"the limit is {MAX_BYTES:,}"),
    (Path.mkdir, "is a folder"),
    (os.mkfifo, "not a regular file"),  # and the check does not block on it
    (lambda p: None, "does not exist"),
])
def test_a_file_that_is_no_text_chapter_is_a_clear_error(make, words, tmp_path, capsys):
    path = tmp_path / "chapter.txt"
    make(path)
    assert cli_main(["manuscript", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferlab manuscript: error: ") and words in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("content", "words"), [
    ("kinds: [\n", "is not valid YAML"),
    ("- a\n- b\n", "expected a mapping with a list 'kinds:'"),
    ("kinds: 3\n", "expected a mapping with a list 'kinds:'"),
    ("kinds: [chapter]\n", "entry 0: 'chapter' is not a mapping"),
    ("kinds: [{kind: chapter}]\n", "entry 0: needs a 'kind' and a 'reason'"),
    ("kinds: [{kind: chapter, reason: r}, {kind: chapter, reason: s}]\n", "listed twice"),
    ("kinds: [{kind: chapter, reason: r, pattern: x}]\n", "unknown keys ['pattern']"),
    ("kinds: [{kind: x, reason: r}]\n", "number kind 'name' is not a kind of the not-claims"),
])
def test_a_malformed_not_claims_file_is_a_clear_error(content, words, tmp_path, capsys):
    path = tmp_path / "not_claims.yaml"
    path.write_text(content)
    code = cli_main(["manuscript", "check", str(CHAPTER_DIR / "qa.txt"), "--not-claims",
                     str(path)])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err, err


def test_the_check_speaks_json(tmp_path, capsys):
    chapter = tmp_path / "chapter.txt"
    chapter.write_text("And it was sixteen to eighteen times slower.\n")
    assert cli_main(["manuscript", "check", str(chapter), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(f["number"], f["claim"], f["figure"]) for f in found] == \
        [("sixteen", "C13-06", "16.0"), ("eighteen", "C13-06", "18.0")]


def test_a_figure_its_sentence_no_longer_prints_fails(listed):
    """Each figure of a sentence's claims must be printed in it: C13-65's 50 GB/s replaced
    by 1 (a setting of another claim of the sentence) fails."""
    old = "than the fused kernel does (50)"
    found = failures(CHAPTER.replace(old, "than the fused kernel does (1)"), listed)
    assert [(r["expected"]["claim"], r["expected"]["figure"], r["missing"]) for r in found] \
        == [("C13-65", "50.0", True)]


@pytest.mark.parametrize("new", ["And it was a hundred times slower.",
                                 "And it was many times slower."])
def test_a_claims_sentence_rewritten_without_digits_is_missed_loudly(new, listed):
    """"sixteen to eighteen times" rewritten in words the parser does not read: C13-06's
    figures fail where its sentence was."""
    old = "And it was sixteen to eighteen times slower."
    found = failures(CHAPTER.replace(old, new), listed)
    assert [(r["expected"]["claim"], r["expected"]["figure"], r["line"], r["gap"])
            for r in found] == [("C13-06", "16.0", 3, True), ("C13-06", "18.0", 3, True)]
    # an excerpt that starts after it is no failure: only a gap between listed sentences
    excerpt = CHAPTER[CHAPTER.index("The version of the same algorithm"):]
    assert failures(excerpt, listed) == []


def test_strict_with_a_key_that_has_no_numbers_is_an_error(tmp_path, capsys):
    """A mistyped key must not make the strict check pass with nothing to check."""
    root = measured_root(tmp_path, {"C13-06": {"text": "17×", "verdict": "reproduced"}})
    chapter = CHAPTER_DIR / "chapter.txt"
    with pytest.raises(ValueError, match="no-such-box: no .*numbers.json.*holds cpu-test-box"):
        cli_check(chapter, root, strict=True, key="no-such-box")
    (root / "results" / KEY / "manuscript" / "numbers.json").unlink()
    with pytest.raises(ValueError, match="--strict: no results/<machine>/manuscript"):
        cli_check(chapter, root, strict=True)
    assert cli_check(chapter, root) == 0  # without --strict there is nothing to judge by


@pytest.mark.parametrize(("old", "new"), [
    ("needed 16 MiB of extra memory", "needed 16 MiB of extra\nmemory"),
    ("at 8,192 tokens", "at\n8,192 tokens"),
    ("53 per cent of the block", "53 per\tcent of the block"),
    ("53 per cent of the block", "53 per\u00a0cent of the block"),
])
def test_a_hard_wrapped_line_or_a_tab_in_a_unit_reads_as_printed(old, new, listed):
    """Markdown wraps its paragraphs: a wrapped sentence is found, and a tab or no-break
    space inside "per cent" keeps the unit."""
    assert old in CHAPTER
    assert failures(CHAPTER.replace(old, new, 1), listed) == []
