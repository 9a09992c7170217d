"""The series: a point pooled over the runs made alike (inferlab.measurement.pooling, the
series stage), checked on runs whose truth the test knows."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from inferlab.measurement.intervals import process_var
from inferlab.measurement.pooling import (
    Run,
    RunLevel,
    chi2_median,
    chi2_sf,
    combine_priors,
    outlying,
    pool,
    process_variance,
    run_variance,
    with_prior,
)
from tests.series_helper import series_rows

SEED = 20261202


def _series(rng: random.Random, points: int, runs: int, run_sd: float, proc_sd: float,
            workers: int = 4, common_sd: float = 0.0) -> tuple[list[list[Run]], list[float]]:
    """``points`` points with true log values, each measured in ``runs`` runs of
    ``workers`` processes: y_r = mu + c_r + a_r + mean of the processes' e, c_r what run r
    shares across every point (the whole run slower or faster), a_r the point's own."""
    truths = [rng.uniform(-2, 2) for _ in range(points)]
    shared = [rng.gauss(0, common_sd) for _ in range(runs)]
    out = []
    for mu in truths:
        runs_ = []
        for r in range(runs):
            a = shared[r] + rng.gauss(0, run_sd)
            logs = [mu + a + rng.gauss(0, proc_sd) for _ in range(workers)]
            sd = statistics.stdev(logs) if workers >= 2 else None
            runs_.append(Run(statistics.fmean(logs), workers, None if sd is None else sd ** 2,
                             run=r))
        out.append(runs_)
    return out, truths


def test_the_run_level_variance_is_recovered_from_many_points():
    series, _ = _series(random.Random(SEED), points=60, runs=3, run_sd=0.04, proc_sd=0.03)
    proc, df = process_variance(series)
    level = run_variance(series, proc)
    assert level.origin == "series" and level.df == 60 * 2
    assert math.sqrt(level.var) == pytest.approx(0.04, rel=0.25)
    assert math.sqrt(proc) == pytest.approx(0.03, rel=0.15) and df == 60 * 3 * 3


def test_no_run_level_variance_is_floored_at_zero_not_negative():
    series, _ = _series(random.Random(SEED + 1), points=40, runs=3, run_sd=0.0, proc_sd=0.05)
    proc, _ = process_variance(series)
    assert run_variance(series, proc).var >= 0.0


@pytest.mark.parametrize("runs", [1, 3])
def test_the_prediction_interval_holds_the_next_run_95_percent_of_the_time(runs):
    """Out of sample: a series of ``runs`` runs (the run-level variance from the series
    itself, or for one run a prior of the true value) and one more run: inside its
    prediction interval about 95 % of the time, and the machine's value inside the
    confidence interval about as often."""
    rng = random.Random(SEED + runs)
    inside_pi = inside_ci = total = 0
    for _ in range(40):
        series, truths = _series(rng, points=30, runs=runs + 1, run_sd=0.05, proc_sd=0.04)
        past = [point[:runs] for point in series]
        proc, df = process_variance(past)
        level = run_variance(past, proc) if runs >= 2 else RunLevel(0.05 ** 2, 200, "prior")
        for point, mu in zip(series, truths, strict=True):
            found = pool(point[:runs], level, proc, df, next_processes=4)
            inside_pi += found.pi[0] <= math.exp(point[runs].log_value) <= found.pi[1]
            inside_ci += found.ci[0] <= math.exp(mu) <= found.ci[1]
            total += 1
    assert 0.92 <= inside_pi / total <= 0.98
    assert 0.92 <= inside_ci / total <= 0.98


def test_a_whole_run_slower_is_predicted_with_the_runs_degrees_of_freedom():
    """Out of sample, as the committed host's decode median times vary: a run shares most
    of its departure across the stage's points (sd 6 %, the points' own 2 %). Three runs
    tell that part with two degrees of freedom however many points there are (taken as
    known to the points' 60, the next run fell inside 84 % of the time). Over many series
    the next run is inside its prediction interval about 95 % of the time, and the common
    part is told apart from the points' own."""
    rng = random.Random(SEED + 7)
    inside = total = 0
    commons = []
    for _ in range(400):
        series, _ = _series(rng, points=30, runs=4, run_sd=0.02, proc_sd=0.02, common_sd=0.06)
        past = [point[:3] for point in series]
        proc, df = process_variance(past)
        level = run_variance(past, proc)
        commons.append(level.common)
        assert level.common_df == 2 and level.df == 60
        for point in series:
            found = pool(point[:3], level, proc, df, next_processes=4)
            inside += found.pi[0] <= math.exp(point[3].log_value) <= found.pi[1]
            total += 1
    assert 0.92 <= inside / total <= 0.98
    assert math.sqrt(statistics.fmean(commons)) == pytest.approx(0.06, rel=0.2)


