"""The series stage (``stages.series``) over a register of real prefill and decode tables:
which runs are made alike and pooled, which are left out and why, and what a prior from
the series of machines of the same kind adds. The statistics themselves are
``tests/test_pooling.py``'s.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.history import kept_versions
from inferlab.evidence.register import Register, write_artifact
from inferlab.judging.claims import load
from inferlab.measurement.environment import fingerprint
from inferlab.stages import series
from inferlab.workflow.cli import main as cli_main
from inferlab.workflow.config import deep_merge, load_config, validate_config
from tests.series_helper import series_rows

KEY = "cpu-test-series-1c"
OTHER = "cpu-test-series-other-1c"  # a machine of the same kind: its series is the prior
HERE = fingerprint("cpu", collect_env=False)
ELSEWHERE = {**HERE, "host": {**HERE["host"], "cpu_model": "Another CPU (a host of another id)"}}
REPO = layout.REPO_ROOT


def _prefill(shift: float, bad: float | None = None, common: float = 0.0,
             points: int = 2) -> bytes:
    """``points`` lengths of naive and tiled (tiled's ratio to naive), a run ``shift`` apart
    in log time; ``common`` moves the ratios of the whole run (a run-level effect)."""
    rows = []
    for i in range(points):
        T = 1024 * (i + 1)
        base = {"fused_sdpa": False, "T": T, "batch": 1, "heads": 12, "d": 64,
                "dtype": "float32", "causal": True, "block_q": 128, "block_k": 128,
                "threads": 1, "flops": 1, "status": "ok", "workers": 3}
        naive = T / 100 * math.exp(shift)
        wiggle = 0.01 * math.sin(7 * i + 13 * shift)  # the points move apart a little
        ratio = 2.0 * math.exp(shift / 2 + common + wiggle) if bad is None or i else bad
        rows += [{**base, "impl": "naive", "median_ms": naive, "ci_low_ms": naive * 0.98,
                  "ci_high_ms": naive * 1.02},
                 {**base, "impl": "tiled", "median_ms": naive / 2, "ci_low_ms": naive * 0.49,
                  "ci_high_ms": naive * 0.51, "ratio": ratio, "ratio_ci_low": ratio * 0.98,
                  "ratio_ci_high": ratio * 1.02, "ratio_to": "naive"}]
    return artifacts.encode("prefill", rows)


def _decode(shift: float) -> bytes:
    t = 1.0 * math.exp(shift)
    return artifacts.encode("decode", [{
        "impl": "sdpa_flash", "fused_sdpa": True, "cache_len": 1024, "batch": 1, "heads": 12,
        "d": 64, "dtype": "float32", "splits": 1, "status": "ok", "workers": 3,
        "cache_bytes": 3 * 2 ** 20, "median_ms": t, "ci_low_ms": t * 0.98,
        "ci_high_ms": t * 1.02}])


def _write(root: Path, stage: str, content: bytes, environment: dict = HERE, key: str = KEY,
           code: str = "# the code that ran\n", config: dict | None = None) -> dict:
    path = root / "stage_code.py"
    path.write_text(code)
    return write_artifact(root, key, stage, content, config=config or {"series": "alike"},
                          code_files=[path], inputs=[], seed=0,
                          command=f"python -m inferlab stage {stage}", environment=environment)


@pytest.fixture
def root(tmp_path) -> Path:
    """Three runs of prefill and of decode, made alike."""
    root = tmp_path / "repo"
    root.mkdir()
    for shift in (0.0, 0.03, -0.02):
        _write(root, "prefill", _prefill(shift))
        _write(root, "decode", _decode(shift))
    return root


def _series(root: Path, max_runs: int = 8, prefill: dict | None = None
            ) -> tuple[int, str, list[dict]]:
    """The series stage on ``root``: 0 or 2 (refused), its log and error, its rows."""
    register, lines = Register(root, KEY), []
    try:
        evidence = {s: SimpleNamespace(entry=register.latest(s)) for s in ("prefill", "decode")}
        if prefill is not None:
            evidence["prefill"] = SimpleNamespace(entry=prefill)
        ctx = SimpleNamespace(root=root, key=KEY, evidence=evidence, log=lines.append)
        rows = series.run(series.Params(max_runs=max_runs), ctx)
    except ValueError as exc:
        return 2, "\n".join([*lines, str(exc)]), []
    return 0, "\n".join(lines), rows


def _pooled(rows: list[dict], stage: str = "prefill") -> list[dict]:
    return [r for r in rows if r["kind"] == "pooled" and r["stage"] == stage]


def _tiled(rows: list[dict], T: int = 1024) -> dict:
    return next(r for r in _pooled(rows) if r["impl"] == "tiled" and r["T"] == T)


def _runs(rows: list[dict], stage: str = "prefill") -> set[int]:
    return {r["version"] for r in rows if r["kind"] == "run" and r["stage"] == stage}


# ------------------------------------------------------------------ runs made alike


def test_the_series_pools_the_runs_made_alike_and_shows_each(root):
    rc, said, rows = _series(root)
    assert rc == 0, said
    assert _runs(rows) == {1, 2, 3} and _tiled(rows)["runs"] == 3
    assert _tiled(rows)["run_sd_origin"] == "series"
    assert "prefill: 3 run(s) v1,2,3" in said


@pytest.mark.parametrize("change", ["code", "config", "hardware", "threads", "torch"])
def test_a_run_made_otherwise_starts_a_series_of_its_own(root, change):
    """"Made alike": the same code, effective config, hardware with torch's threads and
    torch's build. A run made otherwise is the latest, alone: the runs before it are
    another series, never pooled with it."""
    env = {**HERE, "host": {**HERE["host"]}, "build": {**HERE["build"]}}
    kwargs = {}
    if change == "code":
        kwargs["code"] = "# the code, edited\n"
    elif change == "config":
        kwargs["config"] = {"series": "another grid"}
    elif change == "hardware":
        env = ELSEWHERE
    elif change == "threads":
        env["host"]["torch_threads"] = (HERE["host"].get("torch_threads") or 1) + 1
    else:
        env["build"]["torch"] = "2.5.1"
    _write(root, "prefill", _prefill(0.5), environment=env, **kwargs)
    rc, said, rows = _series(root)
    assert rc == 0, said
    assert _runs(rows) == {4} and _tiled(rows)["runs"] == 1
    if change == "hardware":
        assert f"prefill: 3 versions of {KEY!r} were made on other hardware" in said


def test_made_alike_compares_code_config_hardware_threads_and_build():
    def entry(code="c", config="k", **build):
        env = {**HERE, "build": {**HERE["build"], **build}}
        return {"provenance": {"code_sha256": code, "config_sha256": config,
                               "environment": env}}
    assert series.made_alike(entry(), entry())
    assert not series.made_alike(entry(), entry(code="other"))
    assert not series.made_alike(entry(), entry(config="other"))
    assert not series.made_alike(entry(), entry(torch="2.5.1", blas_info="openblas"))
    assert not series.made_alike(entry(), entry(torch_git_version="0" * 40))


def test_max_runs_keeps_the_latest_runs_only(root):
    rc, _, rows = _series(root, max_runs=2)
    assert rc == 0 and {r["runs"] for r in _pooled(rows)} == {2} and _runs(rows) == {2, 3}


def test_a_version_newer_than_the_latest_input_is_not_pooled(root):
    """A series is of the runs up to its input: a later version (registered after the
    input was read, by a stage run beside it) never joins it."""
    latest = Register(root, KEY).latest("prefill")
    _write(root, "prefill", _prefill(0.2))
    rc, _, rows = _series(root, prefill=latest)
    assert rc == 0 and _runs(rows) == {1, 2, 3}


def test_one_artifact_registered_twice_is_one_run(root):
    """The same bytes registered again are one measurement, which pooled as two runs would
    count twice and narrow every interval."""
    register = Register(root, KEY)
    _write(root, "prefill", register.read_copy(register.entry("prefill", 3)))
    rc, said, rows = _series(root)
    assert rc == 0 and {r["runs"] for r in _pooled(rows)} == {3}, said
    assert "prefill v3: the same artifact as v4" in said


@pytest.mark.parametrize("value", [0, -1, "3", 2.5, None])
def test_a_max_runs_that_is_no_count_of_runs_is_named(value):
    with pytest.raises(ValueError, match=r"series\.max_runs"):
        validate_config(deep_merge(load_config([]), {"series": {"max_runs": value}}))


# ------------------------------------------------------------------ what is left out, and why


def test_an_edited_kept_version_is_left_out_and_named(root):
    kept = root / f"evidence/{KEY}/prefill/v1.csv"
    kept.write_bytes(_prefill(0.0, bad=40.0))  # the run-level sd it would have raised
    found = kept_versions(root, KEY, "prefill")
    assert [v.entry["version"] for v in found.found] == [2, 3]
    rc, said, rows = _series(root)
    assert rc == 0 and f"left out: {KEY} prefill v1: " in said and "changed after" in said
    assert _tiled(rows)["runs"] == 2 and _tiled(rows)["ratio_pi_high"] < 3


@pytest.mark.parametrize(("bad", "said"), [
    (math.inf, "ratio=inf in an ok row: not a time or ratio"),
    (0.0, "ratio=0.0 in an ok row: not a time or ratio"),
    (1e300, "ratio=1e+300 in an ok row: outside [1e-16, 1e+16], which no clock measures"),
])
def test_a_value_no_clock_measures_leaves_its_version_out(tmp_path, bad, said):
    _write(tmp_path, "prefill", _prefill(0.0))
    _write(tmp_path, "prefill", _prefill(0.01, bad=bad))  # the table's encoder takes them all
    found = kept_versions(tmp_path, KEY, "prefill")
    assert [v.entry["version"] for v in found.found] == [1]
    assert found.left_out == [f"{KEY} prefill v2: {said}"]


@pytest.mark.parametrize("bad", [1e200, math.inf, 1e3])
def test_a_process_sd_no_timing_gives_leaves_its_version_out(tmp_path, bad):
    for i, shift in enumerate((0.0, 0.03, -0.02)):
        rows = _rows(_prefill(shift))
        for r in rows:
            r["ratio_process_sd"] = 0.02 if r["impl"] == "tiled" else None
            r["process_sd"] = 0.02
        if i == 1:
            rows[1]["ratio_process_sd"] = bad
        _write(tmp_path, "prefill", artifacts.encode("prefill", rows))
        _write(tmp_path, "decode", _decode(shift))
    rc, said, rows = _series(tmp_path)
    assert rc == 0 and f"{KEY} prefill v2: ratio_process_sd=" in said, said
    assert all(r["runs"] == 2 and r["ratio_ci_high"] < 3
               for r in _pooled(rows) if r["impl"] == "tiled")


def test_a_nan_ratio_is_no_value_and_narrows_nothing(root):
    _write(root, "prefill", _prefill(0.01, bad=math.nan))
    rc, _, rows = _series(root)
    runs = {r["version"]: r.get("ratio") for r in rows if r["kind"] == "run"
            and r["stage"] == "prefill" and r["impl"] == "tiled" and r["T"] == 1024}
    assert rc == 0 and set(runs) == {1, 2, 3, 4} and runs[4] is None
    row = _tiled(rows)
    assert row["ratio_run_sd"] > 0 and row["ratio_ci_low"] < row["ratio"] < row["ratio_ci_high"]


def test_an_unreadable_register_line_is_named_with_the_fix(root):
    path = layout.register_path(root, KEY)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\n{garbage\n", 1))
    rc, said, _ = _series(root)
    assert rc == 2 and "register.jsonl line 2 is not a register entry" in said
    assert "git checkout --" in said
    assert "line 2 is not a register entry" in kept_versions(root, KEY, "prefill").left_out[0]


def test_an_extreme_value_is_named_where_it_widens_every_interval(root):
    """A run with an extreme but plausible value widens the run-level sd of every point:
    the statistics keep it (leaving such points out cost coverage, pooling.py) and name it."""
    rows = _rows(_prefill(0.01))
    for r in rows:
        if r["impl"] == "naive" and r["T"] == 1024:
            r["median_ms"] *= 1e6
    _write(root, "prefill", artifacts.encode("prefill", rows))
    rc, said, rows = _series(root)
    named = {(r["impl"], r["T"]): r.get("outlying") for r in _pooled(rows)}
    assert rc == 0 and named[("naive", 1024)] == "median_ms"
    assert [v for k, v in named.items() if k != ("naive", 1024)] == [None] * 3
    assert "widen every point's interval" in said


def test_a_pooling_that_overflows_names_the_point_and_its_runs():
    runs = [artifacts.decode("prefill", _prefill(s, bad=b))
            for s, b in ((0, 1e300), (0.01, None), (0.02, None))]
    with pytest.raises(ValueError, match=r"prefill \(impl=tiled.*T=1024.*1e\+300 \(v1\), "
                                         r"2.01 \(v2\).*beyond floating point"):
        series_rows(prefill=runs)


def test_a_timing_stage_refuses_a_probe_measured_on_other_hardware(tmp_path, capsys):
    probe = REPO / "results" / "cpu-amd-epyc-avx512bf16-2c" / "probe.json"
    (tmp_path / "config.yaml").write_bytes((REPO / "config.yaml").read_bytes())
    _write(tmp_path, "probe", probe.read_bytes(), environment=ELSEWHERE)
    assert cli_main(["stage", "prefill", "--root", str(tmp_path), "--machine", KEY]) == 2
    err = capsys.readouterr().err
    assert f"results/{KEY}/probe.json was measured on other hardware" in err, err
    assert "Another CPU" in err and "--forcerun probe" in err
    assert not layout.artifact_path(tmp_path, KEY, "prefill").exists()


def _rows(content: bytes) -> list[dict]:
    rows = artifacts.decode("prefill", content).frame.to_dict(orient="records")
    return [{k: (None if v != v else v) for k, v in r.items()} for r in rows]


def _drop(row: dict, **status) -> None:
    for c in ("median_ms", "ci_low_ms", "ci_high_ms", "ratio", "ratio_ci_low",
              "ratio_ci_high", "workers", "process_sd", "ratio_process_sd"):
        row[c] = None
    row.update(status)


def _stopped_at(T: int, shift: float) -> bytes:
    rows = _rows(_prefill(shift))
    for r in rows:
        if r["T"] == T:
            _drop(r, status="stopped", cause="step_limit")
    return artifacts.encode("prefill", rows)


def test_the_latest_runs_failure_is_the_points_evidence():
    """A failed row inside the scope is evidence (DESIGN), not a point to fill in from
    earlier runs; a point the latest run did not reach is still judged from them."""
    earlier, new = [_rows(_prefill(0.0)), _rows(_prefill(0.01))], _rows(_prefill(0.03))
    bad = next(r for r in new if r["impl"] == "tiled" and r["T"] == 2048)
    _drop(bad, status="error", cause="inexact", max_error=0.5, error_bound=1e-3)
    pooled = _tiled(series_rows(prefill=[*earlier, new]), 2048)
    assert (pooled["status"], pooled["cause"], pooled["in_latest"]) == ("error", "inexact",
                                                                        False)
    assert pooled.get("ratio") is None
    bad.update(status="dropped", cause="budget", max_error=None, error_bound=None)
    pooled = _tiled(series_rows(prefill=[*earlier, new]), 2048)
    assert (pooled["status"], pooled["runs"], pooled["in_latest"]) == ("ok", 2, False)


def test_a_ratio_says_how_many_runs_it_rests_on():
    """A ratio needs its reference timed in the same run: naive's 2,048 dropped in one run
    of three leaves tiled's ratio resting on two runs."""
    new = _rows(_prefill(0.03))
    _drop(next(r for r in new if r["impl"] == "naive" and r["T"] == 2048), status="dropped",
          cause="budget")
    for r in new:
        if r["impl"] != "naive" and r["T"] == 2048:
            r.update(ratio=None, ratio_ci_low=None, ratio_ci_high=None, ratio_process_sd=None)
    rows = series_rows(prefill=[_rows(_prefill(0.0)), _rows(_prefill(0.01)), new])
    assert (_tiled(rows, 2048)["runs"], _tiled(rows, 2048)["ratio_runs"]) == (3, 2)
    assert (_tiled(rows, 1024)["runs"], _tiled(rows, 1024)["ratio_runs"]) == (3, 3)


# ------------------------------------------------------------------ what a prior adds


def _other_series(root: Path, shifts=(0.01, 0.11, -0.09), common=(0.0, 0.0, 0.0)) -> None:
    for shift, c in zip(shifts, common, strict=True):
        _write(root, "prefill", _prefill(shift, common=c, points=6), key=OTHER)


def test_a_first_run_carries_the_prior_of_its_kind_named(tmp_path):
    _other_series(tmp_path)
    _write(tmp_path, "decode", _decode(0.0))
    _write(tmp_path, "prefill", _prefill(0.0))
    rc, said, rows = _series(tmp_path)
    assert rc == 0, said
    row = _tiled(rows)
    assert row["runs"] == 1 and row["run_sd_origin"] == "prior"
    assert row["prior_source"] == f"{OTHER} prefill v1,2,3"
    assert row["ratio_ci_high"] / row["ratio_ci_low"] > 1.05  # never the processes' alone


def test_two_runs_that_share_no_point_borrow_the_prior_not_zero(tmp_path):
    _other_series(tmp_path)
    for s in (0.0, 0.05):
        _write(tmp_path, "decode", _decode(s))
    _write(tmp_path, "prefill", _stopped_at(2048, 0.0))
    _write(tmp_path, "prefill", _stopped_at(1024, 0.1))
    rc, said, rows = _series(tmp_path)
    assert rc == 0, said
    for r in (r for r in _pooled(rows) if r["impl"] == "tiled"):
        assert r["runs"] == 1 and r["run_sd_origin"] == "prior" and OTHER in r["prior_source"]
        assert r["ratio_run_sd"] > 0.01 and r["ratio_ci_high"] / r["ratio_ci_low"] > 1.1


def test_with_no_estimate_and_no_prior_the_log_says_so(tmp_path):
    _write(tmp_path, "decode", _decode(0.0))
    _write(tmp_path, "prefill", _prefill(0.0))
    rc, said, rows = _series(tmp_path)
    assert rc == 0 and "0.0% (none)" not in said
    assert "ratio unknown (no series of its own, no prior of its kind: process-level " \
        "intervals only)" in said
    assert all(r["run_sd_origin"] == "none" and r["ratio_run_sd"] is None
               for r in _pooled(rows) if r["impl"] == "tiled")


def test_a_series_of_several_runs_takes_the_priors_common_part(tmp_path):
    """What a prior adds to a series of two or more runs (``series.prior_of`` and
    ``pooling.with_prior``): the part of the run-level variance a whole run shares rests
    on the runs, runs - 1 degrees of freedom (2 for three runs: t = 4.3); the prior's
    common part lends it its own, so the same three runs get a narrower interval with a
    prior of the kind than without one, and the row names the prior."""
    for shift, c in ((0.0, 0.0), (0.03, 0.04), (-0.02, -0.03)):
        _write(tmp_path, "prefill", _prefill(shift, common=c, points=6))
        _write(tmp_path, "decode", _decode(shift))
    rc, _, alone = _series(tmp_path)
    assert rc == 0 and _tiled(alone)["prior_source"] is None
    _other_series(tmp_path, shifts=(0.005, 0.02, -0.01, 0.01, 0.03, -0.02),
                  common=(0.0, 0.03, -0.02, 0.01, -0.04, 0.02))
    rc, said, with_prior = _series(tmp_path)
    assert rc == 0, said
    before, after = _tiled(alone), _tiled(with_prior)
    assert after["prior_source"] == f"{OTHER} prefill v1,2,3,4,5,6"
    assert after["runs"] == before["runs"] == 3 and after["ratio"] == pytest.approx(
        before["ratio"], rel=0.01)
    assert after["ratio_pi_high"] / after["ratio_pi_low"] < \
        before["ratio_pi_high"] / before["ratio_pi_low"]


def test_a_prior_counts_an_artifact_registered_twice_once(tmp_path):
    _write(tmp_path, "prefill", _prefill(0.0))
    _other_series(tmp_path, shifts=(0.0, 0.1, -0.1))

    def prior():
        latest = kept_versions(tmp_path, KEY, "prefill").found[-1:]
        return series.prior_of(tmp_path, KEY, "prefill", latest)[0]["ratio"]
    before = prior()
    register = Register(tmp_path, OTHER)
    again = register.read_copy(register.entry("prefill", 3))
    for _ in range(2):
        _write(tmp_path, "prefill", again, key=OTHER)
    after = prior()
    assert (after.var, after.df) == (before.var, before.df)


# ------------------------------------------------------------------ claims and benchmarks


@pytest.mark.parametrize("column", ["median_ms_diff", "ratio_old", "ratio_new"])
def test_a_between_run_column_the_series_does_not_have_is_refused_at_load(column, tmp_path):
    text = (REPO / "claims.yaml").read_text(encoding="utf-8")
    old = "value: {column: median_ms_spread, stat: max}"
    assert old in text
    path = tmp_path / "claims.yaml"
    path.write_text(text.replace(old, f"value: {{column: {column}, stat: max}}"))
    with pytest.raises(ValueError, match=column):
        load(path)


@pytest.mark.parametrize(("script", "args", "words"), [
    ("series_coverage.py", ["--key", "no-such", "--k", "1"], "no evidence/no-such/register.jsonl"),
    ("verdict_stability.py", ["--key", "no-such"], "no evidence/no-such/register.jsonl"),
    ("verdict_stability.py", ["--key", "cpu-amd-epyc-avx512bf16-2c", "--runs", "3"],
     "--runs [3]: give the base"),
])
def test_the_series_benchmarks_refuse_what_they_cannot_compare(script, args, words):
    done = subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2 and words in done.stderr


def test_the_coverage_benchmarks_half_width_is_the_series_stages():
    """The benchmark re-pools the committed runs as the series stage does, leaving out each
    kernel's ratio to itself (1, of zero width); series.csv's own rows must agree."""
    spec = importlib.util.spec_from_file_location("series_coverage",
                                                  REPO / "benchmarks" / "series_coverage.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    key = "cpu-amd-epyc-avx512bf16-2c"
    table = pd.read_csv(REPO / "results" / key / "series.csv")
    for stage in series.TIMED:
        rows = table[table.stage == stage]
        wanted = {int(v) for v in rows[rows.kind == "run"].version.dropna().unique()}
        pooled = rows[(rows.kind == "pooled") & (rows.status == "ok")
                      & rows.ratio_ci_low.notna()]
        others = pooled[pooled.ratio_to != pooled.impl]
        assert len(others) < len(pooled)  # the reference's own rows exist and are left out
        expected = statistics.median(
            (others.ratio_ci_high - others.ratio_ci_low) / 2 / others.ratio)
        [(runs, n, median)] = bench.half_widths(REPO, key, stage, wanted)
        assert (runs, n) == (len(wanted), len(others))
        assert math.isclose(median, expected, rel_tol=1e-9)
