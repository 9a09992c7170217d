"""From a claim to the evidence behind its verdict: ``inferlab claims`` and ``inferlab audit``.

Both show verdicts, values and intervals exactly as results/{key}/claims.json records them
(the report's numbers: nothing is judged again); ``audit`` adds what they rest on
(``trail.Trail``) and fails where that no longer holds; ``claims`` marks a key whose evidence
fails ``register.doubt`` now. Text output fits WIDTH columns.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from inferlab.evidence.register import Evidence, doubt
from inferlab.judging.claims import find, load
from inferlab.judging.numtext import format_value
from inferlab.presentation.formats import value_text
from inferlab.presentation.trail import SERIES, Trail, no_claims, recorded_results

WIDTH = 100  # a terminal's columns: the audit and the claims list fit them
# a pooled row's columns shown beside the claim's own: what it pools, and how it went
POOLED_COLUMNS = ("runs", "processes", "outlying", "status")


def _wrap(text: str, indent: int, more: int = 2) -> list[str]:
    """``text`` in lines of at most WIDTH columns, indented, continued ``more`` deeper."""
    return textwrap.wrap(text, WIDTH, initial_indent=" " * indent, break_on_hyphens=False,
                         subsequent_indent=" " * (indent + more)) or [" " * indent]


def key_integrity(root: Path | str, key: str) -> dict:
    """The grid of ``key`` and ``doubts``: each of its artifacts that fails
    ``register.doubt`` now, and a claims.json that names another machine or grid."""
    machine, grid = layout.split_key(key)
    doubts = [f"{stage}: {why}" for stage in STAGES
              if layout.artifact_path(root, key, stage).is_file()
              and (why := doubt(root, key, stage))]
    recorded = recorded_results(root, [key]).get(key) or {}
    if (recorded.get("machine"), recorded.get("grid")) != (machine, grid):
        doubts.append(f"claims: claims.json says machine {recorded.get('machine')!r}, grid "
                      f"{recorded.get('grid')!r}, but lies in results/{key}/")
    return {"machine": machine, "grid": grid or "book", "doubts": doubts}


def _claims_block(key: str, claims: list[dict], doubted: bool) -> list[str]:
    """One key's claims: id, verdict and the value here, wrapped under its own column."""
    grid = layout.split_key(key)[1] or "book (config.yaml)"
    rows = [("claim", "verdict", "value here")] + [
        (c["id"], c["verdict"], value_text(c) if c["value"] is not None else "") for c in claims]
    lines = _wrap(f"machine {key}{' !' if doubted else ''}, grid {grid}: {len(claims)} claims "
                  "as its claims.json records them", 0, 4)
    w_id, w_verdict = (max(len(r[i]) for r in rows) for i in (0, 1))
    indent = w_id + w_verdict + 4
    for cid, verdict, text in rows:
        parts = textwrap.wrap(text, max(WIDTH - indent, 20)) or [""]
        lines.append(f"{cid:<{w_id}}  {verdict:<{w_verdict}}  {parts[0]}".rstrip())
        lines += [" " * indent + part for part in parts[1:]]
    return lines


def cli_claims(root: Path | str, key: str | None = None, as_json: bool = False) -> int:
    """Each claim's verdict and value on ``key`` (default: every key with a claims.json);
    exit 1 where a key's evidence fails its check now. ``as_json``: {claim id: {key:
    {verdict, value, interval, unit, grid, trusted}}}."""
    if key is not None and not layout.artifact_path(root, key, "claims").is_file():
        raise no_claims(root, key)
    recorded = recorded_results(root, [key] if key else None)
    checked = {k: key_integrity(root, k) for k in sorted(recorded)}
    if not checked:
        print(f"no results/{{key}}/claims.json under {Path(root).resolve()}: run the claims "
              "stage first")
        return 0
    shown = {k: [next((c for c in recorded[k]["claims"] if c["id"] == claim.id),
                      {"id": claim.id, "verdict": "not evaluated", "value": None})
                 for claim in load().claims] for k in checked}
    if as_json:
        matrix: dict[str, dict] = {}
        for k, found in shown.items():
            for c in found:
                matrix.setdefault(c["id"], {})[k] = {
                    **{f: c.get(f) for f in ("verdict", "value", "interval", "unit")},
                    "grid": checked[k]["grid"], "trusted": not checked[k]["doubts"]}
        print(json.dumps(matrix, indent=2))
    else:
        print("\n\n".join("\n".join(_claims_block(k, shown[k], bool(checked[k]["doubts"])))
                          for k in checked))
        for k, found in checked.items():
            for why in found["doubts"]:
                print(*_wrap(f"! {k}: MISMATCH {why}: its verdicts are not evidence until it "
                             "is rerun", 0, 4), sep="\n")
    return 1 if any(found["doubts"] for found in checked.values()) else 0


def integrity(root: Path | str, key: str, evidence: Evidence) -> dict:
    """Check NOW that the results file is what its record says and was computed from the
    inputs there now (``register.doubt``); status "sha256 OK", "MISMATCH" or "not run"."""
    if evidence.sha256_now is None and evidence.entry is None:
        return {"status": "not run", "detail": "no artifact and no record"}
    why = doubt(root, key, evidence.stage)
    return {"status": "MISMATCH" if why else "sha256 OK",
            "detail": why or "the results file is its record's; its inputs are the files there"}


def audit(claim_id: str, root: Path | str, key: str | None = None) -> dict:
    """A claim's verdict, value and interval on each key (or on ``key``) as claims.json
    records them, and what they rest on; ``ok`` is False where the trail does not hold."""
    claim = find(claim_id, load().claims)
    keys = [key] if key else [k for k in layout.keys(root)
                              if layout.artifact_path(root, k, "claims").is_file()]
    rows = [Trail(root, k).claim(claim) for k in keys]
    return {"claim": {f: getattr(claim, f) for f in ("id", "sentence", "kind", "chapter_value",
                                                     "source")},
            "machines": rows, "ok": not any(r["problems"] for r in rows)}


