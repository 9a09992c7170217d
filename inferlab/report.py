"""report/index.html: every results key's evidence side by side, in one page a reader can
decide from.

It opens with what was found (per key: verdict counts, hardware, torch build, date,
commit, and what a verdict compares). The claims matrix is its spine: per claim the
sentence (LaTeX as plain Unicode), the chapter's value and, per key, the verdict, the
value with its unit, what it was judged on, and links to its figure and its provenance.
Then the figures' sections with their raw rows one click away, and one collapsed
provenance block per claim and key, its hashes re-checked when the page is written.

The data is prepared here; the markup is ``templates/report.html.j2`` (Jinja2, autoescaped:
an artifact's string is data, never markup; only matplotlib's SVG goes in as markup). The
page is self-contained (inline style and SVG, no script). An unreadable artifact, or one
whose hash no longer matches its register entry, is said on the page, never a crash.
"""

from __future__ import annotations

import json
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup

from inferlab import figures, layout, roofline
from inferlab.artifacts import Table
from inferlab.audit import integrity
from inferlab.claims import Claim, load
from inferlab.evidence import Evidence, load_evidence
from inferlab.formats import plain_text, table_cell, with_unit
from inferlab.manuscript import report_view
from inferlab.pipeline import STAGES
from inferlab.register import Register
from inferlab.report_tables import (
    CORRECTNESS_COLUMNS,
    DECODE_COLUMNS,
    MODEL_COLUMNS,
    PREFILL_COLUMNS,
    PROBE_COLUMNS,
    TRAFFIC_COLUMNS,
    backend_map_table,
    backends_table,
    between_runs,
    exactness_table,
    previous_verdicts,
    raw_block,
    raw_table,
)

TEMPLATE = "report.html.j2"
SECTIONS = (("summary", "Summary"), ("claims", "Claims"), ("backends", "What ran where"),
            ("exactness", "Exactness"), ("prefill", "Prefill"), ("decode", "Decode"),
            ("traffic", "Traffic model"), ("model", "The chapter's arithmetic"),
            ("manuscript", "For the manuscript"), ("provenance", "Provenance"))
VERDICTS = ("reproduced", "within noise here", "not reproduced", "answered here",
            "not measurable here", "not comparable on this device", "not checkable")
# the report figure that shows a stage's evidence (prefill memory claims: its memory figure)
FIGURES = {"probe": "backends", "correctness": "exactness", "prefill": "prefill-speedup",
           "decode": "decode", "traffic": "traffic", "model": "traffic"}
NOT_MEASURED = "not measured here"

# ---------------------------------------------------------------- data


@dataclass
class KeyData:
    """One results key: its artifacts (claims.json included) and what the page says."""

    key: str
    grid: str | None
    evidence: dict[str, Evidence]
    integrity: dict[str, dict]
    previous: tuple[int | None, dict[str, str]] = (None, {})  # the run before, made alike

    def was(self, claim_id: str, verdict: str) -> str | None:
        """The verdict of the previous run made the same way, when it was another one."""
        version, verdicts = self.previous
        before = verdicts.get(claim_id)
        return f"was {before} (version {version})" if before not in (None, verdict) else None

    @property
    def results(self) -> list[dict]:
        return (self.evidence["claims"].data or {}).get("claims", [])

    def result(self, claim_id: str) -> dict | None:
        return next((r for r in self.results if r["id"] == claim_id), None)

    def frame(self, stage: str) -> Table | None:
        found = self.evidence[stage]
        return found.table if found.data is not None and len(found.table) else None

    @property
    def no_verdict(self) -> str:
        return "no verdict: " + ("see this machine's summary" if self.evidence["claims"].data
                                 is None else "claims.json does not list this claim")

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
                   {s: integrity(root, key, e) for s, e in evidence.items()},
                   previous_verdicts(root, key))


def _environment(data: KeyData) -> dict:
    probe = data.evidence["probe"].data
    if isinstance(probe, dict) and probe.get("environment"):
        return probe["environment"]
    return next((e.provenance.get("environment") for e in data.evidence.values()
                 if e.provenance.get("environment")), {})


