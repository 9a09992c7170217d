"""A machine's value from a series of runs: random effects over runs, on the log scale.

On a shared VM about half the variance between runs is run-level (the other tenant, how
much of a cache stays in the last-level cache, for minutes), which no process inside one
run samples (Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013:
repeat at the level that varies). So a point's runs are pooled as

    y_r = mu + a_r + e_r,   a_r ~ (0, s2_run),   e_r ~ (0, v_r = s2_proc / W_r)

y_r the log of run r's value (the mean of its W_r processes' log medians), v_r what its
processes allot it: the process variance over W_r. Like the run-level variance, the
process variance of a log value is taken as common to a stage's points and pooled over
all of them (``process_variance``: one process's, or two processes', sd says little on
its own: with 2 processes its t has 1 degree of freedom). ``mu`` is estimated with inverse-variance
weights w_r = 1 / (s2_run + v_r):

* the 95 % confidence interval of the machine's value: mu_hat +- t * sqrt(1 / sum w_r);
* the 95 % prediction interval of one more run of W processes (what CORE-Bench counts a
  number "reproduced" by): mu_hat +- t * sqrt(s2_run + s2_proc / W + 1 / sum w_r).

``s2_run`` is common to the points of a stage and quantity (median time, paired ratio):
estimated from the series itself by the method of moments over every point with two or
more runs (``run_variance``: the spread of each point's run values less what its
processes allot, pooled over points, floored at 0), so even three runs give it many
degrees of freedom. A series of one run has none: it carries a stated prior
(``Prior``: estimated the same way from the committed series of machines of the same
kind, with its source), never a zero-width interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from inferlab.measurement.intervals import t975


@dataclass(frozen=True)
class Run:
    """One run's value of one point: the log value and what its processes allot it."""

    log_value: float
    processes: int
    process_var: float | None   # the processes' variance of a log median (sd squared)


@dataclass(frozen=True)
class RunLevel:
    """The run-level variance a stage's points carry: its value, its degrees of freedom,
    and where it comes from (``series``: this series; ``prior``: other series, ``source``
    names them; ``none``: nothing known, which no interval is built on)."""

    var: float | None
    df: int
    origin: str
    source: tuple[str, ...] = ()


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


def run_variance(points: Sequence[Sequence[Run]], proc_var: float | None) -> RunLevel:
    """The run-level variance of the log values, from every point with two or more runs:
    per point the sample variance of its runs' values less the mean of what their
    processes allot them (``proc_var`` over each run's processes), pooled over points by
    their degrees of freedom and floored at 0."""
    total, df = 0.0, 0
    for runs in points:
        if len(runs) < 2:
            continue
        allotted = [_allotted(r, proc_var) for r in runs]
        if None in allotted:
            continue
        spread = statistics.variance([r.log_value for r in runs])
        total += (len(runs) - 1) * (spread - statistics.fmean(allotted))
        df += len(runs) - 1
    if not df:
        return RunLevel(None, 0, "none")
    return RunLevel(max(0.0, total / df), df, "series")


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
    # the two variance components of each interval, and Welch-Satterthwaite degrees of
    # freedom from theirs (the run-level one's and the processes' each from many points)
    ci = (run_level.var / k, proc_var / (k * mean_w))
    pi = (run_level.var * (1 + 1 / k), proc_var * (1 / max(next_processes, 1) + 1 / (k * mean_w)))
    dfs = (run_level.df, proc_df)
    half_ci = _t(ci, dfs) * math.sqrt(var_mean)
    half_pi = _t(pi, dfs) * math.sqrt(max(sum(pi), var_mean))
    return Pooled(math.exp(centre), (math.exp(centre - half_ci), math.exp(centre + half_ci)),
                  (math.exp(centre - half_pi), math.exp(centre + half_pi)), len(runs),
                  sum(r.processes for r in runs))


def _t(parts: tuple[float, float], dfs: tuple[int, int]) -> float:
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
    return RunLevel(sum(lv.var * lv.df for lv in known) / df, df, "prior",
                    tuple(s for lv in known for s in lv.source))
