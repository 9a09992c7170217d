"""The statistics of the timing harness (``measure``, ``workers``): 95 % intervals of a
median within one process (order statistics, distribution-free) and over several
processes (random effects on the log scale), and the between-process share of the variance.

Over processes, as pyperf does: most of the variance between runs is between processes
(memory layout, the other tenant of a shared VM). Each process gives the log of its
median, whose spread already holds that of the rounds within it. The interval is for the
next run: the 95 % *prediction* interval of another run of W processes, mean ± t(W-1) · s
· sqrt(1/W + 1/W) on the log scale, s the sd of the log medians (a confidence interval of
the mean, ± t · s / sqrt(W), holds the next run's mean only 83-91 % of the time).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

CI_LEVEL = 0.95
MIN_ROUNDS = 6  # with fewer samples no order-statistics interval reaches 95 %
# Student's t, 97.5 % quantile, by degrees of freedom (a 95 % two-sided interval)
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 14: 2.145, 16: 2.120, 20: 2.086,
         25: 2.060, 30: 2.042}


def median_ci(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float]:
    """A distribution-free ``level`` confidence interval of the median: the order
    statistics (x_(k), x_(n+1-k)) for the largest k whose binomial coverage
    1 - 2·P(Bin(n, ½) < k) still reaches ``level``. NaN, NaN when n is too small."""
    xs, n = sorted(values), len(values)
    best, below = 0, 0.0  # below = P(Bin(n, 1/2) <= k - 1)
    for k in range(1, n // 2 + 1):
        below += math.comb(n, k - 1) / 2**n
        if 1 - 2 * below < level:
            break
        best = k
    return (xs[best - 1], xs[n - best]) if best else (math.nan, math.nan)


def relative_halfwidth(low: float, high: float, centre: float) -> float:
    """(high - low) / 2 / centre: the ± of an interval as a fraction; inf when undefined."""
    if not (math.isfinite(low) and math.isfinite(high)) or centre <= 0:
        return math.inf
    return (high - low) / 2 / centre


def t975(df: int) -> float:
    """Student's t quantile for a 95 % two-sided interval with ``df`` degrees of freedom
    (the nearest tabled df at or below; the normal 1.96 beyond 30)."""
    if df < 1:
        return math.nan
    return _T975[max(k for k in _T975 if k <= df)] if df <= 30 else 1.96


def process_interval(groups: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """(centre, low, high) of positive values measured in several processes: each
    process's median on the log scale, their mean ± t(W-1) · s · sqrt(2/W), the 95 %
    prediction interval of another run's mean over W processes (random effects: the spread
    of the process medians already holds the spread of the rounds), back on the linear
    scale. With one process: its median and the order-statistics CI of its rounds (which
    says nothing of other processes; ``interval_method`` says so)."""
    groups = [g for g in groups if g]
    if len(groups) < 2:
        xs = groups[0] if groups else []
        return (statistics.median(xs) if xs else math.nan, *median_ci(xs))
    logs = [math.log(statistics.median(g)) for g in groups]
    centre = statistics.fmean(logs)
    half = t975(len(logs) - 1) * statistics.stdev(logs) * math.sqrt(2 / len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def between_share(groups: Sequence[Sequence[float]]) -> float | None:
    """The between-process share of the variance of log values (one-way random effects,
    method of moments): sigma_b^2 / (sigma_b^2 + sigma_w^2), where sigma_w^2 is the pooled
    variance of the rounds within a process and sigma_b^2 = var(process means) -
    sigma_w^2 / rounds, floored at 0. None with fewer than two processes of two rounds."""
    groups = [[math.log(x) for x in g] for g in groups if len(g) >= 2]
    if len(groups) < 2:
        return None
    within = statistics.fmean(statistics.variance(g) for g in groups)
    rounds = statistics.fmean(len(g) for g in groups)
    between = max(0.0, statistics.variance([statistics.fmean(g) for g in groups])
                  - within / rounds)
    return between / (between + within) if between + within > 0 else 0.0


def interval_method(groups: Sequence[Sequence[float]]) -> str:
    """How ``process_interval`` made the interval of these groups: ``random_effects``
    (over two or more processes) or ``order_statistics`` (the rounds of one process); the
    report says it in words."""
    return "random_effects" if len([g for g in groups if g]) >= 2 else "order_statistics"


def process_sd(groups: Sequence[Sequence[float]]) -> float | None:
    """The standard deviation of the processes' log medians (what ``process_interval``'s
    width is made of); None with fewer than two processes."""
    logs = [math.log(statistics.median(g)) for g in groups if g]
    return statistics.stdev(logs) if len(logs) >= 2 else None


def process_var(centre: float, high: float, workers: int, process_sd: float | None = None
                ) -> float | None:
    """The variance on the log scale an interval over ``workers`` processes allots its
    run's value: s² / W, s the standard deviation of the log process medians. From the
    row's ``process_sd`` where it has one, else backed out of a ``process_interval``
    (half-width h = t(W-1)·s·√(2/W), so s²/W = (h / t)² / 2). None for one process or an
    interval of a value against itself (a reference: ratio 1, no width)."""
    if workers is None or workers != workers or int(workers) < 2:
        return None
    if process_sd is not None and process_sd == process_sd:
        return float(process_sd) ** 2 / int(workers)
    if high is None or high != high or not math.isfinite(high) or centre <= 0 or high < centre:
        return None
    return (math.log(high / centre) / t975(int(workers) - 1)) ** 2 / 2