def test_a_prior_lends_the_common_part_its_degrees_of_freedom_and_names_its_source():
    series, _ = _series(random.Random(SEED + 8), points=30, runs=3, run_sd=0.02, proc_sd=0.02,
                        common_sd=0.05)
    proc, _ = process_variance(series)
    level = run_variance(series, proc)
    prior = RunLevel(0.05 ** 2, 300, "prior", ("other prefill v1,2,3",), common=0.04 ** 2,
                     common_df=18)
    both = with_prior(level, prior)
    assert both.common_df == 20 and both.source == ("other prefill v1,2,3",)
    assert both.common == pytest.approx((2 * level.common + 18 * 0.04 ** 2) / 20)
    assert both.var - both.common == pytest.approx(level.var - level.common)
    assert with_prior(level, RunLevel(0.05 ** 2, 300, "prior")) == level  # no common part
    # the same interval is narrower with the prior's 20 degrees of freedom than with 2
    with_20 = pool(series[0], both, proc, 30, 4)
    with_2 = pool(series[0], RunLevel(both.var, 60, "series", common=both.common, common_df=2),
                  proc, 30, 4)
    assert with_20.pi[1] < with_2.pi[1] and with_20.value == with_2.value


def test_a_run_of_one_process_gets_the_pooled_process_variance_never_zero_width():
    level = RunLevel(0.02 ** 2, 50, "prior", ("other-key prefill v1,2",))
    found = pool([Run(math.log(8.9), 1, None)], level, proc_var=0.03 ** 2, proc_df=30,
                 next_processes=1)
    assert found.ci[0] < 8.9 < found.ci[1] and found.pi[0] < found.ci[0]
    half = math.log(found.pi[1] / 8.9)
    # Welch-Satterthwaite: 56 degrees of freedom from the prior's 50 and the processes' 30
    assert half == pytest.approx(1.96 * math.sqrt(2 * (0.02 ** 2 + 0.03 ** 2)), rel=1e-3)


def test_a_variance_not_known_gives_no_interval():
    assert pool([Run(0.0, 1, None)], RunLevel(0.01, 10, "series"), None, 0, 1) is None
    assert pool([Run(0.0, 3, 0.01)], RunLevel(None, 0, "none"), None, 0, 3) is None


def test_priors_are_pooled_by_their_degrees_of_freedom_and_name_their_sources():
    prior = combine_priors([RunLevel(0.01, 10, "prior", ("a",)), RunLevel(0.04, 30, "prior",
                                                                          ("b",)),
                            RunLevel(None, 0, "none")])
    assert prior.var == pytest.approx((0.1 + 1.2) / 40) and prior.df == 40
    assert prior.source == ("a", "b") and prior.origin == "prior"
    assert combine_priors([]).var is None


def test_runs_of_one_process_each_get_intervals_from_their_spread():
    """Every run timed each point in one process (a budget that cut processes, as prefill's
    on a slow CPU): no process variance is known, but the spread between the runs is what
    one more such run varies by. The series stage pools it as ``series_total``, never a
    value without an interval."""
    rng = random.Random(SEED + 7)
    shifts = [rng.gauss(0, 0.05) for _ in range(3)]
    runs = [[{"impl": "naive", "fused_sdpa": False, "T": T, "batch": 1, "heads": 12, "d": 64,
              "dtype": "float32", "causal": True, "block_q": 128, "block_k": 128,
              "threads": 1, "flops": 1, "status": "ok", "workers": 1,
              "median_ms": T / 100 * math.exp(s + rng.gauss(0, 0.03))}
             for T in (1024, 2048, 4096, 8192)] for s in shifts]
    pooled = [r for r in series_rows(prefill=runs) if r["kind"] == "pooled"]
    assert len(pooled) == 4
    for row in pooled:
        assert row["runs"] == 3 and row["processes"] == 3
        assert row["run_sd_origin"] == "series_total" and row["run_sd"] > 0
        assert row["ci_low_ms"] < row["median_ms"] < row["ci_high_ms"]
        assert row["pi_low_ms"] < row["ci_low_ms"] and row["pi_high_ms"] > row["ci_high_ms"]


