"""From a claim to the evidence behind its verdict, checked now: ``inferlab claims`` and
``inferlab audit``.

``audit`` re-evaluates a claim on each results key, re-hashes the results file, its
sidecar and the register's retained copy, and prints the provenance that produced the
artifact (commit, code and config, environment, the command that reproduces it).
``claims_matrix`` is every claim's recorded verdict per key, from each claims.json,
with the key's grid and whether its evidence still passes ``loading.doubt``; ``integrity``
is that check for one artifact, as audit and the report show it.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferlab.core import layout
from inferlab.core.files import relative
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.loading import Evidence, doubt, load_evidence
from inferlab.judging.claims import Claim, find, load
from inferlab.judging.numtext import format_value
from inferlab.judging.series_view import judged
from inferlab.judging.verdicts import evaluate, evaluate_all
from inferlab.presentation.claim_text import reason_text
from inferlab.presentation.formats import text_table

# ---------------------------------------------------------------- evidence


def evaluate_key(root: Path | str, key: str, claims_path: Path | str | None = None) -> dict:
    """Every claim judged now on ``key``'s artifacts (what the claims stage would write)."""
    claims_file = load(claims_path)
    evidence = {s: load_evidence(root, key, s) for s in STAGES if s != "claims"}
    return evaluate_all(claims_file.claims, judged(evidence), key, Path(root),
                        claims_file.fp16_stand_in, claims_file.chapter_gpu)


# ---------------------------------------------------------------- claims table


def recorded_results(root: Path | str, keys: list[str] | None = None) -> dict[str, dict]:
    """key -> its results/{key}/claims.json, for ``keys`` (default: every key that has one)."""
    out = {}
    for key in layout.keys(root) if keys is None else keys:
        path = layout.artifact_path(root, key, "claims")
        if path.is_file():
            try:
                out[key] = artifacts.read(path, "claims")
            except ValueError as exc:
                raise ValueError(f"{relative(path, root)}: {exc}; rerun its claims stage") \
                    from exc
    return out


def key_integrity(root: Path | str, key: str) -> dict:
    """The grid of ``key`` and whether its claims can be trusted now: ``doubts`` lists
    each of its artifacts (claims.json and what it was computed from) that fails
    ``loading.doubt``, and a claims.json that names another machine or grid."""
    machine, grid = layout.split_key(key)
    doubts = [f"{stage}: {why}" for stage in STAGES
              if layout.artifact_path(root, key, stage).is_file()
              and (why := doubt(root, key, stage))]
    recorded = recorded_results(root, [key]).get(key) or {}
    if (recorded.get("machine"), recorded.get("grid")) != (machine, grid):
        doubts.append(f"claims: claims.json says machine {recorded.get('machine')!r}, grid "
                      f"{recorded.get('grid')!r}, but lies in results/{key}/")
    return {"machine": machine, "grid": grid or "book", "doubts": doubts}


def claims_matrix(root: Path | str, claims_path: Path | str | None = None) -> dict:
    """{claim id: {key: {verdict, value, grid, trusted}}} from every key's claims.json;
    ``trusted`` is False where ``key_integrity`` finds a doubt."""
    recorded = recorded_results(root)
    checked = {key: key_integrity(root, key) for key in recorded}
    matrix: dict[str, dict] = {}
    for claim in load(claims_path).claims:
        row = matrix.setdefault(claim.id, {})
        for key, data in recorded.items():
            entry = next((c for c in data["claims"] if c["id"] == claim.id), None)
            row[key] = ({"verdict": entry["verdict"], "value": entry.get("value")}
                        if entry else {"verdict": "not evaluated", "value": None})
            row[key] |= {"grid": checked[key]["grid"], "trusted": not checked[key]["doubts"]}
    return matrix


def cli_claims(root: Path | str, as_json: bool = False) -> int:
    """Print every claim with its verdict per key (from each key's claims.json), the grid
    of each key, and a mark on every key whose evidence fails its check now; exit 1 then."""
    matrix = claims_matrix(root)
    keys = sorted({k for row in matrix.values() for k in row})
    doubts = {k: key_integrity(root, k)["doubts"] for k in keys}
    if as_json:
        print(json.dumps(matrix, indent=2))
        return 1 if any(doubts.values()) else 0
    if not keys:
        print(f"no results/{{key}}/claims.json under {Path(root).resolve()}: run the claims "
              "stage first")
        return 0
    mark = {k: " !" if doubts[k] else "" for k in keys}
    lines = [["claim", *(k + mark[k] for k in keys)],
             ["", *(f"grid {layout.split_key(k)[1] or 'book (config.yaml)'}" for k in keys)]]
    lines += [[claim_id, *((f"{row[k]['verdict']} ({format_value(row[k]['value'])})"
                            if row[k]["value"] is not None else row[k]["verdict"]) + mark[k]
                           for k in keys)] for claim_id, row in matrix.items()]
    print(text_table(lines))
    for key in keys:
        for why in doubts[key]:
            print(f"! {key}: MISMATCH {why}: its verdicts are not evidence until it is rerun")
    return 1 if any(doubts.values()) else 0


# ---------------------------------------------------------------- integrity


