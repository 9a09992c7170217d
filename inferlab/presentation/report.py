"""report/index.html: every results key's evidence side by side, in one page a reader can
decide from (its order: ``SECTIONS``). This module names no stage: a stage's content is its
view's (``sections``). The markup is ``templates/report.html.j2`` (autoescaped: only
matplotlib's SVG goes in as markup); an unreadable or changed artifact is said on the page.
"""

from __future__ import annotations

import json
import traceback
from collections import Counter
from pathlib import Path

import jinja2
from markupsafe import Markup

from inferlab.core import layout
from inferlab.core.pipeline import CLAIMS_STAGE, STAGES
from inferlab.evidence.loading import code_changed
from inferlab.evidence.register import Register
from inferlab.judging.claims import Claim, load
from inferlab.judging.rule import ANSWERED, INSIDE, OUTSIDE, STRADDLES
from inferlab.judging.verdicts import VERDICTS
from inferlab.presentation import sections
from inferlab.presentation.claim_text import judged_on_brief, judged_on_text, reason_text
from inferlab.presentation.formats import plain_text, table_cell, value_text
from inferlab.presentation.sections import KeyData, Page, load_key

TEMPLATE = "report.html.j2"
VIEWS = {name: sections.load(name) for name in STAGES}  # None: the stage has no view
# The page's order: what was found, the views that draw figures, the claims matrix, the
# views of tables only, the provenance (a reader sees the evidence before the ledger)
DRAWN = [stage for stage, v in VIEWS.items() if v and hasattr(v, "figures")]
TABLED = [stage for stage, v in VIEWS.items() if v and not hasattr(v, "figures")]
SECTIONS = (("summary", "Summary"),
            *((VIEWS[s].SECTION["id"], VIEWS[s].SECTION["title"]) for s in DRAWN),
            (CLAIMS_STAGE, "Claims"),
            *((VIEWS[s].SECTION["id"], VIEWS[s].SECTION["title"]) for s in TABLED),
            ("provenance", "Provenance"))
JUDGED = (INSIDE, STRADDLES, OUTSIDE)  # the verdicts of a claim judged here
# A value with no unit of its own, in words: the column a check reads (a statistic of it
# said as such), or what the stage's view says (a model.csv quantity: views/model.py).
COLUMN_WORDS = {
    "computed_pairs": "block pairs computed", "pair_fraction": "of the block pairs computed",
    "max_abs_err": "largest error vs float64", "nonfinite_fraction": "of outputs not finite",
    "frac_copy_ceiling": "of the copy ceiling", "frac_matmul_ceiling": "of the matmul ceiling",
    "median_ms": "time", "ratio": "time ratio", "peak_extra_bytes": "peak extra memory",
    "model_ratio": "modelled byte ratio", "measured_ratio": "measured time ratio",
    "median_ms_spread": "largest difference between two runs' times (max ÷ min − 1)",
    "implied_block_q_limit": "query tile B_q implied", "can_run": "can run",
    "fused_can_run": "a fused kernel can run", "ran": "ran", "limit_kind": "limit",
    "T": "tokens", "cache_len": "cache length"}

# ---------------------------------------------------------------- data


def _stamp(iso: str) -> str:
    return iso[:16].replace("T", " ") + " UTC"


def _when(measured: list[str], dates: list[str]) -> str:
    if not dates:
        return "no date"
    if not measured or _stamp(measured[-1]) == _stamp(dates[-1]):
        return _stamp(dates[-1])
    return f"measured {_stamp(measured[-1])} (derived {_stamp(dates[-1])})"


