"""Headless Chromium for the report's browser tests (tests/test_browser.py).

Playwright drives the system's Chromium ($INFERLAB_CHROMIUM, ``chromium``,
``chromium-browser`` or ``google-chrome``: its own download cannot reach the network here),
with a fresh profile per launch and flags that keep it off the network. ``why_not()`` says
why the tests cannot run here; under INFERLAB_REQUIRE_BROWSER=1 (.ci/run) that fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREEN_HEIGHT = 900  # the "first screen": a laptop window or a tall phone

# Everything the tests read from a loaded page, in one round trip.
METRICS = """() => {
  const de = document.documentElement;
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
  const seen = new Set(), duplicates = new Set();
  for (const id of ids) { if (seen.has(id)) duplicates.add(id); seen.add(id); }
  const broken = [...document.querySelectorAll('a[href^="#"]')]
    .map(a => decodeURIComponent(a.getAttribute('href').slice(1)))
    .filter(id => !document.getElementById(id));
  const counts = [...document.querySelectorAll('#summary [data-verdict]')].map(e => {
    const r = e.getBoundingClientRect();
    return {key: e.closest('[data-key]').dataset.key, verdict: e.dataset.verdict,
            count: Number(e.dataset.count), text: e.innerText, top: r.top + scrollY,
            bottom: r.bottom + scrollY, shown: r.width > 0 && r.height > 0};
  });
  const texts = [...document.querySelectorAll('p, li, td, th, summary, dd, dt, figcaption')]
    .filter(e => e.getBoundingClientRect().width > 0 && e.innerText.trim());
  const fonts = texts.map(e => parseFloat(getComputedStyle(e).fontSize));
  // every element that shows text of its own (a span, a small, a link inside a cell too)
  const own = [...document.body.querySelectorAll('*')].filter(e => !e.closest('svg')
    && e.getBoundingClientRect().width > 0
    && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()));
  const smallest = own.map(e => [parseFloat(getComputedStyle(e).fontSize), e.innerText])
    .sort((a, b) => a[0] - b[0])[0] || [Infinity, ''];
  const svgFonts = [], clipped = [];
  for (const svg of document.querySelectorAll('svg')) {
    const box = svg.viewBox.baseVal, shown = svg.getBoundingClientRect();
    if (!box || !box.width || !shown.width) continue;
    for (const t of svg.querySelectorAll('text')) {
      svgFonts.push(parseFloat(getComputedStyle(t).fontSize) * shown.width / box.width);
      const r = t.getBoundingClientRect();  // a label past the SVG's edge is cut off
      if (r.left < shown.left - 1 || r.right > shown.right + 1 || r.top < shown.top - 1
          || r.bottom > shown.bottom + 1) clipped.push(t.textContent);
    }
  }
  const at = sel => [...document.querySelectorAll(sel)].map(e => {
    const r = e.getBoundingClientRect();
    return {key: e.closest('[data-key]') ? e.closest('[data-key]').dataset.key : null,
            text: e.innerText, top: r.top + scrollY, bottom: r.bottom + scrollY,
            shown: r.width > 0 && r.height > 0 && !e.closest('details:not([open])')};
  });
  const figure = document.querySelector('figure');
  return {scrollWidth: de.scrollWidth, clientWidth: de.clientWidth, height: de.scrollHeight,
          duplicates: [...duplicates], broken,
          links: document.querySelectorAll('a[href^="#"]').length,
          counts, minFont: Math.min(...fonts), minSvgFont: Math.min(...svgFonts),
          smallestText: smallest, clipped, runs: at('#summary .runs'),
          findings: at('#summary .finding'),
          firstFigure: figure ? {id: figure.id, top: figure.getBoundingClientRect().top + scrollY}
                              : null,
          svgTexts: svgFonts.length, details: document.querySelectorAll('details').length};
}"""
OPEN_ALL = "() => document.querySelectorAll('details').forEach(d => d.open = true)"


def chromium_path() -> str | None:
    """The Chromium executable: $INFERLAB_CHROMIUM, else chromium on the PATH."""
    if os.environ.get("INFERLAB_CHROMIUM"):
        return shutil.which(os.environ["INFERLAB_CHROMIUM"])
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                 "google-chrome"))), None)


def why_not() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if os.environ.get("INFERLAB_CHROMIUM") and chromium_path() is None:
        return f"INFERLAB_CHROMIUM={os.environ['INFERLAB_CHROMIUM']!r} is not an executable"
    if chromium_path() is None:
        return "no chromium on the PATH (apt-get install -y chromium, or set INFERLAB_CHROMIUM)"
    return None


@contextmanager
def chromium() -> Iterator:
    """A headless Chromium (Playwright Browser), closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def measure(browser, page_path: Path, width: int, phone: bool = False,
            open_details: bool = False, script: str = METRICS):
    """``script``'s result on ``page_path`` at ``width`` CSS px (``phone``: a mobile viewport
    that honours the page's viewport meta, as a phone's browser does)."""
    context = browser.new_context(viewport={"width": width, "height": SCREEN_HEIGHT},
                                  is_mobile=phone, has_touch=phone)
    try:
        page = context.new_page()
        page.goto(Path(page_path).resolve().as_uri())
        if open_details:
            page.evaluate(OPEN_ALL)
        return page.evaluate(script)
    finally:
        context.close()
