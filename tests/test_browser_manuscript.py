"""The report's "For the manuscript" section in headless Chromium: each machine's four
tables open from their summary and show, every file link leads to a file that exists,
and the section fits a phone's width (tests/browser.py; skips with the reason without a
browser, fails instead under INFERLAB_REQUIRE_BROWSER=1)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from browser import SCREEN_HEIGHT, measure
from report_evidence import traffic_rows, two_machines
from test_claims import CPU, GPU, write_stage
from test_manuscript import make_manuscript

from inferlab.core import layout
from inferlab.core.pipeline import stage
from inferlab.evidence import artifacts
from inferlab.presentation.report import render_report

SECTION = """() => {
  const s = document.getElementById('manuscript');
  return [...s.querySelectorAll('.ms-key')].map(k => {
    const d = k.querySelector('details');
    d.open = true;
    const tables = [...d.querySelectorAll('table')].map(t => {
      const r = t.getBoundingClientRect();
      return {rows: t.querySelectorAll('tbody tr').length, shown: r.width > 0 && r.height > 0,
              right: r.right};
    });
    const box = s.getBoundingClientRect();
    return {key: k.querySelector('h3').innerText, tables,
            links: [...k.querySelectorAll('a.ms-file')].map(a => a.href),
            nav: !!document.querySelector('nav a[href="#manuscript"]'),
            sectionRight: box.right};
  });
}"""


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    root = two_machines(tmp_path_factory.mktemp("browser_manuscript"))
    series = artifacts.read(layout.artifact_path(root, GPU, "series"), "series").frame
    write_stage(root, GPU, "traffic", traffic_rows(series, "cuda"), "cuda")
    for key in (CPU, GPU):
        make_manuscript(root, key)
    return render_report(root, layout.report_path(root))


def section(browser, page_path: Path, width: int, phone: bool = False) -> list[dict]:
    context = browser.new_context(viewport={"width": width, "height": SCREEN_HEIGHT},
                                  is_mobile=phone, has_touch=phone)
    try:
        tab = context.new_page()
        tab.goto(page_path.resolve().as_uri())
        return tab.evaluate(SECTION)
    finally:
        context.close()


def test_each_machine_shows_its_four_tables_when_opened(browser, page):
    keys = section(browser, page, 1400)
    assert [k["key"] for k in keys] == [CPU, GPU] and all(k["nav"] for k in keys)
    for k in keys:
        assert len(k["tables"]) == 4
        assert all(t["shown"] and t["rows"] > 0 for t in k["tables"])


def test_every_file_link_leads_to_the_file(browser, page):
    for k in section(browser, page, 1400):
        assert len(k["links"]) == len(stage("manuscript").derived)
        for href in k["links"]:
            assert Path(unquote(urlparse(href).path)).is_file(), href


def test_the_section_fits_a_phone_with_its_tables_open(browser, page):
    for k in section(browser, page, 390, phone=True):
        assert k["sectionRight"] <= 390 + 1
    m = measure(browser, page, 390, phone=True, open_details=True)
    assert m["scrollWidth"] <= m["clientWidth"] and m["broken"] == []