def summary_card(data: KeyData) -> dict:
    """The first screen for one key: verdict counts, hardware, torch, date, commit."""
    env = _environment(data)
    host, cuda = env.get("host") or {}, env.get("cuda") or {}
    device = cuda.get("device_name") or host.get("cpu_model") or "unknown hardware"
    n = host.get("torch_threads")
    threads = f", {n} thread{'' if n == 1 else 's'}" if n else ""
    provs = [e.provenance for e in data.evidence.values() if e.provenance]
    commits = sorted({((p.get("git_commit") or "")[:10] or "not recorded")
                      + (" (dirty)" if p.get("git_dirty") else "") for p in provs})
    dates = sorted(p["created_at"] for p in provs if p.get("created_at"))
    counts = Counter(c["verdict"] for c in data.results)
    shown = [*VERDICTS, *(v for v in counts if v not in VERDICTS)]
    check = data.integrity["claims"]
    problem = data.missing("claims") if data.evidence["claims"].data is None else (
        f"claims.json MISMATCH: {check['detail']}" if check["status"] == "MISMATCH" else None)
    return {"key": data.key,
            "grid": "book grid (config.yaml)" if data.grid is None else f"grid “{data.grid}”",
            "hardware": f"{env.get('device') or '?'}: {device}{threads}",
            "torch": (env.get("build") or {}).get("torch") or "?",
            "date": dates[-1][:16].replace("T", " ") + " UTC" if dates else "no date",
            "commit": ", ".join(commits) or "not recorded", "problem": problem,
            "mismatch": check["status"] == "MISMATCH",
            "changed": [STAGES[s].artifact for s, c in data.integrity.items()
                        if s != "claims" and c["status"] == "MISMATCH"],
            "counts": [{"verdict": v, "count": counts[v]} for v in shown],
            "flipped": [c["id"] for c in data.results if data.was(c["id"], c["verdict"])],
            "previous_version": data.previous[0]}


def figure_of(claim: Claim) -> str | None:
    """The id of the report figure that shows a claim's evidence (None: no check)."""
    check = claim.check
    if check is None:
        return None
    if check.stage == "prefill" and check.measure.column.endswith("_bytes"):
        return "prefill-memory"
    return FIGURES[check.stage]


def value_text(result: dict) -> str:
    """A claims.json value for people, with its unit and, where it has one, its 95 %
    interval: '1.89–2.57× (95 %: 1.85–2.61)'; '—' when there is none."""
    value, ci = result["value"], result.get("interval")
    text = with_unit(value, result["unit"])
    items = value if isinstance(value, list) else [value]
    nums = [v[-1] if isinstance(v, list) else v for v in items]
    nums = [v for v in nums if isinstance(v, int | float) and not isinstance(v, bool)]
    if not ci or not nums or ci == [min(nums), max(nums)]:
        return text  # no interval, or no noise: the value says it all
    return f"{text} (95 %: {with_unit(ci, result['unit'])})"


def claim_rows(claims: list[Claim], keys: list[KeyData]) -> list[dict]:
    """The claims matrix: a row per claim; the sentence spans the claims that share it."""
    rows = []
    for i, claim in enumerate(claims):
        span = 0
        if i == 0 or claims[i - 1].sentence != claim.sentence:
            span = next((j for j in range(i + 1, len(claims))
                         if claims[j].sentence != claim.sentence), len(claims)) - i
        cells = []
        for k in keys:
            r = k.result(claim.id)
            cells.append({"key": k.key, "missing": k.no_verdict} if r is None else {
                "key": k.key, "missing": None, "verdict": r["verdict"],
                "value_text": value_text(r), "judged_on": r["judged_on"] or r["reason"],
                "figure": figure_of(claim), "prov": f"prov-{claim.id}-{k.key}",
                "was": k.was(claim.id, r["verdict"])})
        rows.append({"id": claim.id, "kind": claim.kind, "span": span,
                     "sentence": plain_text(claim.sentence),
                     "chapter_value": plain_text(claim.chapter_value), "cells": cells})
    return rows


# ---------------------------------------------------------------- provenance


def provenance_blocks(claims: list[Claim], keys: list[KeyData], root: Path,
                      hardware: str) -> list[dict]:
    """One block per claim and key: verdict, why, the artifact version and its hash
    (checked now), commit, config and the command that reproduces it."""
    entries = {}
    for k in keys:
        try:
            entries[k.key] = {(e.get("stage"), e.get("version")): e
                              for e in Register(root, k.key).history()}
        except ValueError:  # an unreadable register: the blocks say what they can
            entries[k.key] = {}
    return [_block(k.result(c.id), k, entries[k.key])
            for c in claims for k in keys if k.result(c.id) is not None]


def _block(result: dict, k: KeyData, entries: dict) -> dict:
    """A claim's provenance on one key; the chapter's hardware is said once, above."""
    artifact = result.get("artifact") or {}
    stage = artifact.get("stage")
    prov = (entries.get((stage, artifact.get("version"))) or {}).get("provenance") or {}
    items = [("value here", value_text(result), ""),
             ("chapter value", plain_text(result["chapter_value"]), ""),
             ("why", result["reason"], ""),
             ("our reading", result.get("note") or "", ""),
             ("judged on", result.get("judged_on") or "", "")]
    if stage:
        check = k.integrity[stage]
        latest = (k.evidence[stage].entry or {}).get("version")
        version = f"{artifact.get('version')}" + (
            f" (the register is now at version {latest})"
            if latest not in (None, artifact.get("version")) else "")
        config = prov.get("config") or {}
        items += [("artifact", artifact.get("path"), "code"), ("version", version, ""),
                  ("sha256", artifact.get("sha256") or "not in the register", "code"),
                  ("integrity now", f"{check['status']}: {check['detail']}",
                   "ok" if check["status"] == "sha256 OK" else "bad"),
                  ("created", prov.get("created_at"), ""),
                  ("commit", (prov.get("git_commit") or "not recorded")
                             + (" (dirty)" if prov.get("git_dirty") else ""), "code"),
                  ("config", json.dumps(config.get(stage, config), sort_keys=True), "code"),
                  ("command", prov.get("command") or "not recorded", "code")]
    return {"claim": result["id"], "key": k.key, "anchor": f"prov-{result['id']}-{k.key}",
            "verdict": result["verdict"], "items": [item for item in items if item[1]]}


