"""The report's per-stage hook, and the blocks a stage's section is made of.

A stage with something to show has a view, ``inferlab/presentation/views/<stage>.py``
(``pipeline.Stage.view``), so that adding a stage touches the report nowhere else. It exposes

* ``SECTION``: ``{"id", "title", "caption"}`` (the caption is markup written here, never an
  artifact's text; ``"missing": False`` where the view itself says a key has nothing);
* ``tables(page) -> list[dict]``: the blocks below; optionally ``figures(page)`` (``figure``
  blocks) and ``FIGURE``, the anchor that shows its claims' evidence (default: the section).

``report`` loads each view (``load``) and renders the views that draw figures, the claims
matrix, then the others, through one generic loop of the template.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pandas as pd
from markupsafe import Markup

from inferlab.core import layout
from inferlab.core.pipeline import CLAIMS_STAGE, STAGES
from inferlab.evidence.artifacts import Table
from inferlab.evidence.register import Evidence, load_evidence
from inferlab.judging.claims import Claim
from inferlab.presentation.audit import integrity
from inferlab.presentation.formats import NOT_MEASURED, table_cell

NOISY_NOTE = ("A hollow marker is a timing flagged noisy: its rounds' medians disagreed by more "
              "than the noise threshold, so read it as a range, not a value.")


@dataclass
class KeyData:
    """One results key: its artifacts (claims.json included) and their integrity now."""

    key: str
    grid: str | None
    evidence: dict[str, Evidence]
    integrity: dict[str, dict]

    @property
    def environment(self) -> dict:
        """The environment recorded in an artifact (the probe's), else in a sidecar."""
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

    def raw(self, stage: str, columns: dict[str, str]) -> dict:
        """Every key's rows of ``stage``, each key's in a collapsed <details>."""
        return raw([raw_block(k.key, stage, k.frame(stage), columns)
                    for k in self.present(stage)])


def load(stage: str) -> ModuleType | None:
    """The view of ``stage``, or None where it has none."""
    name = STAGES[stage].view
    return importlib.import_module(name) if importlib.util.find_spec(name) else None


# ---------------------------------------------------------------- raw rows


def _cell_kind(column: str, dtype) -> str:
    """How a column's cells read (``formats.table_cell``), from its name and type."""
    if column == "causal":
        return "mask"
    if column.endswith("_bytes"):
        return "mib"
    if column.startswith("frac_"):
        return "pct"
    return {"boolean": "yes", "Int64": "int", "float64": "num"}.get(str(dtype), "text")


def raw_table(table: Table, columns: dict[str, str], rows: pd.Series | None = None) -> dict:
    """Rows of ``table`` as cells under ``columns`` (column -> header with its unit; those
    it lacks left out), noisy rows marked; a computed NaN reads "nan", never "—"."""
    frame = table.frame if rows is None else table.frame[rows]
    spec = [(c, _cell_kind(c, frame[c].dtype)) for c in columns if c in frame.columns]
    nonfinite = table.nonfinite.loc[frame.index]
    body = []
    for i, record in zip(frame.index, frame.to_dict("records"), strict=True):
        cells = [table_cell(record[c], kind, c in nonfinite.columns and bool(nonfinite.at[i, c]))
                 for c, kind in spec]
        body.append({"cells": cells, "noisy": record.get("noisy") is True})
    return {"columns": [columns[c] for c, _ in spec], "rows": body}


def raw_block(key: str, stage: str, table: Table, columns: dict[str, str]) -> dict:
    """A key's rows of ``stage``; rows that only say "unavailable" collapsed to one line
    per implementation and reason."""
    frame, keep, notes = table.frame, None, []
    if {"impl", "status"} <= set(frame.columns):
        unavailable = frame["status"].fillna("") == "unavailable"
        why = frame["reason"].fillna("") if "reason" in frame else pd.Series("", frame.index)
        notes = [f"{impl}: not run in {len(group)} rows: {reason or 'no reason given'}"
                 for (impl, reason), group in frame[unavailable].assign(_why=why)
                 .groupby(["impl", "_why"])]
        keep = ~unavailable
    return {"key": key, "artifact": STAGES[stage].artifact, "count": len(table),
            "table": raw_table(table, columns, keep), "notes": notes}


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
    """Raw rows (``raw_block``), each in a collapsed <details>."""
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
