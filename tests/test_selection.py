"""Which rows a check judges (inferlab.judging.selection), at each boundary: filters, dtype,
scope, status accounting, best row per group, non-finite flags; what was left out is data
(its cause), its words checked through ``claim_text``."""

from __future__ import annotations

import pandas as pd
import pytest

from inferlab.evidence import artifacts
from inferlab.judging import claims, selection
from inferlab.judging.causes import NotMeasurable
from inferlab.judging.claims import Best, Condition, Rows
from inferlab.presentation.claim_text import cause_text, missing_text

STAND_IN = {"cpu": "float32", "cuda": "float16"}
OOM = {"status": "oom", "cause": "memory", "median_ms": None}


def error(reason: str) -> dict:
    return {"status": "error", "cause": "exception", "reason": reason, "median_ms": None}


def prefill_row(**cells) -> dict:
    row = {"impl": "naive", "fused_sdpa": False, "T": 1024, "batch": 1, "heads": 12, "d": 64,
           "dtype": "float32", "causal": True, "block_q": 128, "block_k": 128, "threads": 2,
           "flops": 1, "median_ms": 1.0, "status": "ok"}
    return {**row, **cells}


def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as prefill.csv holds them, read back typed (Int64, boolean, string)."""
    return artifacts.decode("prefill", artifacts.encode("prefill", rows)).frame


def check(**spec) -> claims.Check:
    return claims._check({"stage": "prefill", "value": {"column": "median_ms", "stat": "max"},
                          "expect": {"max": 1}, **spec})


LENGTHS = frame([prefill_row(T=T, median_ms=T / 1024) for T in (512, 1024, 2048, 4096)])


# ---------------------------------------------------------------- where


@pytest.mark.parametrize(("cond", "kept"), [
    ({"min": 1024}, [1024, 2048, 4096]),           # inclusive lower bound
    ({"max": 2048}, [512, 1024, 2048]),            # inclusive upper bound
    ({"min": 1024, "max": 2048}, [1024, 2048]), ({"min": 1024.5}, [2048, 4096]),
    ({"min": 4096, "max": 4096}, [4096]), ({"min": 5000}, []),
    (2048, [2048]), ([512, 4096], [512, 4096]), ([3], []),
])
def test_each_where_condition_at_its_boundary(cond, kept):
    condition = claims._condition("T", cond)
    assert list(selection.apply_where(LENGTHS, (condition,))["T"]) == kept


def test_conditions_parse_to_values_or_bounds():
    assert claims._condition("T", {"min": 1}) == Condition("T", low=1, high=None)
    assert claims._condition("T", {"max": 2}) == Condition("T", low=None, high=2)
    assert claims._condition("T", [1, 2]) == Condition("T", values=(1, 2))
    assert claims._condition("impl", "naive") == Condition("impl", values=("naive",))
    assert claims._condition("causal", False) == Condition("causal", values=(False,))


def test_an_empty_cell_matches_no_condition_nor_a_word_a_range():
    rows = frame([prefill_row(block_q=None, impl="sdpa_math"), prefill_row(block_q=64)])
    for cond in ({"min": 0}, {"max": 1e9}, 64, [64, 128]):
        kept = selection.apply_where(rows, (claims._condition("block_q", cond),))
        assert list(kept["block_q"]) == [64]
    assert selection.apply_where(LENGTHS, (claims._condition("impl", {"min": 1}),)).empty


def test_every_where_condition_and_scope_column_is_applied():
    rows = frame([prefill_row(T=T, causal=c) for T in (1024, 2048) for c in (False, True)])
    where = (claims._condition("T", {"min": 2048}), claims._condition("causal", True))
    kept = selection.apply_where(rows, where)
    assert list(zip(kept["T"], kept["causal"], strict=True)) == [(2048, True)]
    sels = selection.select(check(scope={"T": [2048], "causal": [False]}), rows, "cpu",
                            STAND_IN)
    assert list(zip(sels[0].frame["T"], sels[0].frame["causal"], strict=True)) == \
        [(2048, False)]


# ---------------------------------------------------------------- best


def test_best_keeps_the_lowest_row_of_each_group():
    rows = frame([prefill_row(impl="sdpa_flash", T=1024, median_ms=3.0),
                  prefill_row(impl="sdpa_math", T=1024, median_ms=2.0),
                  prefill_row(impl="sdpa_flash", T=2048, median_ms=5.0),
                  prefill_row(impl="sdpa_math", T=2048, median_ms=7.0)])
    kept = selection.keep_best(rows, Rows(best=Best(("T",), "median_ms")))
    assert list(zip(kept["T"], kept["impl"], strict=True)) == [(1024, "sdpa_math"),
                                                               (2048, "sdpa_flash")]
    # over no group column but the whole frame: the one fastest row
    one = selection.keep_best(rows, Rows(best=Best(("batch",), "median_ms")))
    assert list(one["median_ms"]) == [2.0]


def test_best_leaves_out_rows_without_a_time_and_keeps_empty_groups_and_none_keeps_all():
    rows = frame([prefill_row(median_ms=None, status="oom"), prefill_row(median_ms=4.0),
                  prefill_row(block_q=None, impl="sdpa_math", median_ms=9.0)])
    kept = selection.keep_best(rows, Rows(best=Best(("block_q",), "median_ms")))
    assert sorted(kept["median_ms"]) == [4.0, 9.0]  # the empty block_q is a group too
    assert selection.keep_best(rows.iloc[:1], Rows(best=Best(("T",), "median_ms"))).empty
    assert selection.keep_best(LENGTHS.iloc[:0], Rows(best=Best(("T",), "median_ms"))).empty
    assert len(selection.keep_best(LENGTHS, Rows())) == 4


# ---------------------------------------------------------------- dtype


BOTH = ["float32", "bfloat16"]


@pytest.mark.parametrize(("present", "dtype", "device", "judged"), [
    (BOTH, "fp16", "cpu", ["float32"]), (BOTH, "fp16", "cuda", ["float16"]),
    (BOTH, "bfloat16", "cpu", ["bfloat16"]), (BOTH, "float16", "cpu", ["float16"]),
    (BOTH, "each", "cpu", ["bfloat16", "float32"]), (BOTH, "any", "cpu", [None]),
    # 16-bit: fp16 itself wherever it exists, else bf16 (a CPU's 16-bit output), never fp32
    (BOTH, "16-bit", "cpu", ["bfloat16"]),
    (["float32", "float16", "bfloat16"], "16-bit", "cpu", ["float16"]),
    (["float32"], "16-bit", "cpu", ["bfloat16"]),       # none: bf16 is named, not fp32
])
def test_the_dtypes_judged(present, dtype, device, judged):
    rows = frame([prefill_row(dtype=d) for d in present])
    assert selection.dtypes_for(check(dtype=dtype), rows, device, STAND_IN) == judged


def test_no_dtype_column_or_no_dtype_present_means_no_filter():
    no_column = pd.DataFrame({"x": [1]})
    assert selection.dtypes_for(check(dtype="fp16"), no_column, "cpu", STAND_IN) == [None]
    empty = pd.DataFrame({"dtype": pd.Series([pd.NA], dtype="string")})
    assert selection.dtypes_for(check(dtype="each"), empty, "cpu", STAND_IN) == [None]


def test_a_dtype_without_rows_is_not_measurable_and_never_substituted():
    rows = frame([prefill_row(dtype="bfloat16")])
    with pytest.raises(NotMeasurable) as info:
        selection.select(check(), rows, "cpu", STAND_IN)
    assert info.value.cause == {"kind": "not_in_grid", "column": "dtype", "values": ["float32"],
                                "grid": ["bfloat16"], "stand_in": True}
    assert cause_text(info.value.cause) == (
        "no float32 rows (the fp16 stand-in here): this machine did not run float32; no "
        "other dtype is used in its place")
    with pytest.raises(NotMeasurable) as info:
        selection.select(check(dtype="float16"), rows, "cpu", STAND_IN)
    assert cause_text(info.value.cause) == ("no float16 rows: this machine did not run "
                                            "float16; no other dtype is used in its place")


def test_each_dtype_is_its_own_selection():
    rows = frame([prefill_row(dtype="float32"), prefill_row(dtype="bfloat16", median_ms=5.0)])
    sels = selection.select(check(dtype="each"), rows, "cpu", STAND_IN)
    assert [(s.dtype, list(s.frame["median_ms"])) for s in sels] == [("bfloat16", [5.0]),
                                                                      ("float32", [1.0])]


def test_no_row_left_by_the_filters_is_not_measurable_naming_them():
    with pytest.raises(NotMeasurable) as info:
        selection.select(check(where={"T": {"min": 8192}, "impl": ["sdpa_flash", "naive"]}),
                         LENGTHS, "cpu", STAND_IN)
    assert info.value.cause == {"kind": "not_in_grid", "dtype": "float32",
                                "where": {"T": {"min": 8192}, "impl": ["sdpa_flash", "naive"]}}
    assert cause_text(info.value.cause) == "no float32 rows with T=[8192, ], impl=sdpa_flash|naive"
    with pytest.raises(NotMeasurable) as info:
        selection.select(check(dtype="any", where={"T": {"max": 256}}), LENGTHS, "cpu",
                         STAND_IN)
    assert cause_text(info.value.cause) == "no rows with T=[, 256]"


# ---------------------------------------------------------------- scope and status


def test_the_scope_keeps_the_sentences_values_and_names_only_the_missing():
    rows = frame([prefill_row(T=1024), prefill_row(T=2048), prefill_row(T=4096, **OOM)])
    sels = selection.select(check(scope={"T": [1024, 4096, 8192]}), rows, "cpu", STAND_IN)
    assert list(sels[0].frame["T"]) == [1024]
    oom = {"status": "oom", "cause": "memory", "kind": "device_cannot", "rows": 1,
           "impl": ["naive"]}
    assert sels[0].missing == [
        {"column": "T", "value": 4096, "kind": "device_cannot", "statuses": [oom]},
        {"column": "T", "value": 8192, "kind": "not_in_grid"}]
    assert [missing_text(m) for m in sels[0].missing] == [
        "4096: 1 row(s) out of memory (naive)",
        "8192: not in this grid"]
    every = selection.select(check(scope={"T": [512, 1024]}), LENGTHS, "cpu", STAND_IN)
    assert every[0].missing == [] and every[0].left_out == []  # no note
    assert list(every[0].frame["T"]) == [512, 1024]


def test_a_scope_with_none_of_its_values_is_not_measurable_saying_what_the_grid_has():
    rows = frame([prefill_row(T=1024), prefill_row(T=2048, **error("boom"))])
    with pytest.raises(NotMeasurable) as info:
        selection.select(check(scope={"T": [2048, 8192]}), rows, "cpu", STAND_IN)
    assert info.value.cause["kind"] == "upstream_failed"  # an error before a grid's lack
    assert cause_text(info.value.cause) == (
        "needs T = 2048, 8192 (2048: 1 row(s) an error (naive); 8192: not in this grid; "
        "this grid has 1024, 2048)")


def test_failed_rows_are_counted_by_status_and_left_out_unless_status_is_named():
    rows = frame([prefill_row(T=1024), prefill_row(T=2048, **OOM),
                  prefill_row(T=4096, **OOM), prefill_row(T=4096, impl="tiled",
                                                          **error("x"))])
    sels = selection.select(check(), rows, "cpu", STAND_IN)
    assert list(sels[0].frame["T"]) == [1024]
    assert sels[0].left_out == [
        {"status": "error", "cause": "exception", "kind": "upstream_failed", "rows": 1,
         "impl": ["tiled"]},
        {"status": "oom", "cause": "memory", "kind": "device_cannot", "rows": 2,
         "impl": ["naive"]}]
    named = selection.select(check(where={"status": ["ok", "oom"]}), rows, "cpu", STAND_IN)
    assert list(named[0].frame["T"]) == [1024, 2048, 4096] and named[0].left_out == []


def test_rows_that_all_failed_are_not_measurable_with_their_cause():
    rows = frame([prefill_row(T=1024, status="dropped", cause="budget", budget_left_s=0.0,
                              median_ms=None)])
    with pytest.raises(NotMeasurable) as info:
        selection.select(check(), rows, "cpu", STAND_IN)
    assert info.value.cause == {"kind": "dropped_by_budget", "left_out": [
        {"status": "dropped", "cause": "budget", "kind": "dropped_by_budget", "rows": 1,
         "impl": ["naive"], "budget_left_s": 0.0}]}


def test_a_frame_without_status_keeps_every_row():
    plain = pd.DataFrame({"T": [1, 2]})
    notes: list[dict] = []
    assert len(selection.drop_failed(plain, notes, named_status=False)) == 2 and notes == []
    assert list(selection.apply_scope(plain, (("T", (2,)),), notes)["T"]) == [2]


# ---------------------------------------------------------------- names and flags


def test_plain_values_are_distinct_sorted_json_scalars():
    rows = frame([prefill_row(T=T) for T in (2048, 512, 2048)])
    assert selection.plain_values(rows["T"]) == [512, 2048]
    assert selection.plain_values(pd.Series([1.0, None, 3.5])) == [1, 3.5]
    assert selection.plain_values(pd.Series(["b", "a"], dtype="string")) == ["a", "b"]


@pytest.mark.parametrize(("value", "text"), [(8192.0, "8192"), (0.5, "0.5"), (True, "True"),
                                             (3, "3"), ("oom", "oom")])
def test_describe(value, text):
    assert selection.describe(value) == text


def test_non_finite_flags_follow_the_judged_columns_only_and_a_missing_flag_is_finite():
    rows = pd.DataFrame({"a": [1.0, 2.0, 3.0]}, index=[10, 11, 12])
    nonfinite = pd.DataFrame({"a": [False, True, False], "b": [True, False, False]},
                             index=[10, 11, 12])
    flagged = selection.with_nonfinite(rows, nonfinite, ["a"])
    assert list(flagged[selection.NONFINITE]) == [False, True, False]
    both = selection.with_nonfinite(rows, nonfinite, ["a", "b", "missing"])
    assert list(both[selection.NONFINITE]) == [True, True, False]
    subset = selection.with_nonfinite(rows.loc[[12]], nonfinite, ["a", "b"])
    assert list(subset[selection.NONFINITE]) == [False]
    unflagged = pd.DataFrame({"a": [1.0, 2.0]}, index=[12, 99])  # no flag for 99: finite
    flagged = selection.with_nonfinite(unflagged, nonfinite.assign(a=[True, False, False]),
                                       ["a"])
    assert flagged[selection.NONFINITE].tolist() == [False, False]
    assert flagged[selection.NONFINITE].dtype == bool


# ---------------------------------------------------------------- empty cells in the scope


MIXED = [prefill_row(impl="sdpa_math", block_q=None, status="unavailable",
                     cause="backend_refused", reason="no tiles"),
         prefill_row(block_q=128)]


@pytest.mark.parametrize(("rows", "grid"), [
    (MIXED, "128"), ([prefill_row(impl="sdpa_math", block_q=None)], "none")])
def test_an_empty_cell_is_not_a_value_the_scope_speaks_of(rows, grid):
    with pytest.raises(NotMeasurable) as info:
        selection.select(check(scope={"block_q": [64]}), frame(rows), "cpu", STAND_IN)
    assert cause_text(info.value.cause) == ("needs block_q = 64 (64: not in this grid; this "
                                            f"grid has {grid})")


def test_a_value_whose_rows_all_failed_is_named_by_their_status_alone():
    rows = frame(MIXED + [prefill_row(block_q=64, **OOM)])
    sels = selection.select(check(scope={"block_q": [64, 128]}), rows, "cpu", STAND_IN)
    assert [(m["value"], m["kind"]) for m in sels[0].missing] == [(64, "device_cannot")]
    assert list(sels[0].frame["block_q"]) == [128]
    ok_empty = frame([prefill_row(impl="sdpa_math", block_q=None),
                      prefill_row(block_q=64, **OOM), prefill_row(block_q=128)])
    sels = selection.select(check(scope={"block_q": [64, 128]}), ok_empty, "cpu", STAND_IN)
    assert [(m["value"], m["kind"]) for m in sels[0].missing] == [(64, "device_cannot")]


def test_several_statuses_of_one_value_are_all_counted():
    rows = frame([prefill_row(T=1024), prefill_row(T=2048, **OOM),
                  prefill_row(T=2048, impl="tiled", **error("z" * 54))])
    sels = selection.select(check(scope={"T": [1024, 2048]}), rows, "cpu", STAND_IN)
    (missing,) = sels[0].missing
    assert missing["kind"] == "upstream_failed"  # an error is named before a lack of memory
    assert [(s["status"], s["rows"]) for s in missing["statuses"]] == [("error", 1), ("oom", 1)]
