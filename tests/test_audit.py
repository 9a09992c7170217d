"""``inferlab audit`` and ``inferlab claims`` on the committed evidence.

The audit shows the verdict, value and interval exactly as results/{key}/claims.json has them,
then what they rest on: the series rows of the points the claim used, the runs (register
versions) each pools, and each version's artifact, sha256, commit and config. These tests
read the committed results/ and evidence/ (never a copy of their numbers); a test that
changes a file works on a temporary copy of one machine's folders.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from inferlab.evidence.register import Register
from inferlab.judging.claims import load
from inferlab.presentation import audit
from inferlab.presentation.formats import value_text
from inferlab.presentation.trail import Trail
from inferlab.workflow.cli import main as cli_main

ROOT = layout.REPO_ROOT
KEYS = [k for k in layout.keys(ROOT) if layout.artifact_path(ROOT, k, "claims").is_file()]
WIDTH = 100  # columns of a terminal the CLI's tables must fit


def recorded(key: str) -> dict[str, dict]:
    """claim id -> its entry of the committed results/{key}/claims.json."""
    data = json.loads(layout.artifact_path(ROOT, key, "claims").read_text(encoding="utf-8"))
    return {c["id"]: c for c in data["claims"]}


@pytest.fixture(scope="module")
def trails() -> dict[str, dict[str, dict]]:
    """key -> claim id -> the audit of that claim on that key (each key read once)."""
    out = {}
    for key in KEYS:
        trail = Trail(ROOT, key)
        out[key] = {c.id: trail.claim(c) for c in load().claims}
    return out


POINT = [c for c in STAGES["series"].key_columns if c not in ("kind", "version")]


def cell(v) -> str:
    """A cell of a point as text, alike from pandas and from JSON: 8192.0, True, ''."""
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, bool | np.bool_ | str):
        return str(v)
    return str(float(v))


def series_runs(key: str) -> dict[tuple, list[int]]:
    """(stage, point...) -> the versions of its run rows, read from series.csv with pandas:
    an independent reading of what each pooled point rests on."""
    frame = pd.read_csv(layout.artifact_path(ROOT, key, "series"))
    frame = frame.reindex(columns=[*frame.columns, *(c for c in POINT if c not in frame)])
    runs = frame[frame["kind"] == "run"]  # a key column the file lacks: empty in every row
    return {tuple(cell(v) for v in point): sorted(int(v) for v in group["version"])
            for point, group in runs.groupby(POINT, dropna=False)}


def point_of(stage: str, row: dict) -> tuple:
    """The key of ``series_runs`` for a row of ``stage`` (a claims.json or series row)."""
    cells = {"stage": stage, **row}
    return tuple(cell(cells.get(c)) for c in POINT)


# ---------------------------------------------------------------- audit equals claims.json


def test_audit_gives_claims_json_verdict_value_and_interval_on_every_machine(trails):
    # the comparisons of this file are over these; with none they would pass on nothing
    assert len(KEYS) >= 3, KEYS
    claims = load().claims
    differ, compared = [], 0
    for key in KEYS:
        for claim_id, want in recorded(key).items():
            got = trails[key][claim_id]
            differ += [(key, claim_id, field, got.get(field), want[field])
                       for field in ("verdict", "value", "interval", "unit")
                       if got.get(field) != want[field]]
            compared += 1
    assert compared == len(KEYS) * len(claims)
    assert differ == []


def test_every_series_point_shown_is_the_pooled_row_the_claim_judged(trails):
    """Each row of claims.json that a series claim judged (and a ratio's denominator) is
    found in series.csv with the value claims.json records, and its runs are series.csv's
    run rows of that point: every one a register version of the stage, with its sha256 and
    commit, its retained copy intact."""
    checked = 0
    for key in KEYS:
        runs = series_runs(key)
        history = {s: {e["version"]: e for e in Register(ROOT, key).history(s)}
                   for s in ("prefill", "decode")}
        for claim_id, trail in trails[key].items():
            for point in trail["points"]:
                assert point["pooled"] is not None, (key, claim_id, point["row"])
                column = point["column"]
                assert point["pooled"][column] == pytest.approx(point["recorded"]), \
                    (key, claim_id, point)
                versions = [r["version"] for r in point["runs"]]
                assert versions == runs[point_of(point["stage"], point["pooled"])]
                assert len(versions) == point["pooled"]["runs"]
                for v in versions:
                    entry = history[point["stage"]][v]
                    shown = trail["versions"][f"{point['stage']} {v}"]
                    assert shown["sha256"] == entry["sha256"]
                    assert shown["git_commit"] == entry["provenance"]["git_commit"]
                    assert shown["copy"] == "sha256 OK"
                checked += 1
    assert checked > 100  # the series claims' points on three machines


# ---------------------------------------------------------------- the CLI


@pytest.mark.parametrize("key", KEYS)
def test_cli_audit_of_c13_06_prints_claims_json_and_the_runs_it_pools(key, capsys):
    assert cli_main(["--root", str(ROOT), "audit", "C13-06", "--machine", key]) == 0
    out = capsys.readouterr().out
    want = recorded(key)["C13-06"]
    assert f"verdict: {want['verdict']}" in out
    assert f"value: {value_text(want)}" in out
    (row,) = want["rows"]
    for version in series_runs(key)[point_of("prefill", row)]:
        entry = Register(ROOT, key).entry("prefill", version)
        assert f"prefill version {version}: " in out
        assert entry["sha256"] in out and entry["provenance"]["git_commit"] in out
    assert max(map(len, out.splitlines())) <= WIDTH


def test_cli_audit_of_a_model_claim_prints_the_rows_of_its_artifact(capsys):
    key = KEYS[0]
    want = recorded(key)["C13-36"]
    assert cli_main(["--root", str(ROOT), "audit", "C13-36", "--machine", key, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (shown,) = data["machines"]
    assert shown["rows"] == want["rows"] and shown["points"] == []
    entry = Register(ROOT, key).entry("model", want["artifact"]["version"])
    version = shown["versions"][f"model {entry['version']}"]
    assert version["sha256"] == entry["sha256"] == want["artifact"]["sha256"]
    assert version["config"] == entry["provenance"]["config"]


def test_a_changed_kept_version_or_series_fails_the_audit(tmp_path, capsys):
    key = KEYS[-1]
    for folder in ("results", "evidence"):
        shutil.copytree(ROOT / folder / key, tmp_path / folder / key)
    shutil.copy(ROOT / "config.yaml", tmp_path)  # where the CLI resolves --machine
    args = ["--root", str(tmp_path), "audit", "C13-06", "--machine", key]
    assert cli_main(args) == 0
    capsys.readouterr()
    entry = Register(tmp_path, key).latest("prefill")
    copy = Register(tmp_path, key).version_path(entry)
    copy.write_bytes(copy.read_bytes() + b"\n")
    assert cli_main(args) == 1
    assert f"prefill version {entry['version']}" in capsys.readouterr().out
    series = layout.artifact_path(tmp_path, key, "series")
    series.write_text(series.read_text() + "\n")
    assert cli_main(args) == 1
    assert "rerun the claims stage" in capsys.readouterr().out


def test_an_unknown_claim_id_names_close_ones_and_exits_2(capsys):
    assert cli_main(["--root", str(ROOT), "audit", "C31-08"]) == 2
    assert "C13-08" in capsys.readouterr().err
    # one typed character too many: the id meant comes first
    with pytest.raises(ValueError, match=r"C13-01x.*did you mean C13-01\b"):
        audit.audit("C13-01x", ROOT)


@pytest.mark.parametrize("key", KEYS)
def test_cli_claims_for_one_machine_shows_only_it_in_100_columns(key, capsys):
    assert cli_main(["--root", str(ROOT), "claims", "--machine", key]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= WIDTH
    assert key in out and not [k for k in KEYS if k != key and k in out]
    for claim_id, want in recorded(key).items():
        assert any(line.startswith(claim_id) and want["verdict"] in line
                   for line in out.splitlines()), claim_id


def test_cli_claims_of_every_machine_fits_100_columns(capsys):
    assert cli_main(["--root", str(ROOT), "claims"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= WIDTH
    assert all(key in out for key in KEYS)
    assert sum(line.startswith("C13-06 ") for line in out.splitlines()) == len(KEYS)


def test_cli_claims_json_is_the_matrix(capsys):
    assert cli_main(["--root", str(ROOT), "claims", "--json"]) == 0
    matrix = json.loads(capsys.readouterr().out)
    for key in KEYS:
        assert matrix["C13-06"][key]["verdict"] == recorded(key)["C13-06"]["verdict"]
