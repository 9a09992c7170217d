"""From a claim to the evidence behind its verdict, checked now: ``inferlab claims`` and
``inferlab audit``.

``audit`` re-evaluates a claim on each results key, re-hashes the results file, its
sidecar and the register's retained copy, and prints the provenance that produced the
artifact (commit, code and config, environment, the command that reproduces it).
``claims_matrix`` is every claim's recorded verdict per key, from each claims.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from inferlab import artifacts, layout
from inferlab.claims import Claim, find, load
from inferlab.evidence import Evidence, load_evidence
from inferlab.files import relative, sha256_file
from inferlab.formats import format_value
from inferlab.pipeline import STAGES
from inferlab.register import Register
from inferlab.verdicts import evaluate, evaluate_all

# ---------------------------------------------------------------- evidence


def evaluate_key(root: Path | str, key: str, claims_path: Path | str | None = None) -> dict:
    """Every claim judged now on ``key``'s artifacts (what the claims stage would write)."""
    claims_file = load(claims_path)
    evidence = {s: load_evidence(root, key, s) for s in STAGES if s != "claims"}
    return evaluate_all(claims_file.claims, evidence, key, Path(root), claims_file.hardware,
                        claims_file.fp16_stand_in)


# ---------------------------------------------------------------- claims table


def recorded_results(root: Path | str, keys: list[str] | None = None) -> dict[str, dict]:
    """key -> its results/{key}/claims.json, for ``keys`` (default: every key that has one)."""
    out = {}
    for key in layout.keys(root) if keys is None else keys:
        path = layout.artifact_path(root, key, "claims")
        if path.is_file():
            out[key] = artifacts.read(path, "claims")
    return out


def claims_matrix(root: Path | str, claims_path: Path | str | None = None) -> dict:
    """{claim id: {key: {verdict, value}}} from every key's claims.json."""
    recorded = recorded_results(root)
    matrix: dict[str, dict] = {}
    for claim in load(claims_path).claims:
        row = matrix.setdefault(claim.id, {})
        for key, data in recorded.items():
            entry = next((c for c in data["claims"] if c["id"] == claim.id), None)
            row[key] = ({"verdict": entry["verdict"], "value": entry.get("value")}
                        if entry else {"verdict": "not evaluated", "value": None})
    return matrix


def cli_claims(root: Path | str, as_json: bool = False) -> int:
    """Print every claim with its verdict per key (from each key's claims.json)."""
    matrix = claims_matrix(root)
    if as_json:
        print(json.dumps(matrix, indent=2))
        return 0
    keys = sorted({k for row in matrix.values() for k in row})
    if not keys:
        print(f"no results/{{key}}/claims.json under {Path(root).resolve()}: run the claims "
              "stage first")
        return 0
    width = max(22, *(len(k) for k in keys))
    print("claim   " + "".join(k.ljust(width + 2) for k in keys))
    for claim_id, row in matrix.items():
        cells = [f"{row[k]['verdict']} ({format_value(row[k]['value'])})"
                 if row[k]["value"] is not None else row[k]["verdict"] for k in keys]
        print(f"{claim_id:<8}" + "".join(c.ljust(width + 2) for c in cells))
    return 0


# ---------------------------------------------------------------- integrity


def integrity(root: Path | str, key: str, evidence: Evidence) -> dict:
    """Re-hash NOW the results file, its sidecar and the register's retained copy."""
    entry = evidence.entry
    if evidence.sha256_now is None and entry is None:
        return {"status": "not run", "detail": "no artifact and no register entry"}
    if entry is None:
        return {"status": "MISMATCH", "detail": "the results file is not in the register"}
    if evidence.sha256_now is None:
        return {"status": "MISMATCH", "detail": f"the results file is missing; the register "
                f"has version {entry.get('version')} of {evidence.stage}"}
    expected = entry.get("sha256")
    try:
        copy = Register(root, key).copy_path(expected)
    except ValueError as exc:  # an edited entry whose sha256 is not even a hash
        return {"status": "MISMATCH", "detail": str(exc)}
    copy_now = sha256_file(copy) if copy.is_file() else None
    sidecar = layout.sidecar_path(evidence.path)
    sidecar_now = sha256_file(sidecar) if sidecar.is_file() else None
    problems = []
    if evidence.sha256_now != expected:
        problems.append(f"results file now {evidence.sha256_now}, register says {expected}")
    if copy_now != expected:
        problems.append(f"retained copy {relative(copy, root)} "
                        f"{'is missing' if copy_now is None else 'now ' + copy_now}")
    if entry.get("sidecar_sha256") and sidecar_now != entry["sidecar_sha256"]:
        problems.append(f"sidecar now {sidecar_now}, register says {entry['sidecar_sha256']}")
    return {"status": "MISMATCH" if problems else "sha256 OK",
            "detail": "; ".join(problems) or "results file, sidecar and retained copy match",
            "results_sha256_now": evidence.sha256_now, "retained_copy_sha256_now": copy_now,
            "retained_copy": relative(copy, root)}


# ---------------------------------------------------------------- audit


def _environment_summary(env: dict) -> dict:
    build, host, cuda = env.get("build") or {}, env.get("host") or {}, env.get("cuda") or {}
    return {"device": env.get("device"), "device_name": cuda.get("device_name"),
            "torch": build.get("torch"), "threads": host.get("torch_threads"),
            "cpu": host.get("cpu_model")}


def _key_audit(claim: Claim, root: Path, key: str, hardware: str, stand_in: dict) -> dict:
    evidence = {s: load_evidence(root, key, s) for s in STAGES if s != "claims"}
    now = evaluate(claim, evidence, key, root, hardware, stand_in)
    recorded = recorded_results(root, [key]).get(key)
    mine = next((c for c in recorded["claims"] if c["id"] == claim.id), None) \
        if recorded else None
    out = {"machine": key, "verdict": now["verdict"], "value": now["value"],
           "reason": now["reason"],
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
    rows = [_key_audit(claim, Path(root), k, claims_file.hardware, claims_file.fp16_stand_in)
            for k in keys]
    ok = all((r["integrity"] or {}).get("status") != "MISMATCH" for r in rows)
    check = claim.check
    return {"claim": {"id": claim.id, "sentence": claim.sentence, "kind": claim.kind,
                      "chapter_value": claim.chapter_value, "source": claim.source,
                      "note": claim.note,
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
