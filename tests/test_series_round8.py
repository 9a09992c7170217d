"""Round eight's attacks on the series stage (docs/attacks.md, R8-7 to R8-11): each test
reproduces a fault found in ffcc4e4 and failed there."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.history import trusted_versions
from inferlab.evidence.provenance import write_artifact
from inferlab.evidence.register import Register
from inferlab.judging.claims import load
from inferlab.stages import series
from tests.series_helper import series_rows
from tests.test_series_attacks import (
    HERE,
    KEY,
    _commit,
    _decode,
    _pooled,
    _prefill,
    _series,
    _write,
)

OTHER = "cpu-test-series-other-1c"  # a machine of the same kind: its series is the prior


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(layout.REPO_ROOT / "config.yaml", root / "config.yaml")
    (root / "stage_code.py").write_text("# the code that ran\n")
    return root


def _other(root: Path, content: bytes) -> dict:
    return write_artifact(root, OTHER, "prefill", content, config={"series": 1},
                          code_files=[root / "stage_code.py"], inputs=[], seed=0, command="x",
                          environment=HERE)


def _rows(content: bytes) -> list[dict]:
    rows = artifacts.decode("prefill", content).frame.to_dict(orient="records")
    return [{k: (None if v != v else v) for k, v in r.items()} for r in rows]


def _stopped_at(T: int, shift: float) -> bytes:
    rows = _rows(_prefill(shift))
    for r in rows:
        if r["T"] == T:
            r.update(status="stopped", cause="step_limit", median_ms=None, ci_low_ms=None,
                     ci_high_ms=None, ratio=None, ratio_ci_low=None, ratio_ci_high=None)
    return artifacts.encode("prefill", rows)


def test_two_runs_that_share_no_point_borrow_the_prior_not_zero(tmp_path):
    """R8-7: run 1 measured only 1,024 tokens, run 2 only 2,048. No point has two runs, so
    the series has no run-level estimate of its own; it asked no prior (two runs) and its
    intervals fell to the processes' alone (±0.9 % where one run had ±14 %)."""
    root = _root(tmp_path)
    for shift in (0.01, 0.11, -0.09):
        _other(root, _prefill(shift))
    for s in (0.0, 0.05):
        _write(root, "decode", _decode(s))
    _write(root, "prefill", _stopped_at(2048, 0.0))
    _write(root, "prefill", _stopped_at(1024, 0.1))
    _commit(root)
    rc, said, rows = _series(root)
    assert rc == 0, said
    tiled = [r for r in _pooled(rows) if r["impl"] == "tiled"]
    assert [r["runs"] for r in tiled] == [1, 1]
    for r in tiled:
        assert r["run_sd_origin"] == "prior" and OTHER in r["prior_source"]
        assert r["ratio_run_sd"] > 0.01
        assert r["ratio_ci_high"] / r["ratio_ci_low"] > 1.1, r
    assert "prefill: 2 run(s)" in said and "(prior)" in said


def test_a_series_with_no_estimate_and_no_prior_says_so(tmp_path):
    """R8-7: with nothing known of the runs' variance the log printed 'ratio 0.0% (none)'
    as if it were measured; its 'unknown' branch could never print."""
    root = _root(tmp_path)
    _write(root, "decode", _decode(0.0))
    _write(root, "prefill", _prefill(0.0))
    _commit(root)
    rc, said, rows = _series(root)
    assert rc == 0, said
    assert "0.0% (none)" not in said
    assert "ratio unknown (no series of its own, no prior of its kind: process-level " \
        "intervals only)" in said
    assert all(r["run_sd_origin"] == "none" and r["ratio_run_sd"] is None
               for r in _pooled(rows) if r["impl"] == "tiled")


def test_a_prior_counts_an_artifact_registered_twice_once(tmp_path):
    """R8-8: prior_of grouped every anchored version, so the same bytes registered again
    were two runs of the prior (its sd 0.0706 df 2 became 0.0499 df 6)."""
    root = _root(tmp_path)
    _write(root, "prefill", _prefill(0.0))
    for shift in (0.0, 0.1, -0.1):
        _other(root, _prefill(shift))
    _commit(root)

    def prior():
        latest = trusted_versions(root, KEY, "prefill").found[-1:]
        return series.prior_of(root, KEY, "prefill", latest)[0]["ratio"]
    before = prior()
    register = Register(root, OTHER)
    again = register.copy_path(register.entry("prefill", 3)["sha256"]).read_bytes()
    _other(root, again)
    _other(root, again)
    _commit(root)
    after = prior()
    assert (after.var, after.df) == (before.var, before.df)