def summary_card(data: KeyData) -> dict:
    """The first screen for one key: verdict counts, hardware, torch, date, commit, and the
    stages this checkout's code would not compute so (``older_code``: evidence merged from
    another machine, which only it can remake)."""
    env = data.environment
    host, cuda = env.get("host") or {}, env.get("cuda") or {}
    device = cuda.get("device_name") or host.get("cpu_model") or "unknown hardware"
    n = host.get("torch_threads")
    threads = f", {n} thread{'' if n == 1 else 's'}" if n else ""
    provs = [e.provenance for e in data.evidence.values() if e.provenance]
    commits = sorted({((p.get("git_commit") or "")[:10] or "not recorded")
                      + (" (dirty)" if p.get("git_dirty") else "") for p in provs})
    dates = sorted(p["created_at"] for p in provs if p.get("created_at"))
    # when it was measured (the timed stages), apart from when it was last derived
    measured = sorted(e.provenance["created_at"] for s, e in data.evidence.items()
                      if STAGES[s].timed and e.provenance and e.provenance.get("created_at"))
    counts = Counter(c["verdict"] for c in data.results)
    check = data.integrity[CLAIMS_STAGE]
    problem = data.missing(CLAIMS_STAGE) if data.evidence[CLAIMS_STAGE].data is None else (
        f"claims.json MISMATCH: {check['detail']}" if check["status"] == "MISMATCH" else None)
    return {"key": data.key,
            "grid": "book grid (config.yaml)" if data.grid is None else f"grid “{data.grid}”",
            "hardware": f"{env.get('device') or '?'}: {device}{threads}",
            "torch": (env.get("build") or {}).get("torch") or "?",
            "date": _when(measured, dates),
            "commit": ", ".join(commits) or "not recorded", "problem": problem,
            "mismatch": check["status"] == "MISMATCH",
            "changed": [STAGES[s].artifact for s, c in data.integrity.items()
                        if s != CLAIMS_STAGE and c["status"] == "MISMATCH"],
            "counts": [{"verdict": v, "count": counts[v]}
                       for v in dict.fromkeys((*JUDGED, *VERDICTS))],
            "runs": runs_text(data.runs()), "findings": findings(data.results),
            "older_code": [s for s, e in data.evidence.items() if e.provenance and code_changed(
                layout.REPO_ROOT, s, e.provenance.get("code_files") or {})]}


def runs_text(runs: dict[str, int]) -> str:
    """'9 runs' (every timed stage alike), 'prefill 9 runs, decode 6 runs', or 'no series'."""
    if not runs:
        return "no series of runs"
    counts = set(runs.values())
    if len(counts) == 1:
        n = counts.pop()
        return f"{n} run{'' if n == 1 else 's'} in its series"
    return ", ".join(f"{stage} {n} run{'' if n == 1 else 's'}" for stage, n in runs.items())


def findings(results: list[dict]) -> dict:
    """Of the claims judged here, how many hold; the ids of those that do not and of those
    its noise cannot decide."""
    ids = {v: [r["id"] for r in results if r["verdict"] == v] for v in (*JUDGED, ANSWERED)}
    return {"judged": sum(len(ids[v]) for v in JUDGED), "hold": len(ids[INSIDE]),
            "fail": ids[OUTSIDE], "noise": ids[STRADDLES], "answered": len(ids[ANSWERED])}


def figure_of(claim: Claim) -> str | None:
    """The id of the report figure that shows a claim's evidence (None: no check)."""
    view = VIEWS[claim.check.stage] if claim.check is not None else None
    return getattr(view, "FIGURE", view.SECTION["id"]) if view else None


def quantity_words(claim: Claim, result: dict) -> str:
    """What a value without a unit is, in words: 'of the copy ceiling', '(log-log slope of
    time against tokens)'; '' where the claim has no check."""
    check = claim.check
    if check is None:
        return ""
    m = check.measure
    view = VIEWS.get(check.stage)
    if view is not None and hasattr(view, "quantity_words"):  # a row names its quantity
        return view.quantity_words(result)
    words = COLUMN_WORDS.get(m.column, m.column.replace("_", " "))
    if m.stat == "loglog_slope":
        return f"(log-log slope of {words} against {COLUMN_WORDS.get(m.x, m.x)})"
    if m.stat == "spread":
        return f"(spread of the {words}: largest ÷ smallest − 1)"
    return words


def value_words(claim: Claim, result: dict) -> str:
    """``value_text``, and where the value has no unit, what it is in words."""
    text = value_text(result)
    if text == "—" or result.get("unit"):
        return text
    words = quantity_words(claim, result)
    values = result["value"] if isinstance(result["value"], list) else [result["value"]]
    if words and any(isinstance(v, str | bool) for v in values):
        return f"{words}: {text}"  # 'can run: False, False', not 'False, False can run'
    return f"{text} {words}".rstrip()


