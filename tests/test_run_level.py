"""The run-level variance in a paired ratio's interval: what a whole run shares and no
process inside it samples, estimated from the register's pairs of runs made alike."""

from __future__ import annotations

import math
import random

import pytest

from inferlab.measurement.intervals import (
    process_var,
    run_variance,
)

T3 = 3.182  # t(3), 97.5 %


def _groups(rng: random.Random, n: int = 4) -> list[list[float]]:
    return [[rng.uniform(0.5, 0.6) for _ in range(3)] for _ in range(n)]


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

