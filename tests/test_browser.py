"""The report in a real browser (headless Chromium), at a phone's and a laptop's width.

Three reports: synthetic evidence for two machines at the book's sizes
(tests/report_evidence.py, with the CPU key's manuscript), the committed evidence, and that
with one machine more (the pipeline's own report is checked in test_pipeline). Without a
browser the tests skip with the reason (tests/browser.py); CI (.ci/run) installs one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from browser import SCREEN_HEIGHT, measure
from report_evidence import two_machines
from test_claims import CPU
from test_manuscript import make_manuscript

from inferlab.core import layout
from inferlab.core.pipeline import stage
from inferlab.evidence import artifacts
from inferlab.presentation.report import render_report

MAX_HEIGHT_PX = 12_000   # the page at 1,400 px wide, details closed
FIRST_FIGURE_PX = 2_700  # the chapter's comparison starts within the first 2,700 px
MACHINE_PX = 6_000       # what one machine more may add (its column narrows the matrix)
MIN_FONT_PX = 12         # body text on a phone
MIN_TEXT_PX = 10         # any text, a figure's labels too
REPORTS = ["synthetic", "committed", "one_more"]
_MEASURED: dict[tuple, dict] = {}


def _synthetic(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synthetic")
    for folder in ("results", "evidence"):
        shutil.copytree(made("evidence", tmp_path_factory) / folder, root / folder)
    make_manuscript(root, CPU)
    return render_report(root, layout.report_path(root))


def _head(root: Path) -> None:
    """results/ and evidence/ as git HEAD holds them, under ``root`` (not the working copy's:
    a reader's `make evidence` adds their machine before `make test` runs)."""
    archive = subprocess.run(["git", "archive", "HEAD", "results", "evidence"],
                             cwd=layout.REPO_ROOT, capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"no committed evidence to read from git: {archive.stderr[-300:]!r}")
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    if not layout.keys(root):
        pytest.skip("HEAD commits no results")


def _committed(tmp_path_factory) -> Path:
    """The report of every machine whose evidence is committed, made by this checkout."""
    root = tmp_path_factory.mktemp("committed")
    _head(root)
    return render_report(root, layout.report_path(root))


def _one_more(tmp_path_factory) -> Path:
    """What a reader sees after `make evidence` on a machine of their own: the committed
    machines and one more (the synthetic CPU key)."""
    root = tmp_path_factory.mktemp("one-more")
    _head(root)
    committed = layout.keys(root)
    for folder in ("results", "evidence"):
        shutil.copytree(made("evidence", tmp_path_factory) / folder / CPU, root / folder / CPU)
    assert layout.keys(root) == sorted([*committed, CPU])
    return render_report(root, layout.report_path(root))


# the synthetic evidence (report_evidence.py), which two reports copy, and the reports
_MAKERS = {"evidence": lambda factory: two_machines(factory.mktemp("evidence")),
           "synthetic": _synthetic, "committed": _committed, "one_more": _one_more}
_MADE: dict[str, Path] = {}


def made(name: str, tmp_path_factory) -> Path:
    """``name`` made once per session: pytest tears a module-scoped param's fixtures down
    when the param changes, and the tests ask for each report again."""
    if name not in _MADE:
        _MADE[name] = _MAKERS[name](tmp_path_factory)
    return _MADE[name]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    return made("synthetic", tmp_path_factory)


@pytest.fixture(scope="module", params=REPORTS)
def report(request, tmp_path_factory) -> Path:
    return made(request.param, tmp_path_factory)


def metrics(browser, page: Path, width: int, open_details: bool = False) -> dict:
    """METRICS of ``page`` at ``width`` (500: a phone), measured once."""
    key = (page, width, open_details)
    if key not in _MEASURED:
        _MEASURED[key] = measure(browser, page, width, width == 500, open_details)
    return _MEASURED[key]


@pytest.mark.parametrize("width", [500, 1400])
def test_nothing_is_wider_than_the_window(browser, report, width):
    for open_details in (False, True):
        m = metrics(browser, report, width, open_details)
        assert m["clientWidth"] == width  # on a phone the viewport meta: no 980 px layout
        assert m["scrollWidth"] <= width, (width, open_details, m["scrollWidth"])


@pytest.mark.parametrize("width", [500, 1400])
def test_first_screen_shows_every_machines_verdict_counts(browser, report, width):
    m = metrics(browser, report, width)
    root = report.parent.parent
    expected = {key: Counter(c["verdict"] for c in artifacts.read(
        layout.artifact_path(root, key, "claims"), "claims")["claims"])
        for key in layout.keys(root)}
    shown: dict[str, Counter] = {key: Counter() for key in expected}
    for c in m["counts"]:
        assert c["shown"] and c["bottom"] <= SCREEN_HEIGHT, c
        assert str(c["count"]) in c["text"] and c["verdict"] in c["text"]
        shown[c["key"]][c["verdict"]] = c["count"]
    for key in expected:  # zero counts may be shown or left out, never miscounted
        assert +shown[key] == +expected[key], key
        # the four verdicts the chapter's reader asks about, even at 0
        assert {"reproduced", "not reproduced", "not measurable here", "not checkable"} <= {
            c["verdict"] for c in m["counts"] if c["key"] == key}


def test_every_internal_link_resolves_and_no_id_repeats(browser, report):
    m = metrics(browser, report, 1400)
    assert m["links"] > 0 and m["broken"] == []
    assert m["duplicates"] == []


def test_page_is_short_with_details_closed(browser, report, request):
    m = metrics(browser, report, 1400)
    assert m["details"] > 0
    # a machine more adds its column to the claims matrix and its rows to every table
    extra = MACHINE_PX if request.node.callspec.params["report"] == "one_more" else 0
    assert m["height"] <= MAX_HEIGHT_PX + extra


@pytest.mark.parametrize("width", [500, 1400])
def test_no_text_is_under_10px_and_no_figure_label_is_cut_off(browser, report, width):
    """Figures are drawn one panel wide and their legends take the columns that fit; a
    phone's body text is readable."""
    m = metrics(browser, report, width)
    if width == 500:  # a phone
        assert m["minFont"] >= MIN_FONT_PX
    assert m["smallestText"][0] >= MIN_TEXT_PX, m["smallestText"]
    assert m["svgTexts"] > 0 and m["minSvgFont"] >= MIN_TEXT_PX
    assert m["clipped"] == []


def test_the_report_leads_with_what_it_found(browser, report):
    """Every machine's runs and what holds there on the first screen, nothing to expand;
    then the chapter's comparison as the first figure."""
    m = metrics(browser, report, 1400)
    keys = layout.keys(report.parent.parent)
    for found in (m["runs"], m["findings"]):
        assert sorted(f["key"] for f in found) == keys
        for f in found:
            assert f["shown"] and f["bottom"] <= SCREEN_HEIGHT, f
    assert all("run" in f["text"] for f in m["runs"])
    assert all(re.search(r"Of the \d+ claims that can be judged here, \d+ hold", f["text"])
               for f in m["findings"])
    assert m["firstFigure"]["id"] == "comparison"
    assert m["firstFigure"]["top"] <= FIRST_FIGURE_PX


def test_a_provenance_link_opens_its_block(browser, synthetic):
    context = browser.new_context(viewport={"width": 1400, "height": SCREEN_HEIGHT})
    try:
        page = context.new_page()
        page.goto(synthetic.resolve().as_uri())
        link = page.locator('#claims a[href^="#prov-"]').first
        target = link.get_attribute("href")[1:]
        link.click()
        opened = page.evaluate("id => document.getElementById(id).closest('details').open",
                               target)
        assert opened
    finally:
        context.close()


ROOFLINES = """() => [...document.querySelectorAll('#traffic-roofline .panel')].map(panel => {
  const svg = panel.querySelector('svg'), box = svg.getBoundingClientRect();
  return {title: [...svg.querySelectorAll('text')].map(t => t.textContent), width: box.width,
          height: box.height, panel: panel.getBoundingClientRect().width,
          right: box.right, page: document.documentElement.clientWidth};
})"""


@pytest.mark.parametrize("width", [500, 1400])
def test_a_roofline_per_machine_is_drawn_inside_its_panel(browser, synthetic, width):
    boxes = measure(browser, synthetic, width, width == 500, script=ROOFLINES)
    keys = layout.keys(synthetic.parent.parent)
    assert len(boxes) == len(keys)
    for key, box in zip(keys, boxes, strict=True):
        assert key in box["title"]  # one per machine, in the keys' order
        assert any(t.startswith("roof: copy") for t in box["title"]), box["title"]
        assert 0 < box["width"] <= box["panel"] + 0.5 and box["right"] <= box["page"]
        assert box["height"] > 100


MANUSCRIPT = """() => [...document.querySelectorAll('#manuscript .ms-key')].map(k => {
  k.querySelector('details').open = true;
  return {key: k.querySelector('h3').innerText,
          tables: [...k.querySelectorAll('table')].map(t => {
            const r = t.getBoundingClientRect();
            return r.width > 0 && r.height > 0 && t.querySelectorAll('tbody tr').length > 0;
          }),
          links: [...k.querySelectorAll('a.ms-file')].map(a => a.href)};
})"""


def test_the_manuscript_section_opens_four_tables_and_links_files_that_exist(browser,
                                                                             synthetic):
    """The CPU key's four tables show when opened; the GPU key has no manuscript."""
    (cpu,) = measure(browser, synthetic, 1400, script=MANUSCRIPT)
    assert cpu["key"] == CPU and cpu["tables"] == [True] * 4
    assert len(cpu["links"]) == len(stage("manuscript").derived)
    assert all(Path(unquote(urlparse(href).path)).is_file() for href in cpu["links"])