def claim_rows(claims: list[Claim], keys: list[KeyData]) -> list[dict]:
    """The claims matrix: a row per sentence of the chapter, its claims in order; per key,
    each claim's verdict, value in words, what it was judged on and its links."""
    sentences: dict[str, list[Claim]] = {}
    for claim in claims:
        sentences.setdefault(claim.sentence, []).append(claim)
    rows = []
    for sentence, group in sentences.items():
        cells = [{"key": k.key, "items": [_item(claim, k) for claim in group]} for k in keys]
        rows.append({"sentence": plain_text(sentence), "cells": cells,
                     "claims": [{"id": c.id, "kind": c.kind,
                                 "chapter_value": plain_text(c.chapter_value)} for c in group]})
    return rows


def _item(claim: Claim, k: KeyData) -> dict:
    r = k.result(claim.id)
    if r is None:
        return {"id": claim.id, "missing": k.no_verdict}
    return {"id": claim.id, "missing": None, "verdict": r["verdict"],
            "value_text": value_words(claim, r),
            "judged_on": judged_on_brief(r["judged_on"]) or reason_text(r, claim, k.key),
            "figure": figure_of(claim), "prov": f"prov-{claim.id}-{k.key}"}


# ---------------------------------------------------------------- provenance


def provenance_blocks(claims: list[Claim], keys: list[KeyData], root: Path) -> list[dict]:
    """One block per claim and key: verdict, why, the artifact version and its hash
    (checked now), commit, config and the command that reproduces it."""
    entries = {}
    for k in keys:
        try:
            entries[k.key] = {(e.get("stage"), e.get("version")): e
                              for e in Register(root, k.key).history()}
        except ValueError:  # an unreadable register: the blocks say what they can
            entries[k.key] = {}
    return [_block(k.result(c.id), c, k, entries[k.key])
            for c in claims for k in keys if k.result(c.id) is not None]


def _block(result: dict, claim: Claim, k: KeyData, entries: dict) -> dict:
    """A claim's provenance on one key; the chapter's hardware is said once, above."""
    artifact = result.get("artifact") or {}
    stage = artifact.get("stage")
    prov = (entries.get((stage, artifact.get("version"))) or {}).get("provenance") or {}
    items = [("value here", value_text(result), ""),
             ("chapter value", plain_text(claim.chapter_value), ""),
             ("why", reason_text(result, claim, k.key), ""),
             ("our reading", claim.reading.why if claim.reading else claim.note or "", ""),
             ("judged on", judged_on_text(result.get("judged_on")), "")]
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


def section(stage: str, view, page: Page) -> dict:
    """Stage ``stage``'s section, from its view, for the template's generic loop."""
    return {**view.SECTION, "title": Markup(view.SECTION["title"]), "missing": page.missing(stage)
            if view.SECTION.get("missing", True) else [],
            "figures": view.figures(page) if hasattr(view, "figures") else [],
            "tables": view.tables(page)}


def page_data(root: Path, keys: list[KeyData]) -> dict:
    claims_file = load()
    claims = list(claims_file.claims)
    page = Page(root, keys, claims, claims_file.fp16_stand_in)
    judged = {r["id"] for k in keys for r in k.results if r["verdict"] in JUDGED}
    views = {stage: section(stage, v, page) for stage, v in VIEWS.items() if v}
    return {"cards": [summary_card(k) for k in keys], "matrix": claim_rows(claims, keys),
            "hardware": claims_file.hardware, "claim_count": len(claims),
            "judged_nowhere": len(claims) - len(judged),
            "sections": SECTIONS,
            "drawn": [views[s] for s in DRAWN], "tabled": [views[s] for s in TABLED],
            "provenance": provenance_blocks(claims, keys, root),
            "artifacts": [(k.key, artifact_rows(k)) for k in keys]}


def render_report(root: Path | str, out: Path | str, keys: list[str] | None = None) -> Path:
    """Write the report of ``keys`` (default: every results key under ``root``) to ``out``."""
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
