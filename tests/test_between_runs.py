"""Between runs, against the intervals: each run's value inside the other's 95 % interval.

The issue's measure of an honest interval (issue 24): over two runs made alike, the share
of points whose values lie inside each other's interval. Judged here on tables made by
the real artifact writer, with intervals placed at each edge.
"""

from __future__ import annotations

import pytest

from inferlab.evidence import artifacts
from inferlab.evidence.compare import agreement, differences


def _table(ratio: float, low: float | None, high: float | None, impl: str = "tiled"):
    row = {"impl": impl, "fused_sdpa": False, "T": 1024, "batch": 1, "heads": 2, "d": 64,
           "dtype": "float32", "causal": True, "threads": 1, "median_ms": 10.0,
           "ci_low_ms": 9.0, "ci_high_ms": 11.0, "ratio_to": "naive", "ratio": ratio,
           "ratio_ci_low": low, "ratio_ci_high": high, "flops": 1, "status": "ok"}
    return artifacts.decode("prefill", artifacts.encode("prefill", [row]))


@pytest.mark.parametrize(("old", "new", "agree"), [
    ((1.00, 0.98, 1.02), (1.01, 0.99, 1.03), True),    # each inside the other
    ((1.00, 0.98, 1.02), (1.02, 1.00, 1.04), True),    # on the edge: inside (closed)
    ((1.00, 0.98, 1.02), (1.021, 1.01, 1.03), False),  # new above old's interval
    ((1.00, 0.99, 1.01), (1.015, 0.95, 1.05), False),  # old inside new's, not new in old's
    ((1.00, 0.98, 1.02), (0.97, 0.96, 0.99), False),   # new below old's interval
])
def test_each_run_must_lie_inside_the_others_interval(old, new, agree):
    diffs = differences("prefill", _table(*old), _table(*new))
    assert bool(diffs.loc[0, "ratio_agree"]) is agree
    assert agreement(diffs, "ratio") == \
        f"; each run inside the other's 95 % interval at {int(agree)} of 1 points " \
        f"({100 * int(agree)}%)"


def test_a_missing_interval_is_not_counted_either_way():
    diffs = differences("prefill", _table(1.0, None, None), _table(1.0, 0.9, 1.1))
    assert diffs["ratio_agree"].isna().all()
    assert agreement(diffs, "ratio") == ""


def test_a_ratio_of_one_a_case_against_itself_is_not_counted():
    diffs = differences("prefill", _table(1.0, 1.0, 1.0, "naive"),
                        _table(1.0, 1.0, 1.0, "naive"))
    assert bool(diffs.loc[0, "ratio_agree"]) is True
    assert agreement(diffs, "ratio") == ""


def test_the_median_time_is_judged_against_its_own_interval():
    diffs = differences("prefill", _table(1.0, 0.9, 1.1), _table(1.0, 0.9, 1.1))
    assert bool(diffs.loc[0, "median_ms_agree"]) is True