def artifact_rows(k: KeyData) -> dict:
    rows = []
    for stage, found in k.evidence.items():
        entry, prov = found.entry or {}, found.provenance
        rows.append({"cells": [stage, table_cell(entry.get("version"), "int"),
                               entry.get("sha256") or "—", k.integrity[stage]["status"],
                               prov.get("created_at") or "—",
                               (prov.get("git_commit") or "—")[:10], prov.get("command") or "—"],
                     "noisy": False})
    return {"columns": ["stage", "version", "sha256", "integrity now", "created", "commit",
                        "command"], "rows": rows}


# ---------------------------------------------------------------- page


def page_data(root: Path, keys: list[KeyData]) -> dict:
    claims_file = load()
    claims = list(claims_file.claims)
    bands = figures.speedup_bands(claims)

    def present(stage):
        return [k for k in keys if k.frame(stage) is not None]

    def missing(stage):
        return [(k.key, k.missing(stage)) for k in keys if k.frame(stage) is None]

    stages = {s: {"missing": missing(s)} for s in STAGES if s != "claims"}
    stages["probe"]["tables"] = [
        (k.key, backends_table(k.evidence["probe"].data, k.frame("probe")),
         raw_block(k.key, "probe", k.frame("probe"), PROBE_COLUMNS),
         backend_map_table(k.evidence["probe"].data)) for k in present("probe")]
    stages["correctness"]["tables"] = [
        (k.key, exactness_table(k.frame("correctness")),
         raw_block(k.key, "correctness", k.frame("correctness"), CORRECTNESS_COLUMNS))
        for k in present("correctness")]
    stages["model"]["raw"] = [(k.key, raw_table(k.frame("model"), MODEL_COLUMNS))
                              for k in present("model")]
    for stage, spec in (("prefill", PREFILL_COLUMNS), ("decode", DECODE_COLUMNS),
                        ("traffic", TRAFFIC_COLUMNS)):
        stages[stage]["raw"] = [raw_block(k.key, stage, k.frame(stage), spec)
                                for k in present(stage)]
        if STAGES[stage].timed:
            stages[stage]["between"] = [between_runs(root, k.key, stage)
                                        for k in present(stage)]
    frames = {s: {k.key: k.frame(s).frame for k in present(s)}
              for s in ("prefill", "decode", "traffic")}
    ceilings = {k.key: (k.evidence["probe"].data or {}).get("ceilings") or {} for k in keys}
    copy = {key: c.get("copy_gbs") for key, c in ceilings.items()}
    results = {k.key: k.results for k in keys}
    figs = {name: [Markup(svg) for svg in drawn]
            for name, drawn in figures.report_figures(frames, copy, bands, results).items()}
    figs["roofline"] = [Markup(svg) for svg in roofline.roofline_figures(frames, ceilings)]
    return {"sections": SECTIONS, "cards": [summary_card(k) for k in keys],
            "keys": [k.key for k in keys], "matrix": claim_rows(claims, keys),
            "hardware": claims_file.hardware, "stages": stages, "figures": figs,
            "bands": bands, "provenance": provenance_blocks(claims, keys, root,
                                                            claims_file.hardware),
            "artifacts": [(k.key, artifact_rows(k)) for k in keys],
            "manuscript": [report_view(root, k.key, k.evidence["manuscript"]) for k in keys]}


def render_report(root: Path | str, out: Path | str, keys: list[str] | None = None) -> Path:
    """Write the report to ``out`` for ``keys`` (default: every results key under
    ``root``); return its path."""
    root, path = Path(root), Path(out)
    names = layout.keys(root) if keys is None else list(keys)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(layout.TEMPLATE_DIR),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    text = env.get_template(TEMPLATE).render(
        page_data(root, [load_key(root, k) for k in names]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def from_snakemake(smk) -> Path:
    """Entry point of scripts/report.py: the report of exactly the keys the rule names."""
    log = Path(smk.log[0])
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        try:
            path = render_report(Path.cwd(), Path(smk.output.html), list(smk.params.results_keys))
        except BaseException:
            f.write(traceback.format_exc())
            raise
        f.write(f"[report] wrote {path} for {', '.join(smk.params.results_keys)}\n")
    return path
