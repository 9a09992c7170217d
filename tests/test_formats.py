"""How values read (inferlab.judging.numtext, inferlab.presentation.formats): significant
figures, ranges, units, table cells and the chapter's LaTeX, at the edges of each rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from inferlab.judging import claims, numtext
from inferlab.presentation import formats


@pytest.mark.parametrize(("value", "text"), [
    (2080.0, "2080"), (11.52, "11.5"), (1.0, "1"), (0.5, "0.500"), (9.09, "9.09"),
    (123.456, "123"), (0.001, "0.00100"), (0.00099, "0.00099"), (999999.0, "999999"),
    (1e6, "1e+06"), (0.0, "0"), (-2.5, "-2.50"), (-0.0012, "-0.00120"), (math.nan, "nan"),
    (math.inf, "inf"), (4.7e-5, "4.7e-05"), (10.0, "10"), (99.95, "100.0"),
    (3, "3"), (True, "True"), ("flash", "flash"), (None, "—"),
    # a list reads as its range or its items
    ([2.48, 43.4], "2.48–43.4"), ([43.4, 2.48, 7.0], "2.48–43.4"), ([3.0, 3.0], "3"),
    ([5], "5"), ([True, False], "True, False"), ([1.0, None], "1, —"), ([], ""),
    ([[1024, 9.09], [2048, 10.32]], "1024: 9.09, 2048: 10.3"),
])
def test_a_value_or_a_list_for_people(value, text):
    assert numtext.format_value(value) == text


def _check(column: str, stage: str = "prefill", **value) -> claims.Check:
    return claims._check({"stage": stage, "value": {"column": column, "stat": "max", **value},
                          "expect": {"max": 1}})


@pytest.mark.parametrize(("check", "unit"), [
    (_check("peak_extra_bytes", unit="MiB"), "MiB"), (_check("median_ms", unit="us"), "µs"),
    (_check("median_ms", unit="s"), "s"), (_check("median_ms"), "ms"),
    (_check("achieved_gflops"), "GFLOP/s"), (_check("peak_extra_bytes"), "B"),
    (_check("ratio"), "×"), (_check("median_ms", over="ci_low_ms"), "×"),
    (_check("causal_over_full"), "×"), (_check("frac_matmul_ceiling"), ""),
    (_check("median_ms", stat="spread"), ""),
    (_check("median_ms", stat="loglog_slope", x="T"), ""),
    (_check("achieved_gbs", "decode"), "GB/s"), (_check("model_ratio", "traffic"), "×"),
    (claims._check({"stage": "prefill", "ratio": {
        "numerator": {"where": {"impl": "naive"}}, "denominator": {"where": {"impl": "tiled"}},
        "join": ["T"], "column": "peak_extra_bytes", "stat": "range"}, "expect": {"max": 1}}),
     "×"),
])
def test_the_unit_a_value_is_printed_in(check, unit):
    assert numtext.display_unit(check) == unit


@pytest.mark.parametrize(("value", "unit", "text"), [
    ([2.48, 43.4], "×", "2.48–43.4×"), ([704.0, 1070.0], "µs", "704–1070 µs"),
    (3.0, "MiB", "3 MiB"), (0.53, "", "0.530"), (0.53, None, "0.530"), (None, "ms", "—"),
    (2.0, "ms", "2 ms"),
])
def test_a_value_with_its_unit(value, unit, text):
    assert formats.with_unit(value, unit) == text


@pytest.mark.parametrize(("latex", "plain"), [
    (r"\(O(S^2)\)", "O(S²)"), (r"\(4.7 \times 10^{-5}\)", "4.7 × 10⁻⁵"),
    (r"a \(1\times S\) vector", "a 1×S vector"), (r"\(O(S\cdot d)\)", "O(S·d)"),
    (r"\(3 \times 10^{-5}\) and \(2 \times 10^{-4}\)", "3 × 10⁻⁵ and 2 × 10⁻⁴"),
    (r"\(e^{(\cdot)}\)", "e^(·)"), ("O(S^2) -> O(S·d)", "O(S²) → O(S·d)"),
    ("no maths", "no maths"), (r"\(S^n\)", "Sⁿ"), (r"\(10^{(2)}\)", "10⁽²⁾"),
    (r"\(x^{ab}\)", "x^(ab)"),
    (r"\(x^{(ab)}\)", "x^(ab)"), (r"\(a \le b \ge c\)", "a ≤ b ≥ c"),
    (r"\(a\,b\)", "a b"), (r"\(\infty\)", "∞"), (r"\(a \unknown x\)", "a unknown x"),
    (r"\(a \approx b\)", "a ≈ b"), (r"\(x^{+}\)", "x⁺"), ("a -> b", "a → b"),
    (r"\(10^{+3}\)", "10⁺³"), (r"\(x^y\)", "x^(y)"), (r"\(x^{(a}\)", "x^((a)"),
    (r"\(x^{a)}\)", "x^(a))"), (r"\(a \Delta b\)", "a Delta b"),
])
def test_latex_as_plain_unicode(latex, plain):
    assert formats.plain_text(latex) == plain


@pytest.mark.parametrize(("value", "kind", "text"), [
    (1234567, "int", "1,234,567"), (True, "mask", "causal"), (False, "mask", "full"),
    (True, "yes", "yes"), (False, "yes", "no"), (2.0 / 3, "num", "0.667"),
    (3 * 2**20, "mib", "3"), (0.125, "pct", "12.5 %"), ("naive", "text", "naive"),
    (None, "num", "—"), (pd.NA, "int", "—"), (math.nan, "num", "—"), (7, "other", "7"),
])
def test_a_table_cell(value, kind, text):
    assert formats.table_cell(value, kind) == text


def test_a_computed_non_finite_cell_reads_as_it_is_never_as_not_applicable():
    assert formats.table_cell(math.nan, "num", nonfinite=True) == "nan"
    assert formats.table_cell(math.inf, "num", nonfinite=True) == "inf"
    assert formats.table_cell(-math.inf, "pct", nonfinite=True) == "-inf"