def integrity(root: Path | str, key: str, evidence: Evidence) -> dict:
    """Check NOW that the results file is what its record says and was computed from the
    inputs there now (``loading.doubt``); status "sha256 OK", "MISMATCH" or "not run"."""
    if evidence.sha256_now is None and evidence.entry is None:
        return {"status": "not run", "detail": "no artifact and no record"}
    why = doubt(root, key, evidence.stage)
    return {"status": "MISMATCH" if why else "sha256 OK",
            "detail": why or "the results file is its record's; its inputs are the files there",
            "results_sha256_now": evidence.sha256_now}


# ---------------------------------------------------------------- audit


def _environment_summary(env: dict) -> dict:
    build, host, cuda = env.get("build") or {}, env.get("host") or {}, env.get("cuda") or {}
    return {"device": env.get("device"), "device_name": cuda.get("device_name"),
            "torch": build.get("torch"), "threads": host.get("torch_threads"),
            "cpu": host.get("cpu_model")}


def _key_audit(claim: Claim, root: Path, key: str, hardware: str, stand_in: dict,
               chapter_gpu: dict | None = None) -> dict:
    evidence = {s: load_evidence(root, key, s) for s in STAGES if s != "claims"}
    now = evaluate(claim, evidence, key, root, stand_in, chapter_gpu)
    recorded = recorded_results(root, [key]).get(key)
    mine = next((c for c in recorded["claims"] if c["id"] == claim.id), None) \
        if recorded else None
    out = {"machine": key, "verdict": now["verdict"], "value": now["value"],
           "reason": reason_text(now, claim, key), "cause": now["cause"],
           "recorded": mine and {k: mine.get(k) for k in ("verdict", "value", "artifact")},
           "artifact": now["artifact"], "integrity": None, "provenance": None}
    if claim.check is None:
        return out
    found = evidence[claim.check.stage]
    prov = found.provenance
    config = prov.get("config") or {}
    out["integrity"] = integrity(root, key, found)
    out["provenance"] = {
        "created_at": prov.get("created_at"), "git_commit": prov.get("git_commit"),
        "git_dirty": prov.get("git_dirty"), "code_sha256": prov.get("code_sha256"),
        "config": config.get(found.stage, config), "seed": prov.get("seed"),
        "environment": _environment_summary(prov.get("environment") or {}),
        "command": prov.get("command")}
    return out


def audit(claim_id: str, root: Path | str, key: str | None = None,
          claims_path: Path | str | None = None) -> dict:
    """The chain from a claim to the artifacts, hashes and commands behind its verdicts."""
    claims_file = load(claims_path)
    claim = find(claim_id, claims_file.claims)
    keys = [layout.check_key(key)] if key else layout.keys(root)
    rows = [_key_audit(claim, Path(root), k, claims_file.hardware, claims_file.fp16_stand_in,
                       claims_file.chapter_gpu) for k in keys]
    ok = all((r["integrity"] or {}).get("status") != "MISMATCH" for r in rows)
    check = claim.check
    return {"claim": {"id": claim.id, "sentence": claim.sentence, "kind": claim.kind,
                      "chapter_value": claim.chapter_value, "source": claim.source,
                      "note": claim.note,
                      "reading": None if claim.reading is None else
                      {"quantity": claim.reading.quantity, "why": claim.reading.why},
                      "check": None if check is None else {"stage": check.stage}},
            "machines": rows, "ok": ok}


def format_audit(data: dict) -> str:
    """The audit chain as text, claim first, then one block per key."""
    c = data["claim"]
    lines = [f"{c['id']} [{c['kind']}]", f"  sentence: {c['sentence']}",
             f"  chapter value: {c['chapter_value']}"]
    if c["source"]:
        lines.append(f"  source: {c['source']}")
    if not data["machines"]:
        lines.append("  no machine has results under this root")
    for m in data["machines"]:
        lines += [f"machine {m['machine']}",
                  f"  verdict: {m['verdict']}   value: {format_value(m['value'])}",
                  f"  reason: {m['reason']}"]
        if m["recorded"]:
            version = (m["recorded"].get("artifact") or {}).get("version")
            lines.append(f"  recorded in claims.json: {m['recorded']['verdict']} "
                         f"({format_value(m['recorded']['value'])})"
                         + (f" from version {version}" if version else ""))
        lines += _format_chain(m)
    return "\n".join(lines)


def _format_chain(m: dict) -> list[str]:
    if m["artifact"] is None:
        return []
    a, i, p = m["artifact"], m["integrity"], m["provenance"]
    env = p["environment"]
    return [
        f"  artifact: {a['path']}  version {a['version']}  sha256 {a['sha256']}",
        f"  integrity: {i['status']} ({i['detail']})",
        f"  created_at: {p['created_at']}  git commit: {p['git_commit']}  "
        f"dirty: {p['git_dirty']}",
        f"  code sha256: {p['code_sha256']}",
        f"  config: {json.dumps(p['config'], sort_keys=True)}",
        f"  environment: device={env['device']} ({env['device_name'] or env['cpu']}) "
        f"torch={env['torch']} threads={env['threads']}",
        f"  reproduce: {p['command'] or 'not recorded in the provenance'}"]


def cli_audit(claim_id: str, root: Path | str, key: str | None = None,
              as_json: bool = False) -> int:
    """Print the audit chain; exit 1 if any artifact's hash no longer matches."""
    data = audit(claim_id, root, key)
    print(json.dumps(data, indent=2, default=str) if as_json else format_audit(data))
    return 0 if data["ok"] else 1
