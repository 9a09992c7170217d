"""A machine's value from a series of runs: random effects over runs, on the log scale.

On a shared VM about half the variance between runs is run-level (the other tenant, what
stays in the last-level cache), which no process inside one run samples (Kalibera &
Jones, "Rigorous benchmarking in reasonable time", ISMM 2013: repeat at the level that
varies). So a point's runs are pooled as

    y_r = mu + a_r + e_r,   a_r ~ (0, s2_run),   e_r ~ (0, v_r = s2_proc / W_r)

y_r the log of run r's value (the mean of its W_r processes' log medians). The process
variance s2_proc is common to a stage's points and pooled over them
(``process_variance``). ``mu`` is estimated with weights w_r = 1 / (s2_run + v_r):

* the 95 % confidence interval of the machine's value: mu_hat +- t * sqrt(1 / sum w_r);
* the 95 % prediction interval of one more run of W processes (what CORE-Bench counts a
  number "reproduced" by): mu_hat +- t * sqrt(s2_run + s2_proc / W + 1 / sum w_r).

``s2_run`` is common to a stage's points and quantity, estimated by the method of moments
over every point with two or more runs (``run_variance``), so even three runs give it many
degrees of freedom. The part a whole run shares across its points (slower or faster
everywhere: ``common_variance``) has only the runs' degrees of freedom; it is pooled with
the prior of the machine's kind (``with_prior``) and gets its own t (``_t_parted``). A
series of one run carries a stated prior (``combine_priors``), never a zero-width interval.

A point whose runs spread far beyond the others' widens every point's interval, and is
kept there (leaving such points out cost coverage out of sample:
``benchmarks/series_coverage.py``), but named (``RunLevel.outliers``): against a robust
scale, a point whose spread a chi-square gives less than ``ALPHA`` family-wise chance
(Bonferroni over the points).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from inferlab.measurement.intervals import t975

# the family-wise chance (over a stage's points) that a point whose runs vary like the
# others' is called outlying: the usual 5 %, Bonferroni-split over the points
ALPHA = 0.05


@dataclass(frozen=True)
class Run:
    """One run's value of one point: the log value and what its processes allot it."""

    log_value: float
    processes: int
    process_var: float | None   # the processes' variance of a log median (sd squared)
    run: object = None          # which run of the series (its register version): the runs
    # of a stage's points that share it share its common effect (``common_variance``)


@dataclass(frozen=True)
class RunLevel:
    """The run-level variance a stage's points carry: its value, its degrees of freedom,
    and where it comes from (``series``: this series; ``prior``: other series, ``source``
    names them; ``none``: nothing known, which no interval is built on)."""

    var: float | None
    df: int
    origin: str
    source: tuple[str, ...] = ()
    # the points (their indices in the estimate's input) whose runs spread beyond the
    # stage's (``outlying``): in ``var``, which they widen
    outliers: tuple[int, ...] = ()
    # the part of ``var`` a run shares across all of the stage's points (the whole run
    # slower or faster: ``common_variance``) and its degrees of freedom, which the runs
    # give, not the points: None where it is not told apart (then ``var`` counts as known
    # to ``df``)
    common: float | None = None
    common_df: int = 0


@dataclass(frozen=True)
class Pooled:
    """A point's series: centre, 95 % confidence and prediction intervals (linear scale)."""

    value: float
    ci: tuple[float, float]
    pi: tuple[float, float]
    runs: int
    processes: int


def process_variance(runs: Sequence[Sequence[Run]]) -> tuple[float | None, int]:
    """The variance of a process's log median, pooled over every run of two or more
    processes (weighted by their degrees of freedom), and those degrees of freedom."""
    pairs = [(r.processes - 1, r.process_var) for point in runs for r in point
             if r.processes >= 2 and r.process_var is not None]
    df = sum(d for d, _ in pairs)
    return (sum(d * v for d, v in pairs) / df if df else None), df


def _allotted(run: Run, proc_var: float | None) -> float | None:
    return None if proc_var is None else proc_var / max(run.processes, 1)


