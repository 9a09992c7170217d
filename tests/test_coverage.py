"""The readings and the coverage, generated and complete: docs/claims-review.md and
docs/claims-coverage.md are their generators' output, every sentence of both seeds is in
docs/chapter/sentences.yaml with claims or a reason of a fixed kind, and the list's
errors name the entry and the fix."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from inferlab.core import layout
from inferlab.judging.claims import load
from inferlab.presentation.chapter_text import numbers_in, sentences
from inferlab.presentation.claims_review import REVIEW_FILE, review_markdown, write_generated
from inferlab.presentation.coverage import (
    COVERAGE_FILE,
    NOT_CLAIMS_FILE,
    SENTENCES_FILE,
    coverage_markdown,
    load_kinds,
    load_sentences,
)
from inferlab.workflow.cli import main as cli_main

ROOT = layout.REPO_ROOT
COMPARISON = re.compile(r"\b(?:faster|slower|more|less|fewer|larger|smaller|bigger|longer|"
                        r"same|identical|than|halves|doubl\w*|exact\w*|equal\w*|drops?|beat|"
                        r"grows?|scales?|saved?|lost|overflows?)\b", re.IGNORECASE)


def unlisted(root: Path, listed) -> list[str]:
    """'seed: sentence' for each sentence of a seed's text the list does not hold, in
    order, and each entry no longer in its text."""
    problems = []
    for s in listed:
        found = [x.text for x in sentences((root / s.copy).read_text(encoding="utf-8"))]
        entries = [e.text for e in s.entries]
        problems += [f"{s.name}: not listed: {t}" for t in found if t not in entries]
        problems += [f"{s.name}: not in the text: {t}" for t in entries if t not in found]
    return problems


def seeds(root: Path = ROOT):
    """The repository's claims and ``root``'s sentence list, read as the CLI reads them."""
    claims = load().claims
    return claims, load_sentences(root, {c.id for c in claims}, load_kinds(root /
                                                                          NOT_CLAIMS_FILE))


@pytest.mark.parametrize(("flag", "generated"), [("--review", REVIEW_FILE),
                                                 ("--coverage", COVERAGE_FILE)])
def test_each_generated_file_is_its_generators_output(flag, generated, capsys):
    """--check compares the committed file with review_markdown / coverage_markdown."""
    assert cli_main(["--root", str(ROOT), "claims", flag, "--check"]) == 0, \
        f"run: python -m inferlab claims {flag}"
    assert capsys.readouterr().out == f"{generated}: current\n"


def test_a_stale_generated_file_fails_the_check_and_is_left_as_it_was(tmp_path, capsys):
    """--check on a file that is not the generator's output: exit 1, the command that
    mends it, nothing written; without --check it is written, and then it is current."""
    doc = Path("docs") / "generated.md"
    (tmp_path / "docs").mkdir()
    (tmp_path / doc).write_text("an edit by hand\n", encoding="utf-8")
    assert write_generated(tmp_path, doc, "generated\n", True, "make-it") == 1
    assert capsys.readouterr().out == f"{doc}: NOT current: run make-it\n"
    assert (tmp_path / doc).read_text(encoding="utf-8") == "an edit by hand\n"
    assert write_generated(tmp_path, doc, "generated\n", False, "make-it") == 0
    assert write_generated(tmp_path, doc, "generated\n", True, "make-it") == 0
    assert capsys.readouterr().out == f"wrote {doc}\n{doc}: current\n"


def test_every_claim_states_its_reading_and_the_table_shows_scope_and_region():
    text = review_markdown(load())
    for c in load().claims:
        assert c.reading is not None and c.reading.quantity and c.reading.why, c.id
        row = next(line for line in text.splitlines() if line.startswith(f"| {c.id} |"))
        cells = [x.strip() for x in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 7 and all(cells), (c.id, cells)


def test_every_sentence_of_both_seeds_is_listed_in_order():
    _, listed = seeds()
    assert [s.name for s in listed] == ["chapter", "qa"]
    assert unlisted(ROOT, listed) == []


def test_a_sentence_with_a_number_or_a_comparison_has_claims_or_a_reason():
    _, listed = seeds()
    checked = 0
    for seed in listed:
        for entry in seed.entries:
            if numbers_in(entry.text) or COMPARISON.search(entry.text):
                checked += 1
                assert entry.claims or entry.reason, entry.text
    assert checked >= 100


def test_every_claim_checks_a_sentence_and_the_chapter_s_fifty_gb_s_has_one():
    claims, listed = seeds()
    named = {cid for s in listed for e in s.entries for cid in e.checked_by}
    assert {c.id for c in claims} <= named
    fifty = next(e for s in listed for e in s.entries if "only 50 GB/s" in e.text)
    assert "C13-65" in fifty.claims and "C13-30" not in fifty.claims


def copy_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(ROOT / "docs" / "chapter", root / "docs" / "chapter")
    return root


def edit_first(root: Path, change) -> None:
    path = root / SENTENCES_FILE
    data = yaml.safe_load(path.read_text())
    change(data["seeds"][0]["sentences"])
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))


@pytest.mark.parametrize(("change", "words"), [
    (lambda s: s[1].pop("claims"), "give either claims: [ids] or a reason"),
    (lambda s: s[1].update(reason="not_a_claim"), "give either claims: [ids] or a reason"),
    (lambda s: s[0].update(reason="obvious"), "reason 'obvious' is not one of"),
    (lambda s: s[1].update(claims=["C13-99"]), "claim 'C13-99' is not in claims.yaml"),
    (lambda s: s[0].update(reason="covered_by"), "covered_by needs by: [claim ids]"),
    (lambda s: s[0].update(numbers={"year": [2024]}), "number kind 'year' is not a kind"),
    (lambda s: s[0].update(claim=["C13-01"]), "unknown keys ['claim']"),
    (lambda s: s[0].update(by=["C13-02"]), "by: [claim ids] goes with reason covered_by, or "
                                           "beside claims"),
    (lambda s: s[1].update(by=["C13-01"]), "['C13-01'] listed in claims and by"),
])
def test_a_wrong_entry_is_refused_naming_it(change, words, tmp_path):
    root = copy_root(tmp_path)
    edit_first(root, change)
    with pytest.raises(ValueError, match=re.escape(words)) as info:
        seeds(root)
    assert "sentences.yaml chapter sentence" in str(info.value)


def test_claims_with_a_by_list_name_the_rest_of_the_sentence(tmp_path):
    """A sentence checked by its own claims and, for the rest of what it says, by claims
    of other sentences (the independent coverage review found such sentences naming only
    their own): both lists are read, and the table says "also covered by"."""
    root = copy_root(tmp_path)
    edit_first(root, lambda s: s[1].update(by=["C13-43"], why="the fused kernel's"))
    claims, listed = seeds(root)
    entry = listed[0].entries[1]
    assert entry.claims == ("C13-01",) and entry.by == ("C13-43",)
    assert entry.checked_by == ("C13-01",)  # its numbers stay its own claims'
    table = coverage_markdown(listed, claims)
    assert "also covered by C13-43: the fused kernel's" in table


def test_a_sentence_missing_from_the_list_is_found(tmp_path):
    root = copy_root(tmp_path)
    edit_first(root, lambda s: s.pop(2))
    (missing,) = unlisted(root, seeds(root)[1])
    assert missing.startswith("chapter: not listed: At 8,192 tokens it needed 16 MiB")


def test_the_seeds_split_as_the_list_holds_them():
    for copy in ("chapter.txt", "qa.txt"):
        found = sentences((ROOT / "docs" / "chapter" / copy).read_text(encoding="utf-8"))
        assert all(s.text == s.text.strip() and s.text for s in found)
    assert [s.text for s in sentences("These are two. cuDNN is refused.")] == \
        ["These are two.", "cuDNN is refused."]