@pytest.mark.parametrize("bad", [1e200, math.inf, 1e10, 1e3])
def test_a_process_sd_no_clock_measures_leaves_its_version_out_by_name(bad, tmp_path):
    """R8-9: the process sd columns were not checked: 1e200 overflowed, inf divided by
    zero, 1e10 was refused blaming the ratios, and 1e3 passed, every prefill ratio interval
    then about [3e-129, 1e129]."""
    root = _root(tmp_path)
    for i, shift in enumerate((0.0, 0.03, -0.02)):
        rows = _rows(_prefill(shift))
        for r in rows:
            r["ratio_process_sd"] = 0.02 if r["impl"] == "tiled" else None
            r["process_sd"] = 0.02
        if i == 1:
            rows[1]["ratio_process_sd"] = bad
        _write(root, "prefill", artifacts.encode("prefill", rows))
        _write(root, "decode", _decode(shift))
    _commit(root)
    rc, said, rows = _series(root)
    assert rc == 0, said
    assert f"{KEY} prefill v2: ratio_process_sd=" in said and "in an ok row" in said
    tiled = [r for r in _pooled(rows) if r["impl"] == "tiled"]
    assert all(r["runs"] == 2 and r["ratio_ci_high"] < 3 for r in tiled), tiled


def _table(shift: float) -> list[dict]:
    rows = []
    for impl, f in (("naive", 1.0), ("tiled", 0.5)):
        for T in (1024, 2048):
            ms = 10.0 * f * T / 1024 * (1 + shift)
            rows.append({"impl": impl, "fused_sdpa": False, "T": T, "batch": 1, "heads": 12,
                         "d": 64, "dtype": "float32", "causal": True, "block_q": 128,
                         "block_k": 128, "threads": 1, "flops": 1, "status": "ok",
                         "workers": 2, "median_ms": ms, "ci_low_ms": ms * .97,
                         "ci_high_ms": ms * 1.03, "ratio_to": "naive",
                         "ratio": f * (1 + shift / 3), "ratio_ci_low": f * .97,
                         "ratio_ci_high": f * 1.03, "process_sd": 0.02,
                         "ratio_process_sd": 0.0 if impl == "naive" else 0.02})
    return rows


def test_the_latest_runs_failure_is_the_points_evidence(tmp_path):
    """R8-10: the latest run's tiled 2,048 was inexact (error), but the pooled row said
    ok from the earlier runs, and no row carried the error: a failed row inside the scope
    is evidence (DESIGN), not a point to fill in. A point the latest run did not reach
    (dropped, stopped) is still judged from the earlier runs."""
    new = _table(0.03)
    bad = next(r for r in new if r["impl"] == "tiled" and r["T"] == 2048)
    for c in ("median_ms", "ci_low_ms", "ci_high_ms", "ratio", "ratio_ci_low",
              "ratio_ci_high", "workers", "process_sd", "ratio_process_sd"):
        bad[c] = None
    bad.update(status="error", cause="inexact", max_error=0.5, error_bound=1e-3)
    rows = series_rows(prefill=[_table(0.0), _table(0.01), new])
    pooled = next(r for r in rows if r["kind"] == "pooled" and r["impl"] == "tiled"
                  and r["T"] == 2048)
    assert (pooled["status"], pooled["cause"], pooled["in_latest"]) == \
        ("error", "inexact", False)
    assert pooled.get("ratio") is None
    bad.update(status="dropped", cause="budget", max_error=None, error_bound=None)
    rows = series_rows(prefill=[_table(0.0), _table(0.01), new])
    pooled = next(r for r in rows if r["kind"] == "pooled" and r["impl"] == "tiled"
                  and r["T"] == 2048)
    assert (pooled["status"], pooled["runs"], pooled["in_latest"]) == ("ok", 2, False)


@pytest.mark.parametrize("column", ["median_ms_diff", "ratio_old", "ratio_new"])
def test_a_between_run_column_the_series_does_not_have_is_refused_at_load(column, tmp_path):
    """R8-11: claims.yaml documented <c>_old, _new, _diff for between-run checks; the
    loader accepted them and the claims stage then died on a KeyError."""
    text = (layout.REPO_ROOT / "claims.yaml").read_text(encoding="utf-8")
    old = "value: {column: median_ms_spread, stat: max}"
    assert old in text
    path = tmp_path / "claims.yaml"
    path.write_text(text.replace(old, f"value: {{column: {column}, stat: max}}"))
    with pytest.raises(ValueError, match=column):
        load(path)