def test_the_chi_square_tail_and_median_are_the_tables():
    # the 95 % points of chi-square with 1-4 degrees of freedom, and its medians, as
    # printed in every table (Abramowitz & Stegun 26.4)
    for x, d in ((3.841, 1), (5.991, 2), (7.815, 3), (9.488, 4), (18.307, 10)):
        assert chi2_sf(x, d) == pytest.approx(0.05, abs=2e-4)
    for d, median in ((1, 0.4549), (2, 1.3863), (3, 2.3660), (10, 9.3418)):
        assert chi2_median(d) == pytest.approx(median, abs=1e-4)


def test_process_var_prefers_the_recorded_sd_over_backing_it_out():
    """The variance a run's interval over processes allots its value, which the run-level
    variance is estimated beyond: an interval that includes a run-level term cannot be
    backed out, so the row's sd is used."""
    t3 = 3.182  # t(3), 97.5 %
    assert process_var(0.5, 0.9, 4, process_sd=0.02) == pytest.approx(0.02 ** 2 / 4)
    assert process_var(0.5, 0.5 * math.exp(t3 * 0.02 * math.sqrt(0.5)), 4) == \
        pytest.approx(0.02 ** 2 / 4, rel=1e-3)


def test_one_point_whose_runs_spread_beyond_the_others_is_named_and_still_pooled():
    """A 1e16 in one anchored run widens every point's interval. The point is named
    (``outlying``) and stays in the estimate, which it widens (leaving it out cost coverage
    out of sample: pooling.py's docstring)."""
    series, _ = _series(random.Random(SEED + 11), points=30, runs=3, run_sd=0.04,
                        proc_sd=0.03)
    proc, _ = process_variance(series)
    calm = run_variance(series, proc)
    assert calm.outliers == ()
    hit = [list(p) for p in series]
    hit[7][2] = Run(hit[7][2].log_value + math.log(1e16), 4, hit[7][2].process_var)
    level = run_variance(hit, proc)
    assert level.outliers == (7,)
    assert level.var > 100 * calm.var  # kept: it widens every point


def test_points_that_vary_alike_are_called_outlying_about_5_percent_of_the_time():
    """The test's family-wise level: over many series whose points all vary alike, the
    share of series in which any point is called outlying is about ALPHA (5 %)."""
    rng = random.Random(SEED + 12)
    flagged = 0
    for _ in range(300):
        series, _ = _series(rng, points=30, runs=3, run_sd=0.04, proc_sd=0.03)
        proc, _ = process_variance(series)
        flagged += bool(outlying(series, proc))
    assert 0.01 <= flagged / 300 <= 0.10


def test_a_pooled_fraction_of_a_ceiling_divides_by_the_series_roof_not_the_latest_probe():
    """Four quiet runs and a latest one beside a busy process, whose probe read the matmul
    ceiling at half. The pooled time is the quiet runs' mostly; divided by the latest run's
    low ceiling naive attention would run above the roof. A ceiling is the fastest the
    machine was seen doing: the series' roof is the highest its runs read."""
    flops = 2 * 2 * 12 * 1024 * 1024 * 64
    quiet_ceiling, busy_ceiling = 92.0, 47.0

    def run(ms: float, ceiling: float) -> list[dict]:
        gflops = flops / (ms * 1e-3) / 1e9
        return [{"impl": "naive", "fused_sdpa": False, "T": 1024, "batch": 1, "heads": 12,
                 "d": 64, "dtype": "float32", "causal": False, "block_q": None,
                 "block_k": None, "threads": 1, "flops": flops, "status": "ok", "workers": 3,
                 "median_ms": ms, "ci_low_ms": 0.98 * ms, "ci_high_ms": 1.02 * ms,
                 "achieved_gflops": gflops, "frac_matmul_ceiling": gflops / ceiling}]

    runs = [run(ms, quiet_ceiling) for ms in (47.4, 48.2, 46.6, 46.7)] + [run(77.4, busy_ceiling)]
    row = next(r for r in series_rows(prefill=runs) if r["kind"] == "pooled")
    gflops = flops / (row["median_ms"] * 1e-3) / 1e9
    assert row["achieved_gflops"] == pytest.approx(gflops)
    assert row["frac_matmul_ceiling"] == pytest.approx(gflops / quiet_ceiling)
    assert row["frac_matmul_ceiling"] < 1.0
