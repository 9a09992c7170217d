"""The variance a run's interval over processes allots its value, which the series'
run-level variance is estimated beyond (``intervals.process_var``)."""

from __future__ import annotations

import math

import pytest

from inferlab.measurement.intervals import process_var

T3 = 3.182  # t(3), 97.5 %


def test_process_var_prefers_the_recorded_sd_over_backing_it_out():
    # an interval that includes a run-level term cannot be backed out: the row's sd is used
    assert process_var(0.5, 0.9, 4, process_sd=0.02) == pytest.approx(0.02 ** 2 / 4)
    assert process_var(0.5, 0.5 * math.exp(T3 * 0.02 * math.sqrt(0.5)), 4) == \
        pytest.approx(0.02 ** 2 / 4, rel=1e-3)