def test_runs_made_with_another_torch_or_blas_are_not_alike():
    """R8-12: made_alike compared CPU, ISA, threads and GPU only: torch 2.13 with MKL and
    torch 2.5 with OpenBLAS pooled as one series."""
    def entry(**build):
        env = {**HERE, "build": {**HERE["build"], **build}}
        return {"provenance": {"code_sha256": "c", "config_sha256": "k", "environment": env}}
    assert series.made_alike(entry(), entry())
    assert not series.made_alike(entry(), entry(torch="2.5.1", blas_info="openblas"))
    assert not series.made_alike(entry(), entry(torch_git_version="0" * 40))


def test_the_coverage_benchmark_names_a_key_it_does_not_hold():
    """R8-22: benchmarks/series_coverage.py printed an empty table with exit 0 for a key
    with no register (the README's example named such a key)."""
    import subprocess
    import sys

    readme = (layout.REPO_ROOT / "README.md").read_text(encoding="utf-8")
    example = next(line for line in readme.splitlines() if "series_coverage.py --key" in line)
    key = example.split("--key", 1)[1].split()[0]
    assert (layout.REPO_ROOT / "evidence" / key / "register.jsonl").is_file()
    done = subprocess.run([sys.executable, "benchmarks/series_coverage.py", "--key", "no-such",
                           "--k", "1"], cwd=layout.REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "no evidence/no-such/register.jsonl" in done.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["--key", "no-such"], "no evidence/no-such/register.jsonl"),
    (["--key", "cpu-amd-epyc-avx512bf16-2c", "--runs", "3"], "--runs [3]: give the base"),
])
def test_the_verdict_stability_benchmark_refuses_what_it_cannot_compare(args, words):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "benchmarks/verdict_stability.py", *args],
                          cwd=layout.REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and words in done.stderr


def test_the_benchmarks_half_width_is_the_series_stages_and_leaves_out_a_kernels_own_ratio():
    """The README's half-width (round nine): it counted each kernel's ratio to itself, 1 with
    zero width, which narrowed prefill's median from 3.6 % to 3.2 %. The benchmark re-pools
    the committed runs; the series stage's own rows, read from series.csv, must agree."""
    import importlib.util
    import statistics

    import pandas as pd

    spec = importlib.util.spec_from_file_location(
        "series_coverage", layout.REPO_ROOT / "benchmarks" / "series_coverage.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    key = "cpu-amd-epyc-avx512bf16-2c"
    table = pd.read_csv(layout.REPO_ROOT / "results" / key / "series.csv")
    for stage in series.TIMED:
        rows = table[table.stage == stage]
        wanted = {int(v) for v in rows[rows.kind == "run"].version.dropna().unique()}
        pooled = rows[(rows.kind == "pooled") & (rows.status == "ok")
                      & rows.ratio_ci_low.notna()]
        others = pooled[pooled.ratio_to != pooled.impl]
        assert len(others) < len(pooled)  # the reference's own rows exist and are left out
        expected = statistics.median(
            (others.ratio_ci_high - others.ratio_ci_low) / 2 / others.ratio)
        [(runs, n, median)] = bench.half_widths(layout.REPO_ROOT, key, stage, wanted)
        assert (runs, n) == (len(wanted), len(others))
        assert math.isclose(median, expected, rel_tol=1e-9)


def test_a_ratio_says_how_many_runs_it_rests_on():
    """Round nine: the pooled row's ``runs`` counts the runs that measured the point, but a
    ratio needs its reference measured in the same run: naive's 2,048 dropped in one run of
    three leaves tiled's ratio resting on two runs, and the row said 3."""
    new = _table(0.03)
    ref = next(r for r in new if r["impl"] == "naive" and r["T"] == 2048)
    for c in ("median_ms", "ci_low_ms", "ci_high_ms", "ratio", "ratio_ci_low",
              "ratio_ci_high", "workers", "process_sd", "ratio_process_sd"):
        ref[c] = None
    ref.update(status="dropped", cause="budget")
    for r in new:
        if r["impl"] != "naive" and r["T"] == 2048:  # no reference timed: no paired ratio
            r.update(ratio=None, ratio_ci_low=None, ratio_ci_high=None, ratio_process_sd=None)
    rows = series_rows(prefill=[_table(0.0), _table(0.01), new])
    tiled = next(r for r in rows if r["kind"] == "pooled" and r["impl"] == "tiled"
                 and r["T"] == 2048)
    assert (tiled["runs"], tiled["ratio_runs"]) == (3, 2)
    other = next(r for r in rows if r["kind"] == "pooled" and r["impl"] == "tiled"
                 and r["T"] == 1024)
    assert (other["runs"], other["ratio_runs"]) == (3, 3)
    runs = [r for r in rows if r["kind"] == "run" and r["impl"] == "tiled" and r["T"] == 2048]
    assert sorted(r.get("ratio_runs") or 0 for r in runs) == [0, 1, 1]
