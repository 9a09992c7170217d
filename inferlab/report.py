"""report/index.html: every machine's evidence side by side, in one static page.

The page is self-contained (figures are inline SVG from matplotlib, the style sheet is
inline, there is no script) so it reads from a file with no server. Every string that
comes from an artifact is HTML-escaped: a backend's refusal reason or a kernel name is
data, never markup. Sections: what ran where (probe), exactness (correctness), prefill,
decode, traffic, the claims matrix with a provenance block per claim and machine, and a
provenance footer per machine. A stage a machine did not run says "not measured here".
"""

from __future__ import annotations

import html
import math
import traceback
from pathlib import Path
from typing import Any

import pandas as pd

from inferlab import layout
from inferlab.audit import integrity, load_evidence, recorded_results
from inferlab.claims import Claim, load
from inferlab.figures import decode_figure, prefill_figure, traffic_figure
from inferlab.formats import format_value
from inferlab.pipeline import STAGES
from inferlab.register import Register
from inferlab.verdicts import Evidence

SECTIONS = (("ran", "What ran where"), ("exactness", "Exactness"), ("prefill", "Prefill"),
            ("decode", "Decode"), ("traffic", "Traffic model"), ("claims", "Claims"),
            ("provenance", "Provenance"))
NOT_MEASURED = "not measured here"
STYLE = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;
color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.noisy{background:#fff4d6}.nm{color:#777;font-style:italic}
.prov{border-left:3px solid #ccc;padding-left:.8em;margin:1em 0;font-size:.85em}
code{font-size:.9em;word-break:break-all}figure{margin:0}svg{max-width:100%;height:auto}
"""


# ---------------------------------------------------------------- html helpers


def esc(value: Any) -> str:
    """A cell's text, escaped: numbers to 3 significant figures, missing as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return html.escape(f"{value:.3g}")
    return html.escape(str(value))


def table(columns: list[str], rows: list[list[Any]], row_classes: list[str] | None = None,
          raw_columns: frozenset[int] = frozenset()) -> str:
    """An HTML table; every cell escaped except the columns in ``raw_columns``, which
    the caller has built from escaped parts (links)."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for i, row in enumerate(rows):
        cls = (row_classes or [""] * len(rows))[i]
        cells = "".join(f"<td>{v if j in raw_columns else esc(v)}</td>"
                        for j, v in enumerate(row))
        body.append(f"<tr class=\"{esc(cls)}\">{cells}</tr>" if cls else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def not_measured(machine: str, stage: str) -> str:
    return (f"<p class=\"nm\">{esc(machine)}: {NOT_MEASURED} "
            f"({esc(STAGES[stage].artifact)} is missing: the {esc(stage)} stage did not run)</p>")


# ---------------------------------------------------------------- data


def load_machine(root: Path, key: str) -> dict[str, Evidence]:
    """stage -> artifact (typed data, register entry, provenance) for one results key."""
    return {stage: load_evidence(root, key, stage) for stage in STAGES if stage != "claims"}


def _probe_json(artifact: Evidence) -> dict:
    return artifact.data if artifact.data is not None else {}


def _rows(artifact: Evidence) -> pd.DataFrame | None:
    if artifact.data is None:
        return None
    frame = artifact.table.frame
    return frame if not frame.empty else None


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"] if "status" in frame.columns else frame


def _noisy_flags(frame: pd.DataFrame) -> list[str]:
    if "noisy" not in frame.columns:
        return [""] * len(frame)
    return ["noisy" if bool(v) else "" for v in frame["noisy"].fillna(False)]


# ---------------------------------------------------------------- sections


def section_ran(data: dict[str, dict]) -> str:
    """Per machine: each SDPA backend, ran or refused, with the reason and its source."""
    parts = []
    columns = ["backend", "dtype", "causal", "T", "can run", "ran", "reason", "reason source",
               "limit kind"]
    keys = ["backend", "dtype", "causal", "T", "can_run", "ran", "reason", "reason_source",
            "limit_kind"]
    for machine, artifacts in data.items():
        probe = artifacts["probe"]
        parts.append(f"<h3>{esc(machine)}</h3>")
        if probe.data is None:
            parts.append(not_measured(machine, "probe"))
            continue
        rows = [[r.get(k) for k in keys] for r in probe.data["availability"]]
        parts.append(table(columns, rows))
        ceilings = _probe_json(probe).get("ceilings") or {}
        parts.append(f"<p>Ceilings measured here: copy {esc(ceilings.get('copy_gbs'))} GB/s; "
                     f"matmul {esc(_compact(ceilings.get('matmul_gflops')))} GFLOP/s.</p>")
    return "".join(parts)


def _compact(obj: Any) -> str:
    if isinstance(obj, dict):
        return ", ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}"
                         for k, v in obj.items())
    return "—" if obj is None else str(obj)


def section_exactness(data: dict[str, dict]) -> str:
    """Per machine: the largest error against float64 per check, implementation and dtype."""
    parts = []
    keys = ["check", "impl", "dtype", "causal", "score_scale"]
    for machine, artifacts in data.items():
        parts.append(f"<h3>{esc(machine)}</h3>")
        frame = _rows(artifacts["correctness"])
        if frame is None:
            parts.append(not_measured(machine, "correctness"))
            continue
        by = [k for k in keys if k in frame.columns]
        grouped = frame.groupby(by, dropna=False).agg(
            rows=("max_abs_err", "size"), max_abs_err=("max_abs_err", "max"),
            naive_same_dtype_err=("naive_same_dtype_err", "max"),
            status=("status", lambda s: ", ".join(sorted(set(map(str, s))))))
        rows = [list(k if isinstance(k, tuple) else (k,)) + list(v)
                for k, v in zip(grouped.index, grouped.itertuples(index=False), strict=True)]
        parts.append(table(by + ["rows", "max error vs float64", "naive error, same dtype",
                                 "status"], rows))
    return "".join(parts)


def section_prefill(data: dict[str, dict], claims_by_machine: dict[str, dict],
                    claims: list[Claim]) -> str:
    frames = {m: _rows(a["prefill"]) for m, a in data.items()}
    parts = [not_measured(m, "prefill") for m, f in frames.items() if f is None]
    measured = {m: f for m, f in frames.items() if f is not None}
    if measured:
        parts.append("<h3>Time against tokens</h3>")
        parts.append(prefill_figure(measured, "median_ms", "median time (ms)"))
        parts.append("<h3>Peak extra memory against tokens</h3>")
        parts.append(prefill_figure(measured, "peak_extra_bytes", "peak extra memory (MiB)",
                                    2.0**-20))
    parts.append("<h3>The chapter's prefill numbers beside ours</h3>")
    parts.append(claims_table([c for c in claims if c.check and c.check.stage == "prefill"],
                              claims_by_machine))
    for machine, frame in measured.items():
        parts.append(f"<h3>{esc(machine)}: rows (noisy rows shaded)</h3>")
        keys = [k for k in ("impl", "T", "dtype", "causal", "block_q", "median_ms", "iqr_ms",
                            "round_spread", "noisy", "peak_extra_bytes", "kernel", "status")
                if k in frame.columns]
        parts.append(table(keys, frame[keys].values.tolist(), _noisy_flags(frame)))
    return "".join(parts)


def section_decode(data: dict[str, dict]) -> str:
    frames = {m: _rows(a["decode"]) for m, a in data.items()}
    parts = [not_measured(m, "decode") for m, f in frames.items() if f is None]
    measured = {m: f for m, f in frames.items() if f is not None}
    ceilings = {m: (_probe_json(data[m]["probe"]).get("ceilings") or {}).get("copy_gbs")
                for m in measured}
    if measured:
        parts.append(decode_figure(measured, ceilings))
    for machine, frame in measured.items():
        parts.append(f"<h3>{esc(machine)}: rows (noisy rows shaded)</h3>")
        keys = [k for k in ("impl", "cache_len", "batch", "dtype", "splits", "median_ms",
                            "round_spread", "noisy", "achieved_gbs", "frac_copy_ceiling",
                            "floor_ms", "kernel", "status") if k in frame.columns]
        parts.append(table(keys, frame[keys].values.tolist(), _noisy_flags(frame)))
    return "".join(parts)


def section_traffic(data: dict[str, dict]) -> str:
    frames = {m: _rows(a["traffic"]) for m, a in data.items()}
    parts = [not_measured(m, "traffic") for m, f in frames.items() if f is None]
    measured = {m: f for m, f in frames.items() if f is not None}
    if measured:
        parts.append("<p>The model's naive/tiled traffic ratio beside the measured naive/fused "
                     "time ratio, and the query tile the measurement implies.</p>")
        parts.append(traffic_figure(measured))
    for machine, frame in measured.items():
        parts.append(f"<h3>{esc(machine)}</h3>")
        keys = [k for k in ("T", "d", "causal", "dtype", "block_q_model", "model_ratio",
                            "naive_ms", "fused_ms", "fused_impl", "measured_ratio",
                            "implied_block_q", "note") if k in frame.columns]
        parts.append(table(keys, frame[keys].values.tolist()))
    return "".join(parts)


# ---------------------------------------------------------------- claims


def _anchor(claim_id: str, machine: str) -> str:
    return f"prov-{claim_id}-{machine}"


def _claim_cell(claim_id: str, machine: str, claims_by_machine: dict[str, dict]) -> str:
    result = claims_by_machine.get(machine, {}).get(claim_id)
    if result is None:
        return "<span class=\"nm\">claims stage not run</span>"
    value = format_value(result["value"]) if result["value"] is not None else ""
    return (f"<a href=\"#{esc(_anchor(claim_id, machine))}\">{esc(result['verdict'])}</a>"
            + (f"<br>{esc(value)}" if value else ""))


def claims_table(claims: list[Claim], claims_by_machine: dict[str, dict]) -> str:
    machines = sorted(claims_by_machine)
    rows = [[c.id, c.sentence, c.chapter_value, c.kind]
            + [_claim_cell(c.id, m, claims_by_machine) for m in machines] for c in claims]
    raw = frozenset(range(4, 4 + len(machines)))
    return table(["claim", "sentence", "chapter value", "kind"] + machines, rows, raw_columns=raw)


def _provenance_block(claim: Claim, machine: str, result: dict, root: Path) -> str:
    artifact = result.get("artifact") or {}
    prov = {}
    if artifact.get("version"):
        try:
            prov = Register(root, machine).entry(artifact["stage"],
                                                 artifact["version"])["provenance"]
        except ValueError:
            prov = {}
    items = [("verdict", result["verdict"]), ("value here", format_value(result["value"])),
             ("chapter value", claim.chapter_value), ("why", result["reason"]),
             ("artifact", artifact.get("path")), ("version", artifact.get("version")),
             ("sha256", artifact.get("sha256")), ("created at", prov.get("created_at")),
             ("git commit", f"{prov.get('git_commit')} (dirty: {prov.get('git_dirty')})"),
             ("command", prov.get("command")), ("deciding rows", len(result.get("rows", [])))]
    lines = "".join(f"<dt>{esc(k)}</dt><dd><code>{esc(v)}</code></dd>" for k, v in items)
    return (f"<div class=\"prov\" id=\"{esc(_anchor(claim.id, machine))}\">"
            f"<h4>{esc(claim.id)} on {esc(machine)}</h4><dl>{lines}</dl></div>")


def section_claims(claims: list[Claim], claims_by_machine: dict[str, dict],
                   root: Path) -> str:
    parts = ["<p>Verdicts per machine, from each machine's claims.json; a verdict links to "
             "the artifact version and provenance that decided it. Re-check any of them "
             "with <code>inferlab audit ID</code>.</p>", claims_table(claims, claims_by_machine)]
    for claim in claims:
        for machine in sorted(claims_by_machine):
            result = claims_by_machine[machine].get(claim.id)
            if result is not None:
                parts.append(_provenance_block(claim, machine, result, root))
    return "".join(parts)


def section_provenance(data: dict[str, dict], root: Path) -> str:
    """Per machine: each artifact's version, sha256 (re-checked now), time, commit, command."""
    parts = []
    columns = ["stage", "version", "sha256", "integrity now", "created at", "git commit",
               "dirty", "command"]
    for machine, artifacts in data.items():
        rows = []
        for stage, artifact in artifacts.items():
            entry, prov = artifact.entry or {}, artifact.provenance
            rows.append([stage, entry.get("version"), entry.get("sha256"),
                         integrity(root, machine, artifact)["status"],
                         prov.get("created_at"), prov.get("git_commit"), prov.get("git_dirty"),
                         prov.get("command")])
        parts.append(f"<h3>{esc(machine)}</h3>" + table(columns, rows))
    return "".join(parts)


# ---------------------------------------------------------------- page


def render_report(root: Path | str, out: Path | str, keys: list[str] | None = None) -> Path:
    """Write the report to ``out`` for ``keys`` (default: every results key under ``root``);
    return its path."""
    root, path = Path(root), Path(out)
    machines = layout.keys(root) if keys is None else list(keys)
    data = {m: load_machine(root, m) for m in machines}
    recorded = recorded_results(root, machines)
    claims_by_machine = {m: {c["id"]: c for c in r["claims"]} for m, r in recorded.items()}
    claims = list(load().claims)
    bodies = {
        "ran": section_ran(data), "exactness": section_exactness(data),
        "prefill": section_prefill(data, claims_by_machine, claims),
        "decode": section_decode(data), "traffic": section_traffic(data),
        "claims": section_claims(claims, claims_by_machine, root),
        "provenance": section_provenance(data, root)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(machines, bodies), encoding="utf-8")
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


def page(machines: list[str], bodies: dict[str, str]) -> str:
    nav = " · ".join(f"<a href=\"#{key}\">{esc(title)}</a>" for key, title in SECTIONS)
    sections = "".join(f"<section id=\"{key}\"><h2>{esc(title)}</h2>{bodies[key]}</section>"
                       for key, title in SECTIONS)
    listed = ", ".join(esc(m) for m in machines) or "none yet"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>Inference Lab: FlashAttention and Optimized Kernels</title>"
            f"<style>{STYLE}</style></head><body>"
            "<h1>Inference Lab: the evidence for “FlashAttention and Optimized Kernels”</h1>"
            f"<p>Machines: {listed}.</p><nav>{nav}</nav>{sections}</body></html>\n")
