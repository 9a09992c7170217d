"""The run-level variance in a paired ratio's interval: what a whole run shares and no
process inside it samples, estimated from the register's pairs of runs made alike."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest

from inferlab.measurement.intervals import (
    pooled_run_variance,
    process_interval,
    process_var,
    run_variance,
    with_run_level,
)
from inferlab.stages import common

T3 = 3.182  # t(3), 97.5 %


def _groups(rng: random.Random, n: int = 4) -> list[list[float]]:
    return [[rng.uniform(0.5, 0.6) for _ in range(3)] for _ in range(n)]


def test_without_a_run_level_term_the_interval_is_the_processes_own():
    centre, low, high = process_interval(_groups(random.Random(1)))
    got_low, got_high, s = with_run_level(centre, high, 4, 0.0)
    assert (got_low, got_high) == pytest.approx((low, high), rel=1e-12)
    # s is the sd of the log process medians: h = t(3) · s · √(2/4)
    assert s == pytest.approx(math.log(high / centre) / T3 / math.sqrt(0.5))


def test_the_run_level_term_widens_by_both_runs_share_with_satterthwaite_df():
    # s = 0.02 over 4 processes: 2s²/W = 2e-4; a run-level sd of 0.03: 2 · 9e-4 = 1.8e-3;
    # df = 3 · (2e-3)² / (2e-4)² = 300 -> t = 1.96; half = 1.96 · √2e-3 = 0.08765
    centre = 0.8
    high = centre * math.exp(T3 * 0.02 * math.sqrt(0.5))
    low, wide_high, s = with_run_level(centre, high, 4, 0.03 ** 2)
    assert s == pytest.approx(0.02, rel=1e-3)
    assert math.log(wide_high / centre) == pytest.approx(0.08765, rel=1e-3)
    assert math.log(centre / low) == pytest.approx(0.08765, rel=1e-3)
    # with few processes and little run-level variance, df stays small: s = 0.05, run sd
    # 0.01: A = 1.25e-3, B = 2e-4, df = 3 · 1.45² / 1.25² = 4.04 -> t(4) = 2.776
    high = centre * math.exp(T3 * 0.05 * math.sqrt(0.5))
    _, wide_high, _ = with_run_level(centre, high, 4, 0.01 ** 2)
    assert math.log(wide_high / centre) == pytest.approx(2.776 * math.sqrt(1.45e-3), rel=1e-3)


def test_one_process_or_a_case_against_itself_gets_no_run_level_term():
    assert with_run_level(0.5, 0.6, 1, 0.01) is None   # one process: no process variance
    assert with_run_level(0.5, None, 4, 0.01) is None  # no interval
    assert process_var(0.5, 0.4, 4) is None            # an interval below its centre
    # identical processes: no process variance, the run-level term alone (df infinite)
    low, high, s = with_run_level(0.5, 0.5, 4, 0.01 ** 2)
    assert s == 0 and math.log(high / 0.5) == pytest.approx(1.96 * math.sqrt(2e-4))


def test_process_var_prefers_the_recorded_sd_over_backing_it_out():
    # an interval that includes a run-level term cannot be backed out: the row's sd is used
    assert process_var(0.5, 0.9, 4, process_sd=0.02) == pytest.approx(0.02 ** 2 / 4)
    assert process_var(0.5, 0.5 * math.exp(T3 * 0.02 * math.sqrt(0.5)), 4) == \
        pytest.approx(0.02 ** 2 / 4, rel=1e-3)


def test_run_variance_is_the_moves_beyond_the_intervals_over_both_runs():
    # d² 0.01 and 0.03, intervals allot 0.002 and 0.006: (0.032) / (2 · 2) = 0.008
    assert run_variance([(0.01, 0.002), (0.03, 0.006)]) == pytest.approx(0.008)
    assert run_variance([(0.001, 0.004)]) == 0  # the intervals allow for more than moved
    assert run_variance([]) is None


def test_a_noisy_pair_does_not_cancel_what_the_others_measured():
    # pairs measuring 0.008 and (0.01 - 0.002) / 2 = 0.004; a third whose processes allotted
    # more than it moved counts as 0, not as -0.1 against the others; one without points
    # is left out
    pairs = [[(0.01, 0.002), (0.03, 0.006)], [(0.01, 0.002)], [(0.01, 0.21)], []]
    assert pooled_run_variance(pairs) == pytest.approx((0.008 + 0.004 + 0) / 3)
    assert pooled_run_variance([[], []]) is None


def _row(**kw) -> dict:
    return {"impl": "tiled", "ratio_to": "naive", "status": "ok", "workers": 4,
            "interval_method": "prediction for another run: random effects", **kw}


def test_every_timing_row_gets_the_columns_and_paired_ratios_get_the_term():
    centre = 0.7
    high = centre * math.exp(T3 * 0.02 * math.sqrt(0.5))
    rows = [_row(ratio=centre, ratio_ci_low=centre ** 2 / high, ratio_ci_high=high),
            _row(impl="naive", ratio=1.0, ratio_ci_low=1.0, ratio_ci_high=1.0),
            _row(workers=1, ratio=0.4, ratio_ci_low=0.3, ratio_ci_high=0.5),
            {"impl": "tiled", "status": "dropped: budget", "ratio": None}]
    level = {"var": 0.03 ** 2, "pairs": [{"old": {"version": 3}, "new": {"version": 4}},
                                         {"old": {"version": 5}, "new": {"version": 6}}]}
    paired, reference, single, dropped = common.with_run_level(rows, level)
    assert paired["ratio_run_sd"] == pytest.approx(0.03)
    assert paired["ratio_process_sd"] == pytest.approx(0.02, rel=1e-3)
    assert math.log(paired["ratio_ci_high"] / centre) == pytest.approx(0.08765, rel=1e-3)
    assert "run-level sd of 3.00%" in paired["interval_method"]
    assert "pairs of runs 3→4, 5→6" in paired["interval_method"]
    for row in (reference, single, dropped):  # unchanged, but for the two empty columns
        before = next(r for r in rows if r["impl"] == row["impl"] and r["status"] == row["status"]
                      and r.get("workers") == row.get("workers"))
        assert row == {**before, "ratio_process_sd": None, "ratio_run_sd": None}
    assert rows[0]["ratio_ci_high"] == high  # the rows handed in are not changed


def test_without_pairs_in_the_register_the_row_says_so_and_keeps_its_interval():
    centre, high = 0.7, 0.75
    row, = common.with_run_level([_row(ratio=centre, ratio_ci_low=0.65, ratio_ci_high=high)],
                                 {"var": None, "pairs": []})
    assert (row["ratio_ci_low"], row["ratio_ci_high"], row["ratio_run_sd"]) == (0.65, high, None)
    assert row["ratio_process_sd"] > 0
    assert "no run-level variance in its interval" in row["interval_method"]
    assert common.with_run_level([_row(ratio=centre, ratio_ci_high=high)], None)[0][
        "ratio_run_sd"] is None


def test_the_runner_hands_a_timing_stage_the_run_level_of_its_earlier_pairs(tmp_path):
    """Two decode versions made alike (the second's ratios 10 % up) are the pair the third
    run's intervals learn from: the runner computes it from the register, the stage widens
    its paired ratios by it and says which pair it came from."""
    from test_claims import probe_json, write_stage
    from test_stages import TIMING

    from inferlab.core import layout
    from inferlab.core.pipeline import bookkeeping_files, code_files
    from inferlab.evidence import artifacts
    from inferlab.evidence.compare import run_level_of
    from inferlab.evidence.provenance import write_artifact
    from inferlab.workflow.config import effective_config, load_config
    from inferlab.workflow.runner import Job, run_job

    for top in {Path(f).parts[0] for f in code_files("decode") + bookkeeping_files("decode")}:
        (tmp_path / top).symlink_to(layout.REPO_ROOT / top)  # the code the sidecars hash
    key = "cpu-runlevel-1c"
    probe = probe_json("cpu", [{"dtype": "float32", "backend": "flash"}])
    probe["ceilings"]["matmul_gflops"] = {"float32": 100.0}
    write_stage(tmp_path, key, "probe", probe, "cpu")
    write_stage(tmp_path, key, "probe", probe, "cpu")  # two probes made alike: no ratios
    assert run_level_of(tmp_path, key, "probe") == (None, [])
    config = effective_config(load_config(overrides=[
        "device=cpu", "seed=5", TIMING, "decode.d=8", "decode.splits=[1, 3]",
        "decode.backends=[flash, math]",
        "decode.cpu={heads: 2, cache_lens: [200], batches: [1], dtypes: [float32]}"]),
        "decode", "cpu")
    path = layout.artifact_path(tmp_path, key, "decode")
    job = Job(stage="decode", root=tmp_path, key=key, config=config,
              inputs={"probe": layout.artifact_path(tmp_path, key, "probe")}, output=path,
              threads=1, command="x")
    lines: list[str] = []
    first = run_job(job, log=lines.append)["version"]
    assert any("run-level sd of the paired ratios: none known" in line for line in lines)

    def paired():
        rows = artifacts.decode("decode", path.read_bytes()).frame
        return rows, rows[(rows["status"] == "ok") & (rows["ratio_to"] != rows["impl"])]

    rows, ok = paired()
    assert len(ok) and ok["ratio_run_sd"].isna().all() and (ok["ratio_process_sd"] >= 0).all()
    # both versions' points moved ln 1.1, each allotted s²/W by both runs (the same s: the
    # second is the first moved)
    moves = [(math.log(1.1) ** 2, 2 * sd ** 2 / w)
             for sd, w in zip(ok["ratio_process_sd"], ok["workers"], strict=True)]
    expected = math.sqrt(max(0.0, sum(d2 - v for d2, v in moves)) / (2 * len(moves)))
    assert expected > 0
    moved = [{**r, "ratio": None if r["ratio"] is None else r["ratio"] * 1.1}
             for r in _cells_of(rows)]
    environment = json.loads(Path(f"{path}.prov.json").read_text())["provenance"]["environment"]
    write_artifact(tmp_path, key, "decode", artifacts.encode("decode", moved), config=config,
                   code_files=[tmp_path / f for f in code_files("decode")],
                   bookkeeping_files=[tmp_path / f for f in bookkeeping_files("decode")],
                   inputs=[job.inputs["probe"]], seed=5, command="x", environment=environment,
                   schema_version=artifacts.schema_version("decode"))
    lines.clear()
    assert run_job(job, log=lines.append)["version"] == first + 2
    said = next(line for line in lines if "run-level sd of the paired ratios" in line)
    assert said.endswith(f"pairs of runs {first}→{first + 1}")
    _, ok = paired()
    assert ok["ratio_run_sd"].tolist() == pytest.approx([expected] * len(ok))
    assert ok["interval_method"].str.contains(
        f"from the register's pairs of runs {first}→{first + 1}").all()


def _cells_of(frame) -> list[dict]:
    return [{k: None if pd.isna(v) else v for k, v in r.items()}
            for r in frame.to_dict(orient="records")]
