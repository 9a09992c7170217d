"""The manuscript stage on the page ("For the manuscript"): per key the chapter's four
tables and a link to each derived file with its sha256 checked now."""

from __future__ import annotations

import os

from markupsafe import Markup

from inferlab.core import layout
from inferlab.evidence.loading import derived_status
from inferlab.presentation import sections
from inferlab.presentation.manuscript import numbers_file, tables_of

SECTION = {"id": "manuscript", "title": "For the manuscript", "missing": False, "caption": Markup(
    "The chapter's four tables per machine, made by the manuscript stage from the artifacts\n"
    "above, and the files the manuscript includes: the tables as Markdown and LaTeX (booktabs),\n"
    "and every number the chapter cites as <code>numbers.json</code> and\n"
    "<code>numbers.tex</code> (one <code>\\newcommand</code> per claim, its provenance in a "
    "comment;\na number whose verdict here is not “reproduced” is wrapped in "
    "<code>\\ILcheck</code>).\n<code>inferlab manuscript check FILE</code> matches a chapter's "
    "numbers to the claims.")}
FILE = Markup('<a class="ms-file" href="{}">{}</a> <small class="{}">({})</small>')


def tables(page: sections.Page) -> list[dict]:
    blocks, page_dir = [], layout.report_path(page.root).parent
    for k in page.keys:
        found = k.evidence["manuscript"]
        data = found.data
        if data is None:
            why = found.error or "the manuscript stage did not run for this key"
            blocks.append(sections.text(f"{k.key}: {sections.NOT_MEASURED}: {why}", "nm"))
            continue
        # the files the stage declares, never a name the artifact makes up (another key's)
        files = Markup(", ").join(
            FILE.format(os.path.relpath(f["path"], page_dir), f["name"],
                        "ok" if f["ok"] else "bad", f["status"])
            for f in derived_status(page.root, k.key, "manuscript", data["files"]))
        marked = sum(n["marked"] for n in numbers_file(data))
        line = Markup("{} numbers in {}, {} marked (verdict not “reproduced”). Files:\n{}").format(
            len(data["numbers"]), data["dtype"], marked, files)
        four = [b for t in tables_of(data) for b in (
            sections.heading(t["title"]),
            sections.table({"columns": t["columns"],
                            "rows": [{"cells": r, "noisy": False} for r in t["rows"]]}),
            *(sections.text(Markup("<small>{}</small>").format(n)) for n in t["notes"]))]
        blocks.append(sections.div(
            [sections.text(line), sections.details(
                "raw ms-tables", Markup("{}: the chapter's four tables").format(k.key), four)],
            "ms-key", f"manuscript-{k.key}", k.key))
    return blocks
