"""The report's per-stage hook: what each stage shows on report/index.html, beside the
stage, so that adding a stage touches the report nowhere else.

A stage ``name`` with report content has a view, ``inferlab/presentation/views/<name>.py``
(``pipeline.Stage.view``), exposing

* ``SECTION``: ``{"id", "title", "caption"}`` (the caption is markup written here, never
  an artifact's text; ``"missing": False`` when the view says per key itself that a key
  has nothing to show);
* ``tables(page) -> list[dict]``, and optionally ``figures(page) -> list[dict]`` (none
  by default; ``figure``: an anchor, a heading, one SVG per key, a caption); the tables
  are the blocks below: tables, raw rows, per-key columns;
* optionally ``figure_of(check) -> str | None`` (by default its section's id): the
  anchor on the page that shows a claim's evidence, for the claims of its stage.

``page`` (``Page``) holds every results key's evidence (``KeyData``), the claims, the fp16
stand-in per device and the repository root. A stage without a view module has nothing of
its own on the page (claims: its verdicts are the page's spine, laid out by the report
itself). ``report`` loops over ``pipeline.STAGES``, loads each view (``load``) and hands its
section to one generic loop of the template (the views that draw figures first, then the
claims matrix, then the others), which renders the blocks made here.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from markupsafe import Markup

from inferlab.core import layout
from inferlab.core.pipeline import CLAIMS_STAGE, STAGES
from inferlab.evidence.artifacts import Table
from inferlab.evidence.loading import Evidence, load_evidence
from inferlab.judging.claims import Claim
from inferlab.presentation.audit import integrity

NOT_MEASURED = "not measured here"
NOISY_NOTE = ("A hollow marker is a timing flagged noisy: its rounds' medians disagreed by more "
              "than the noise threshold, so read it as a range, not a value.")


@dataclass
class KeyData:
    """One results key: its artifacts (claims.json included) and what the page says."""

    key: str
    grid: str | None
    evidence: dict[str, Evidence]
    integrity: dict[str, dict]

    @property
    def device(self) -> str:
        """'cuda' or 'cpu': the device it recorded, else its key's prefix."""
        return "cuda" if str(self.environment.get("device") or self.key).startswith("cuda") \
            else "cpu"

    @property
    def environment(self) -> dict:
        """The environment a stage recorded in its artifact (the probe's), else in a
        sidecar."""
        recorded = next((e.data["environment"] for e in self.evidence.values()
                         if isinstance(e.data, dict) and e.data.get("environment")), None)
        return recorded or next((e.provenance.get("environment") for e in
                                 self.evidence.values() if e.provenance.get("environment")), {})

    def runs(self) -> dict[str, int]:
        """{timed stage: how many runs its series pools} (the most any point pools)."""
        series = self.frame("series")
        if series is None:
            return {}
        pooled = series.frame[series.frame["kind"] == "pooled"]
        return {stage: int(rows["runs"].max()) for stage, rows in pooled.groupby("stage")
                if rows["runs"].notna().any()}

    @property
    def results(self) -> list[dict]:
        return (self.evidence[CLAIMS_STAGE].data or {}).get("claims", [])

    def result(self, claim_id: str) -> dict | None:
        return next((r for r in self.results if r["id"] == claim_id), None)

    def frame(self, stage: str) -> Table | None:
        found = self.evidence[stage]
        return found.table if found.data is not None and len(found.table) else None

    @property
    def no_verdict(self) -> str:
        return "no verdict: " + ("see this machine's summary" if self.evidence[CLAIMS_STAGE]
                                 .data is None else "claims.json does not list this claim")

    def missing(self, stage: str) -> str:
        """Why a stage has nothing to show: not run, or unreadable (with the error)."""
        found = self.evidence[stage]
        if found.error:
            return f"{STAGES[stage].artifact} cannot be read: {found.error}"
        return (f"{NOT_MEASURED} ({STAGES[stage].artifact} is missing: the {stage} stage "
                "did not run)")


def load_key(root: Path, key: str) -> KeyData:
    evidence = {stage: load_evidence(root, key, stage) for stage in STAGES}
    return KeyData(key, layout.split_key(key)[1], evidence,
                   {s: integrity(root, key, e) for s, e in evidence.items()})


@dataclass
class Page:
    """What a view is handed: the repository, every key's evidence, the claims."""

    root: Path
    keys: list[KeyData]
    claims: list[Claim] = field(default_factory=list)
    stand_in: dict[str, str] = field(default_factory=dict)  # device -> the chapter's fp16 there

    def present(self, stage: str) -> list[KeyData]:
        """The keys with rows of ``stage``."""
        return [k for k in self.keys if k.frame(stage) is not None]

    def frames(self, stage: str) -> dict:
        """{key: its rows of ``stage`` (a DataFrame)} for the keys that have some."""
        return {k.key: k.frame(stage).frame for k in self.present(stage)}

    def missing(self, stage: str) -> list[tuple[str, str]]:
        return [(k.key, k.missing(stage)) for k in self.keys if k.frame(stage) is None]


def figure_of(view: ModuleType, check) -> str | None:
    """The anchor of a claim's evidence: the view's ``figure_of``, else its section."""
    return view.figure_of(check) if hasattr(view, "figure_of") else view.SECTION["id"]


def figures(view: ModuleType, page: Page) -> list[dict]:
    """The view's figures (``figures(page)``), none where it defines none."""
    return view.figures(page) if hasattr(view, "figures") else []


def load(stage: str) -> ModuleType | None:
    """The view of ``stage``, or None where it has none."""
    name = STAGES[stage].view
    return importlib.import_module(name) if importlib.util.find_spec(name) else None


# ---------------------------------------------------------------- blocks for the template


def figure(svgs: list[str], caption: str, anchor: str | None = None,
           title: str | None = None) -> dict:
    """A figure: one SVG per key (None: nothing drawn, left out), under an anchor."""
    return {"id": anchor, "title": title, "svgs": [Markup(s) for s in svgs if s],
            "caption": caption}


def table(t: dict, cls: str = "") -> dict:
    return {"kind": "table", "table": t, "cls": cls}


def text(html: str, cls: str = "") -> dict:
    """A paragraph: a plain string is escaped, a ``Markup`` (written here) is not."""
    return {"kind": "text", "html": html, "cls": cls}


def raw(blocks: list[dict]) -> dict:
    """Raw rows (``report_tables.raw_block``), each in a collapsed <details>."""
    return {"kind": "raw", "blocks": blocks}


def bullets(entries: list[str], cls: str = "notes") -> dict:
    return {"kind": "list", "entries": entries, "cls": cls}


def heading(words: str) -> dict:
    return {"kind": "heading", "text": words}


def details(cls: str, summary: str, blocks: list[dict]) -> dict:
    return {"kind": "details", "cls": cls, "summary": summary, "blocks": blocks}


def div(blocks: list[dict], cls: str = "", anchor: str | None = None,
        title: str | None = None) -> dict:
    return {"kind": "div", "cls": cls, "id": anchor, "title": title, "blocks": blocks}


def per_key(columns: list[tuple[str, list[dict]]]) -> dict:
    """One column per key, side by side: [(key, its blocks)]."""
    return div([div(blocks, "key", title=key) for key, blocks in columns], "keys")