def chi2_sf(x: float, d: int) -> float:
    """P(X > x) for X chi-square with ``d`` (integer, >= 1) degrees of freedom: the closed
    forms for even and odd ``d``."""
    if x <= 0:
        return 1.0
    half = x / 2
    if d % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(1, d // 2):
            term *= half / k
            total += term
        return min(1.0, math.exp(-half) * total)
    total = math.erfc(math.sqrt(half))
    term = math.sqrt(half) / math.gamma(1.5)  # (x/2)^(k-1/2) / Gamma(k+1/2) at k = 1
    for k in range(1, (d + 1) // 2):
        total += math.exp(-half) * term
        term *= half / (k + 0.5)
    return min(1.0, total)


def chi2_median(d: int) -> float:
    """The median of a chi-square with ``d`` degrees of freedom (bisection on ``chi2_sf``)."""
    low, high = 0.0, d + 10.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if chi2_sf(mid, d) > 0.5 else (low, mid)
    return (low + high) / 2


def _spreads(points: Sequence[Sequence[Run]], proc_var: float | None) -> list[tuple[int, int,
                                                                                   float, float]]:
    """(index, degrees of freedom, sample variance of the runs' values, the mean of what
    their processes allot them) of every point with two or more runs."""
    out = []
    for i, runs in enumerate(points):
        if len(runs) < 2:
            continue
        allotted = [_allotted(r, proc_var) for r in runs]
        if None in allotted:
            continue
        out.append((i, len(runs) - 1, statistics.variance([r.log_value for r in runs]),
                    statistics.fmean(allotted)))
    return out


def outlying(points: Sequence[Sequence[Run]], proc_var: float | None) -> tuple[int, ...]:
    """The points whose runs spread beyond what the stage's other points make likely.

    The scale: per point its spread over the median of chi-square(d) / d, less what its
    processes allot it, has its median at the run-level variance; the median over points
    is moved by no single point. A point's spread over (scale + allotment) is
    chi-square(d) / d where it varies like the others; under ``ALPHA`` / (points) it is
    outlying. Fewer than three points, or a scale of 0, call nothing outlying."""
    return _outlying(_spreads(points, proc_var))


def _outlying(found: Sequence[tuple[int, int, float, float]]) -> tuple[int, ...]:
    """``outlying`` of the points' spreads (``_spreads``)."""
    if len(found) < 3:
        return ()
    scale = max(0.0, statistics.median(d * s2 / chi2_median(d) - a for _, d, s2, a in found))
    cut = ALPHA / len(found)
    return tuple(i for i, d, s2, a in found
                 if scale + a > 0 and chi2_sf(d * s2 / (scale + a), d) < cut)


def common_variance(points: Sequence[Sequence[Run]]) -> tuple[float | None, int]:
    """The variance of what a run shares across a stage's points (a whole run slower or
    faster: another tenant for minutes), and its degrees of freedom: runs - 1.

    Over the points measured in every run, each run's mean departure from the points'
    means is its common effect; their variance, less what the residuals leave in a mean of
    that many points, estimates it, floored at 0. Taken as known to the points' degrees of
    freedom, a prediction interval held the next run 84 % of the time in a simulation
    (``tests/test_series.py``). None where runs are not named or fewer than two runs share
    two points."""
    ids = list(dict.fromkeys(r.run for point in points for r in point))
    if len(ids) < 2 or None in ids:
        return None, 0
    complete = []
    for point in points:
        by_run = {r.run: r.log_value for r in point}
        if len(by_run) == len(point) and set(by_run) == set(ids):
            complete.append(by_run)
    if len(complete) < 2:
        return None, 0
    k, n = len(ids), len(complete)
    means = [statistics.fmean(p.values()) for p in complete]
    effect = {r: statistics.fmean(p[r] - m for p, m in zip(complete, means, strict=True))
              for r in ids}
    residual = sum((p[r] - m - effect[r]) ** 2 for p, m in zip(complete, means, strict=True)
                   for r in ids) / ((k - 1) * (n - 1))
    return max(0.0, statistics.variance(effect.values()) - residual / n), k - 1


def with_prior(level: RunLevel, prior: RunLevel | None) -> RunLevel:
    """A series' run level whose common part (``common_variance``: the runs' few degrees of
    freedom) is pooled with the prior's by their degrees of freedom, as a scaled inverse
    chi-square prior is updated; the rest of its variance (the points' many degrees of
    freedom) is the series' own. The prior's sources are named. Unchanged where either has
    no common part."""
    if (level.origin != "series" or level.common is None or prior is None
            or prior.common is None or prior.common_df <= 0):
        return level
    df = level.common_df + prior.common_df
    common = (level.common * level.common_df + prior.common * prior.common_df) / df
    return RunLevel(level.var - level.common + common, level.df, level.origin, prior.source,
                    level.outliers, common, df)


def run_variance(points: Sequence[Sequence[Run]], proc_var: float | None) -> RunLevel:
    """The run-level variance of the log values, from every point with two or more runs:
    per point the sample variance of its runs' values less the mean of what their
    processes allot them (``proc_var`` over each run's processes), pooled over points by
    their degrees of freedom and floored at 0; the outlying points (``outlying``) named."""
    found = _spreads(points, proc_var)
    df = sum(d for _, d, _, _ in found)
    out = _outlying(found)
    if not df:
        return RunLevel(None, 0, "none", outliers=out)
    total = max(0.0, sum(d * (s2 - a) for _, d, s2, a in found) / df)
    common, common_df = common_variance(points)
    return RunLevel(total, df, "series", outliers=out,
                    common=None if common is None else min(common, total), common_df=common_df)


def pool(runs: Sequence[Run], run_level: RunLevel, proc_var: float | None, proc_df: int,
         next_processes: int) -> Pooled | None:
    """The point's pooled value with its 95 % intervals (see the module's docstring);
    None where a variance it needs is not known. ``proc_var``/``proc_df``: the stage's
    pooled process variance (``process_variance``); ``next_processes``: how many processes
    the run the prediction interval is for would have (the latest run's)."""
    if not runs or run_level.var is None or proc_var is None:
        return None
    allotted = [_allotted(r, proc_var) for r in runs]
    weights = [1 / (run_level.var + v) if run_level.var + v > 0 else math.inf for v in allotted]
    if math.inf in weights:  # no variance at all: every run the same, exactly
        centre, var_mean = statistics.fmean(r.log_value for r in runs), 0.0
    else:
        centre = sum(w * r.log_value for w, r in zip(weights, runs, strict=True)) / sum(weights)
        var_mean = 1 / sum(weights)
    k, mean_w = len(runs), statistics.fmean(max(r.processes, 1) for r in runs)
    # the variance components of each interval: the run level's common part (the runs'
    # degrees of freedom), its rest and the processes' (the points')
    common = run_level.common or 0.0
    rest = run_level.var - common
    ci = (common / k, rest / k, proc_var / (k * mean_w))
    pi = (common * (1 + 1 / k), rest * (1 + 1 / k),
          proc_var * (1 / max(next_processes, 1) + 1 / (k * mean_w)))
    dfs = (run_level.common_df, run_level.df, proc_df)
    half_ci = _t_parted(ci, dfs) * math.sqrt(var_mean)
    half_pi = _t_parted(pi, dfs) * math.sqrt(max(sum(pi), var_mean))
    return Pooled(math.exp(centre), (math.exp(centre - half_ci), math.exp(centre + half_ci)),
                  (math.exp(centre - half_pi), math.exp(centre + half_pi)), len(runs),
                  sum(r.processes for r in runs))


def _t_parted(parts: tuple[float, ...], dfs: tuple[int, ...]) -> float:
    """Student's t for a variance whose first part is the runs' common part (few degrees
    of freedom, ``common_variance``) and the rest estimated with many: each with its own t,
    h^2 = t_c^2 V_c + t_rest^2 V_rest (the rest by Welch-Satterthwaite). Welch-Satterthwaite
    over all three takes more degrees of freedom exactly where the common part came out
    small by chance (91 % of next runs inside a 95 % interval, against 95 % this way:
    ``tests/test_series.py``)."""
    common, rest = parts[0], sum(parts[1:])
    if common <= 0:
        return _t(parts[1:], dfs[1:])
    if dfs[0] <= 0:  # a common part with no degrees of freedom: known, as _t counts it
        return _t(parts, dfs)
    t_rest = _t(parts[1:], dfs[1:])
    return math.sqrt((common * t975(dfs[0]) ** 2 + rest * t_rest ** 2) / (common + rest))


def _t(parts: tuple[float, ...], dfs: tuple[int, ...]) -> float:
    """Student's t for a variance made of ``parts`` estimated with ``dfs`` degrees of
    freedom each (Welch-Satterthwaite; a part with no degrees of freedom counts as
    known)."""
    total = sum(parts)
    if total <= 0:
        return t975(10**6)
    spread = sum(p * p / d for p, d in zip(parts, dfs, strict=True) if d > 0 and p > 0)
    return t975(int(min(total * total / spread, 10**6))) if spread > 0 else t975(10**6)


def combine_priors(levels: Sequence[RunLevel]) -> RunLevel:
    """Run-level estimates of several series pooled by their degrees of freedom: the prior
    a machine's first run carries, naming every series it comes from."""
    known = [lv for lv in levels if lv.var is not None and lv.df > 0]
    df = sum(lv.df for lv in known)
    if not df:
        return RunLevel(None, 0, "none")
    parted = [lv for lv in known if lv.common is not None and lv.common_df > 0]
    common_df = sum(lv.common_df for lv in parted)
    # the common part pooled by the runs' degrees of freedom, the rest by the points'
    common = sum(lv.common * lv.common_df for lv in parted) / common_df if common_df else None
    rest = sum((lv.var - (lv.common or 0.0)) * lv.df for lv in known) / df
    return RunLevel(rest + (common or 0.0), df, "prior",
                    tuple(s for lv in known for s in lv.source), common=common,
                    common_df=common_df)
