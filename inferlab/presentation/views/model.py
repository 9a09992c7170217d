"""The model stage on the page ("The chapter's arithmetic"): its rows per key."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.presentation import sections
from inferlab.presentation.report_tables import raw_block

SECTION = {"id": "model", "title": "The chapter's arithmetic", "caption": Markup(
    "The chapter's counts and estimates, recomputed by the model stage: from the chapter's own\n"
    "premises (its GPU's numbers), from operations counted here, or from what this machine's\n"
    "probe measured; the source column says which. Claims of kind “model” and “arithmetic” are\n"
    "judged on these rows.")}
COLUMNS = {
    "quantity": "quantity", "dtype": "dtype", "value": "value", "unit": "unit",
    "source": "source", "inputs": "computed from", "status": "status"}
FIGURE = "traffic"  # the model's quantities are drawn in the traffic model's figure


def figure_of(check) -> str:
    return FIGURE


def tables(page: sections.Page) -> list[dict]:
    """Each key's rows, collapsed (the claims matrix gives the values its claims judge)."""
    return [sections.raw([raw_block(k.key, "model", k.frame("model"), COLUMNS)
                          for k in page.present("model")])]