def _label(row: dict, stage: str) -> str:
    """A point in words: its key columns that have a value (impl=tiled T=8192 ...)."""
    return " ".join(f"{c}={format_value(row[c])}" for c in STAGES[stage].key_columns
                    if row.get(c) is not None)


def _row_text(row: dict) -> str:
    """A judged row of claims.json: what names it, then the value it gave."""
    named = ", ".join(f"{c}={format_value(v)}" for c, v in row.items()
                      if v is not None and c not in ("value", "ci_low", "ci_high"))
    ci = [row.get("ci_low"), row.get("ci_high")]
    ci_text = f" (95 %: {format_value(ci)})" if None not in ci and ci[0] != ci[1] else ""
    return f"{named}: value {format_value(row.get('value'))}{ci_text}"


def _format_points(m: dict) -> list[str]:
    lines = []
    for p in m["points"]:
        pooled, side = p["pooled"], f" ({p['side']})" if p["side"] else ""
        lines += _wrap(f"{p['stage']}{side} {_label(pooled or p['row'], p['stage'])}", 4)
        if pooled is None:
            lines.append("      not a pooled row of series.csv")
            continue
        extra = ", ".join(f"{c} {format_value(pooled[c])}" for c in POOLED_COLUMNS
                          if pooled.get(c) is not None)
        lines += _wrap(f"series.csv pooled: {p['column']} {format_value(pooled[p['column']])}"
                       f" ({extra})", 6)
        # a no-break space keeps each "version: value" on one line when wrapped
        runs = ", ".join(f"{r['version']}:\xa0{format_value(r.get(p['column']))}"
                         for r in p["runs"])
        lines += [line.replace("\xa0", " ")
                  for line in _wrap(f"runs (version: {p['column']}): {runs}", 6)]
    return lines


def _format_versions(versions: dict) -> list[str]:
    lines, configs = [], {}
    for v in versions.values():
        if "sha256" not in v:  # not in the register at all
            lines.append(f"    {v['stage']} version {v['version']}: {v['problem']}")
            continue
        copy = "kept copy matches" if v["copy"] == "sha256 OK" else "kept copy: MISMATCH"
        lines += [f"    {v['stage']} version {v['version']}: {v['path']}, {v['created_at']}",
                  f"      sha256 {v['sha256']}, {copy}",
                  f"      git commit {v['git_commit']}, config {(v['config_sha256'] or '')[:12]}"]
        lines += _wrap(v["copy"], 6) if v["copy"] != "sha256 OK" else []
        which = configs.setdefault(v["config_sha256"], (v["config"], {}))[1]
        which.setdefault(v["stage"], []).append(str(v["version"]))
    for sha, (config, which) in configs.items():
        of = "; ".join(f"{stage} version{'s' if len(vs) > 1 else ''} {', '.join(vs)}"
                       for stage, vs in which.items())
        lines += _wrap(f"config {(sha or '')[:12]} ({of}): {json.dumps(config, sort_keys=True)}",
                       4, 4)
    return lines


def _format_machine(m: dict) -> list[str]:
    lines = [f"machine {m['machine']}, as {m['claims_json']} records it",
             f"  verdict: {m['verdict']}", f"  value: {value_text(m)}",
             *_wrap(f"reason: {m['reason']}", 2, 4)]
    a = m["artifact"]
    if a:
        version = f" version {a['version']}" if a.get("version") is not None else ""
        lines += [f"  judged on: {a['path']}{version}", f"    sha256 {a['sha256']}"]
    more = f" (claims.json keeps {len(m['rows'])} of {m['rows_judged']})" \
        if m["rows_judged"] > len(m["rows"]) else ""
    if m["points"]:
        lines.append(f"  the series points it judged, each pooled over its runs{more}:")
        lines += _format_points(m)
    elif m["rows"]:
        lines.append(f"  the rows it judged{more}:")
        lines += [line for row in m["rows"] for line in _wrap(_row_text(row), 4, 4)]
    if m["versions"]:
        lines += ["  the register versions it rests on:", *_format_versions(m["versions"])]
    elif a and not STAGES[a["stage"]].needs_device and a["stage"] != SERIES:
        lines += _wrap(f"{a['stage']} is computed from {' and '.join(STAGES[a['stage']].reads)}"
                       " (derived: not in the register); a series claim at these points shows "
                       "the runs they pool", 2, 4)
    return lines + [f"  ! {why}" for why in m["problems"]]


def format_audit(data: dict) -> str:
    """The audit as text of at most WIDTH columns: the claim, then one block per key."""
    c = data["claim"]
    lines = [f"{c['id']} [{c['kind']}]", *_wrap(f"sentence: {c['sentence']}", 2, 4),
             *_wrap(f"chapter value: {c['chapter_value']}", 2, 4)]
    lines += _wrap(f"source: {c['source']}", 2, 4) if c["source"] else []
    if not data["machines"]:
        lines.append("  no machine has a results/{key}/claims.json under this root")
    for m in data["machines"]:
        lines += _format_machine(m)
    return "\n".join(lines)


def cli_audit(claim_id: str, root: Path | str, key: str | None = None,
              as_json: bool = False) -> int:
    """Print the audit; exit 1 where the trail does not hold (a changed file or copy)."""
    data = audit(claim_id, root, key)
    print(json.dumps(data, indent=2, default=str) if as_json else format_audit(data))
    return 0 if data["ok"] else 1
