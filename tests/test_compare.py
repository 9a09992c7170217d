"""Between runs: the latest timing version against the previous one made alike."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pandas as pd
import pytest

from inferlab.evidence import artifacts
from inferlab.evidence.compare import comparable, compare_latest, format_differences
from inferlab.evidence.provenance import write_artifact
from inferlab.evidence.register import Register

KEY = "cpu-compare-1c"
ENV = {"device": "cpu", "build": {"cpu_capability": "AVX512"}, "host": {"cpu_model": "x"}}


def _rows(rng: random.Random, scale: float) -> list[dict]:
    rows = []
    for T in (1024, 2048):
        for impl in ("naive", "sdpa_flash"):
            ms = rng.uniform(10, 100) * scale
            rows.append({"impl": impl, "fused_sdpa": impl == "sdpa_flash", "T": T, "batch": 1,
                         "heads": 2, "d": 64, "dtype": "float32", "causal": True, "threads": 1,
                         "median_ms": ms, "ratio_to": "naive", "ratio": rng.uniform(0.1, 1),
                         "flops": 1, "status": "ok"})
    return rows


def _write(root, rows, config=None, env=ENV, code="a") -> dict:
    code_file = root / "code.py"
    code_file.write_text(code)
    return write_artifact(root, KEY, "prefill", artifacts.encode("prefill", rows),
                          config=config or {"seed": 0}, code_files=[code_file], inputs=[],
                          seed=0, command="x", environment=env)


def test_differences_per_point_against_the_previous_alike_version(tmp_path):
    rng = random.Random(3)
    first = _rows(rng, 1.0)
    second = [{**r, "median_ms": r["median_ms"] * f, "ratio": r["ratio"] * f}
              for r, f in zip(first, (1.1, 0.9, 1.0, 1.25), strict=True)]
    _write(tmp_path, first)
    _write(tmp_path, _rows(rng, 5.0), config={"seed": 1})  # another config: not compared
    _write(tmp_path, second)
    previous, latest, diffs = compare_latest(tmp_path, KEY, "prefill")
    assert (previous["version"], latest["version"]) == (1, 3)
    assert list(diffs["median_ms_diff"].round(6)) == [0.1, -0.1, 0.0, 0.25]
    assert list(diffs["ratio_diff"].round(6)) == [0.1, -0.1, 0.0, 0.25]
    text = format_differences(previous, latest, diffs, "prefill")
    assert "+25.0%" in text and "median |diff| 10.0%, max 25.0% over 4 points" in text


@pytest.mark.parametrize("change", ["config", "code", "hardware"])
def test_a_version_made_otherwise_is_not_comparable(tmp_path, change):
    rng = random.Random(4)
    _write(tmp_path, _rows(rng, 1.0))
    other = {"config": {"config": {"seed": 9}}, "code": {"code": "b"},
             "hardware": {"env": {**ENV, "build": {"cpu_capability": "AVX2"}}}}[change]
    _write(tmp_path, _rows(rng, 1.0), **other)
    assert comparable(Register(tmp_path, KEY), "prefill") is None
    with pytest.raises(ValueError, match="no earlier version made with the same"):
        compare_latest(tmp_path, KEY, "prefill")


def test_compare_is_for_timing_stages():
    with pytest.raises(ValueError, match="only prefill, decode have"):
        compare_latest(".", KEY, "traffic")


def _with_intervals(rows: list[dict], half: float) -> list[dict]:
    """Rows whose ratio has a 95 % interval of ± ``half`` (none for the reference)."""
    return [{**r, "ratio": 1.0 if r["impl"] == "naive" else r["ratio"],
             "ratio_ci_low": None if r["impl"] == "naive" else r["ratio"] * (1 - half),
             "ratio_ci_high": None if r["impl"] == "naive" else r["ratio"] * (1 + half)}
            for r in rows]


def _moved(rows: list[dict], factor: float, half: float) -> list[dict]:
    return _with_intervals([{**r, "ratio": r["ratio"] * factor} for r in rows], half)


def test_the_track_record_pairs_each_version_with_the_previous_one_made_alike(tmp_path):
    from inferlab.presentation.report_tables import record_table, track_record

    base = _with_intervals(_rows(random.Random(5), 1.0), 0.05)
    _write(tmp_path, base)                                         # 1
    _write(tmp_path, base, config={"seed": 1})                     # 2: made otherwise
    _write(tmp_path, _moved(base, 1.02, 0.01))                     # 3: against 1
    _write(tmp_path, _moved(base, 1.10, 0.05))                     # 4: against 3
    record = track_record(tmp_path, KEY, "prefill")
    assert [(r["old"], r["new"]) for r in record] == [(1, 3), (3, 4)]
    first, second = record
    # 1 -> 3: +2 % each; 1.02 is inside ±5 %, but 1 is outside 1.02 ± 1 %: no point agrees
    assert (first["points"], first["judged"], first["inside"]) == (2, 2, 0)
    assert first["median_diff"] == pytest.approx(0.02)
    assert first["median_halfwidth"] == pytest.approx(0.03)  # the median of 5, 5, 1, 1 %
    # 3 -> 4: 1.10 / 1.02 - 1 = 7.8 %, outside both (±1 % and ±5 %)
    assert second["inside"] == 0 and second["max_diff"] == pytest.approx(1.10 / 1.02 - 1)
    table = record_table(record)
    assert table["rows"][0]["cells"][:3] == ["1 → 3", "2", "0 of 2 (0%)"]
    assert table["rows"][1]["cells"][3] == "7.84 %"


def test_a_pair_summary_leaves_out_the_reference_and_rows_without_an_interval():
    from inferlab.presentation.report_tables import pair_summary

    diffs = pd.DataFrame({
        "ratio_old": [1.0, 0.5, 0.5, 0.4], "ratio_new": [1.0, 0.51, 0.6, 0.4],
        "ratio_diff": [0.0, 0.02, 0.2, 0.0],
        "ratio_ci_low_old": [1.0, 0.49, 0.45, None], "ratio_ci_high_old": [1.0, 0.52, 0.55, None],
        "ratio_ci_low_new": [1.0, 0.50, 0.5, None], "ratio_ci_high_new": [1.0, 0.52, 0.7, None],
        "ratio_agree": pd.array([True, True, False, pd.NA], dtype="boolean")})
    s = pair_summary(diffs)
    assert (s["points"], s["judged"], s["inside"]) == (3, 2, 1)
    assert s["median_diff"] == pytest.approx(0.02) and s["max_diff"] == pytest.approx(0.2)
    halves = sorted([0.03, 0.1, 0.01 / 0.51, 0.1 / 0.6])
    assert s["median_halfwidth"] == pytest.approx((halves[1] + halves[2]) / 2)
    assert pair_summary(pd.DataFrame({"median_ms_diff": [0.1]}))["median_diff"] is None


def test_history_record_prints_every_pair_and_says_when_there_is_none(tmp_path, capsys):
    from inferlab.workflow.cli import main

    (tmp_path / "config.yaml").write_text(
        (Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    base = _with_intervals(_rows(random.Random(6), 1.0), 0.05)
    _write(tmp_path, base)
    args = ["history", "prefill", "--record", "--root", str(tmp_path), "--machine", KEY]
    assert main(args) == 1
    assert "no two versions of 'cpu-compare-1c' were made with the same code" in \
        capsys.readouterr().out
    _write(tmp_path, _moved(base, 1.01, 0.05))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 → 2     2              2 of 2 (100%)" in out
    assert main(["history", "prefill", "--compare", "--root", str(tmp_path), "--machine",
                 KEY]) == 0
    assert "2 of 2 (100%)" in capsys.readouterr().out
    for bad, says in ((["history", "--record"], "--record needs a timing stage"),
                      (["history", "claims", "--record"], "'claims' has none"),
                      # R8-19: probe is timed, but its JSON pairs nothing: AttributeError
                      (["history", "probe", "--record"], "only prefill, decode have"),
                      (["history", "model", "--compare"], "'model' has none")):
        assert main([*bad, "--root", str(tmp_path), "--machine", KEY]) == 2
        assert says in capsys.readouterr().err


def _level_table(points: list[tuple[float, float | None, int | None]]):
    """A prefill table with one row per (ratio, ratio_ci_high, workers), T = 1, 2, ..."""
    from inferlab.evidence.artifacts import Table

    frame = pd.DataFrame([
        {"impl": "naive" if ratio == 1 else "tiled", "ratio_to": "naive", "fused_sdpa": False,
         "T": i, "dtype": "float32", "causal": True,
         "block_q": 64, "block_k": 64, "batch": 1, "heads": 2, "d": 64, "ratio": ratio,
         "ratio_ci_high": high, "workers": workers, "status": "ok"}
        for i, (ratio, high, workers) in enumerate(points, 1)])
    return Table(frame, pd.DataFrame(index=frame.index))


def test_run_level_variance_is_what_the_moves_have_beyond_the_intervals():
    from inferlab.presentation.report_tables import run_level

    # two points, ± 5 % over 4 processes in both runs, both moved by +10 %: each interval
    # allots its run (ln 1.05 / t(3) = 3.182)² / 2 = 1.1755e-4, so both runs of both points
    # 4.702e-4 of the observed 2 · (ln 1.1)² = 0.018168: 2.6 %; the rest, 0.017698 over
    # 2 · 2, is a run-level sd of 0.06652
    old = _level_table([(0.5, 0.525, 4), (0.8, 0.84, 4), (1.0, 1.0, 4), (0.7, None, 1)])
    new = _level_table([(0.55, 0.5775, 4), (0.88, 0.924, 4), (1.0, 1.0, 4), (0.9, None, 1)])
    level = run_level("prefill", old, new)
    assert level["points"] == 2  # not the reference (ratio 1), not the one-process row
    assert level["sampled"] == pytest.approx(0.02588, rel=1e-3)
    assert level["run_sd"] == pytest.approx(0.06652, rel=1e-3)
    # intervals wider than the moves: they sample all of it, nothing run-level is left
    wide = run_level("prefill", old, _level_table([(0.501, 0.6, 4), (0.8, 0.9, 4)]))
    assert wide["sampled"] > 1 and wide["run_sd"] == 0
    # versions made before rows said their processes: nothing to say
    bare = _level_table([(0.5, 0.525, 4)])
    bare = type(bare)(bare.frame.drop(columns="workers"), bare.nonfinite)
    assert run_level("prefill", bare, new) == {"points": 0, "sampled": None, "run_sd": None,
                                               "included": None}
    # a newer version whose intervals carry a run-level sd: the median of its rows'
    carrying = type(new)(new.frame.assign(ratio_run_sd=[0.02, 0.03, None, None]), new.nonfinite)
    assert run_level("prefill", old, carrying)["included"] == pytest.approx(0.025)
    assert level["included"] is None


def test_run_level_sd_recovers_a_simulated_run_effect():
    """The harness's own intervals (``process_interval``) over simulated processes: with a
    run-level effect of sd 2 % the estimate comes back near 2 %, and without one near 0.
    Each process's median of 3 rounds of sd 3 % has a variance of about 1.35 · 0.03² / 3,
    so a run's mean over 4 of them 1.0e-4: the intervals sample 2.0e-4 of the 1.0e-3 a
    point moves with the run effect (a fifth), and all of it without."""
    from inferlab.measurement.intervals import process_interval
    from inferlab.presentation.report_tables import run_level

    def run(rng, run_sd):
        points = []
        for _ in range(300):
            shift = rng.gauss(0, run_sd)
            groups = [[math.exp(math.log(0.6) + shift + rng.gauss(0, 0.03)) for _ in range(3)]
                      for _ in range(4)]
            centre, _, high = process_interval(groups)
            points.append((centre, high, 4))
        return _level_table(points)

    rng = random.Random(11)
    with_effect = run_level("prefill", run(rng, 0.02), run(rng, 0.02))
    assert with_effect["run_sd"] == pytest.approx(0.02, abs=0.004)
    assert 0.12 < with_effect["sampled"] < 0.3
    without = run_level("prefill", run(rng, 0.0), run(rng, 0.0))
    assert without["run_sd"] < 0.005 and without["sampled"] > 0.8
