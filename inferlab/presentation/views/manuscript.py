"""The manuscript stage on the page ("For the manuscript"): per key the chapter's four
tables and a link to each derived file with its sha256 checked now
(``manuscript.report_view``)."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.presentation import sections
from inferlab.presentation.manuscript import report_view

SECTION = {"id": "manuscript", "title": "For the manuscript", "missing": False, "caption": Markup(
    "The chapter's four tables per machine, made by the manuscript stage from the artifacts\n"
    "above, and the files the manuscript includes: the tables as Markdown and LaTeX (booktabs),\n"
    "and every number the chapter cites as <code>numbers.json</code> and\n"
    "<code>numbers.tex</code> (one <code>\\newcommand</code> per claim, its provenance in a "
    "comment;\na number whose verdict here is not “reproduced” is wrapped in "
    "<code>\\ILcheck</code>).\n<code>inferlab manuscript check FILE</code> matches a chapter's "
    "numbers to the claims.")}
FILE = Markup('<a class="ms-file" href="{}">{}</a> <small class="{}">({})</small>')


def figure_of(check) -> None:
    return None  # no claim judges the manuscript's artifact


def tables(page: sections.Page) -> list[dict]:
    blocks = []
    for k in page.keys:
        m = report_view(page.root, k.key, k.evidence["manuscript"])
        if m["missing"]:
            blocks.append(sections.text(f"{m['key']}: {m['missing']}", "nm"))
            continue
        files = Markup(", ").join(FILE.format(f["href"], f["name"], "ok" if f["ok"] else "bad",
                                              f["status"]) for f in m["files"])
        line = Markup("{} numbers in {}, {} marked (verdict not “reproduced”). Files:\n{}").format(
            m["numbers"], m["dtype"], m["marked"], files)
        four = [b for t in m["tables"] for b in (
            sections.heading(t["title"]), sections.table(t["table"]),
            *(sections.text(Markup("<small>{}</small>").format(n)) for n in t["notes"]))]
        blocks.append(sections.div(
            [sections.text(line), sections.details(
                "raw ms-tables", Markup("{}: the chapter's four tables").format(m["key"]), four)],
            "ms-key", f"manuscript-{m['key']}", m["key"]))
    return blocks
