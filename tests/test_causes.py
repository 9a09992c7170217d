"""Why a claim is not measurable here, as data (inferlab.judging.causes), one test per cause,
each reproducing a false reason the committed claims.json gave, and the words rendered at
the edge (inferlab.presentation.claim_text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferlab.evidence import artifacts
from inferlab.evidence.register import Evidence
from inferlab.judging import claims, verdicts
from inferlab.judging.causes import CAUSES, NotMeasurable, row_cause
from inferlab.judging.claims import Claim
from inferlab.measurement.status import CAUSES as ROW_CAUSES
from inferlab.presentation.claim_text import STATUS_WORDS, cause_text, reason_text
from tests.test_verdicts import CPU_KEY as KEY
from tests.test_verdicts import evidence_of as evidence

ROOT = Path("/nonexistent-root")
LENGTHS = {"T": [1024, 8192], "causal": [True]}


def prefill_row(**cells) -> dict:
    row = {"impl": "naive", "fused_sdpa": False, "T": 1024, "batch": 1, "heads": 12, "d": 64,
           "dtype": "float32", "causal": True, "block_q": None, "block_k": None,
           "threads": 1, "flops": 1, "median_ms": 4.0, "ratio": 1.0, "ratio_to": "naive",
           "status": "ok"}
    return {**row, **cells}


NOT_RUN = {"median_ms": None, "ratio": None}
DROPPED = {"status": "dropped", "cause": "budget", "budget_left_s": 0.0, **NOT_RUN}


def judged(spec: dict, found: dict, stage: str = "prefill", kind: str = "measured",
           premises: dict | None = None, key: str = KEY) -> dict:
    claim = Claim("C13-99", "A sentence.", "v", kind, claims._check({"stage": stage, **spec},
                                                                    premises))
    result = verdicts.evaluate(claim, found, key, ROOT)
    artifacts.encode("claims", {"schema_version": 3, "machine": KEY, "grid": None,
                                "claims": [result]})  # claims.json's schema takes it
    return result | {"text": reason_text(result, claim, key)}


SPEED = {"scope": LENGTHS, "where": {"impl": "naive"},
         "value": {"column": "median_ms", "stat": "max"}, "expect": {"max": 10}}


def test_the_vocabulary_is_claims_jsons_and_words_are_not_a_cause():
    result = artifacts.schema("claims")["$defs"]["result"]["properties"]
    assert tuple(result["cause"]["properties"]["kind"]["enum"]) == CAUSES
    with pytest.raises(ValueError, match="cause kind='nonsense' is not one of"):
        NotMeasurable("nonsense", column="T")
    with pytest.raises(ValueError, match="is not one of"):
        NotMeasurable("needs two runs of prefill")


@pytest.mark.parametrize(("status", "cause", "kind"), [
    ("dropped", "budget", "dropped_by_budget"), ("dropped", "slow_path", "device_cannot"),
    ("dropped", "killed", "upstream_failed"), ("stopped", "step_limit", "stopped_at_limit"),
    ("unavailable", "backend_refused", "device_cannot"), ("oom", "memory", "device_cannot"),
    ("error", "exception", "upstream_failed"), ("error", "inexact", "device_cannot"),
    *[("unavailable", c, "device_cannot") for c in ("no_cuda_build", "no_cuda_device",
                                                    "not_on_cuda", "no_triton",
                                                    "triton_driver")]])
def test_each_row_status_has_its_cause(status, cause, kind):
    assert row_cause(status, cause) == kind


def test_every_status_and_cause_a_row_may_have_is_said_in_words():
    """Every (status, cause) of the row contract has words, so none is shown as its enum."""
    assert {(s, c) for s, causes in ROW_CAUSES.items() for c in causes} == set(STATUS_WORDS)


def test_not_in_grid_when_the_grid_has_no_row_at_the_value():
    result = judged(SPEED, evidence("prefill", [prefill_row()]))
    assert result["verdict"] == "reproduced"  # 1024 judged; 8192 said, not dropped
    (missing,) = result["judged"][0]["missing"]
    assert missing == {"column": "T", "value": 8192, "kind": "not_in_grid"}
    only = judged({**SPEED, "scope": {"T": [8192]}}, evidence("prefill", [prefill_row()]))
    assert only["cause"] == {"kind": "not_in_grid", "column": "T", "missing": [missing],
                             "grid": [1024]}
    assert only["text"] == "needs T = 8192 (8192: not in this grid; this grid has 1024)"


def test_dropped_by_budget_is_never_called_not_in_the_grid():
    """The committed claims.json said "8192: not in this grid" for a point the budget dropped."""
    rows = [prefill_row(), prefill_row(T=8192, **DROPPED)]
    result = judged({**SPEED, "scope": {"T": [8192]}}, evidence("prefill", rows))
    assert result["verdict"] == "not measurable here"
    assert result["cause"]["kind"] == "dropped_by_budget"
    (missing,) = result["cause"]["missing"]
    assert missing["statuses"] == [{"status": "dropped", "cause": "budget",
                                    "kind": "dropped_by_budget", "rows": 1, "impl": ["naive"],
                                    "budget_left_s": 0.0}]
    assert "not in this grid" not in result["text"]
    assert "8192: 1 row(s) dropped: the stage's time budget was spent" in result["text"]
    assert "(0 s left)" in result["text"]


def test_an_older_table_s_dropped_status_reads_as_dropped_by_budget():
    """A prefill.csv from before the status was data is upgraded by the artifact reader."""
    rows = [prefill_row(), prefill_row(T=8192, **DROPPED)]
    header, *lines = artifacts.encode("prefill", rows).decode().splitlines()
    gone = {"cause", "reason", "budget_left_s", "process_sd", "causal_over_full_process_sd"}
    old = ""
    for line in (header, *lines):
        cells = dict(zip(header.split(","), line.split(","), strict=True))
        if cells["status"] == "dropped":
            cells["status"] = "dropped: 0.0 s of the stage budget left for this worker"
        old += ",".join(v for c, v in cells.items() if c not in gone) + "\n"
    table = artifacts.decode("prefill", old.encode())
    found = {"prefill": Evidence("prefill", ROOT / "prefill.csv", table, None, None)}
    result = judged({**SPEED, "scope": {"T": [8192]}}, found)
    assert result["cause"]["kind"] == "dropped_by_budget"


@pytest.mark.parametrize(("cells", "kind", "words"), [
    ({"status": "stopped", "cause": "step_limit"}, "stopped_at_limit",
     "8192: 1 row(s) stopped: the stage reached its limit first"),
    ({"status": "error", "cause": "exception", "reason": "boom"}, "upstream_failed",
     "8192: 1 row(s) an error (naive)")])
def test_stopped_at_limit_and_upstream_failed_when_its_rows_raised(cells, kind, words):
    rows = [prefill_row(), prefill_row(T=8192, **cells, **NOT_RUN)]
    result = judged({**SPEED, "scope": {"T": [8192]}}, evidence("prefill", rows))
    assert result["cause"]["kind"] == kind
    assert words in result["text"]


def test_device_cannot_for_a_cuda_check_and_for_a_refused_backend():
    needs = judged({**SPEED, "device": "cuda"}, evidence("prefill", [prefill_row()]))
    assert needs["cause"] == {"kind": "device_cannot", "needs": "cuda", "device": "cpu"}
    assert needs["text"] == f"needs a CUDA device; {KEY} ran on cpu"
    refused = [prefill_row(impl="sdpa_cudnn", fused_sdpa=True, status="unavailable",
                           cause="backend_refused", reason="needs sm80", **NOT_RUN)]
    fused = judged({"where": {"fused_sdpa": True}, "value": {"column": "median_ms",
                                                             "stat": "max"},
                    "expect": {"max": 10}}, evidence("prefill", refused))
    assert fused["cause"]["kind"] == "device_cannot"
    assert fused["cause"]["left_out"][0]["cause"] == "backend_refused"
    assert "unavailable: the backend refused" in fused["text"]


def test_upstream_failed_when_the_stage_did_not_run_or_cannot_be_read():
    missing = judged(SPEED, evidence("prefill", None))
    assert missing["cause"] == {"kind": "upstream_failed", "stage": "prefill",
                                "state": "missing"}
    found = evidence("prefill", None)
    found["prefill"].error = "row 3: bad cell"
    unreadable = judged(SPEED, found)
    assert unreadable["cause"]["state"] == "unreadable"
    assert unreadable["text"].endswith("prefill.csv cannot be read: row 3: bad cell")


def traffic_row(T: int, measured: float | None) -> dict:
    return {"T": T, "d": 64, "causal": True, "dtype": "float32", "tile": "assumed",
            "block_q_model": 128, "model_ratio": 10.0, "measured_ratio": measured,
            "measured_ratio_ci_low": measured, "measured_ratio_ci_high": measured}


def test_a_derived_stage_s_empty_or_absent_point_takes_the_timed_stage_s_cause():
    """traffic.csv's row at 8,192 tokens has no measured ratio because prefill dropped the
    point: dropped by the budget, not "not applicable"."""
    prefill = [prefill_row(), prefill_row(T=8192, **DROPPED)]
    spec = {"dtype": "any", "scope": {"T": [1024, 8192]}, "where": {"causal": True},
            "value": {"column": "measured_ratio", "stat": "range"},
            "expect": {"direction": ">1"}}
    found = evidence("traffic", [traffic_row(1024, 2.0), traffic_row(8192, None)],
                     prefill=prefill)
    empty = judged(spec, found, stage="traffic")
    assert empty["verdict"] == "reproduced"
    (missing,) = empty["judged"][0]["missing"]
    assert (missing["value"], missing["kind"], missing["stage"]) == \
        (8192, "dropped_by_budget", "prefill")
    assert empty["judged"][0]["not_applicable"] == 0
    absent = evidence("traffic", [traffic_row(1024, 2.0)], prefill=prefill)
    (missing,) = judged(spec, absent, stage="traffic")["judged"][0]["missing"]
    assert missing["kind"] == "dropped_by_budget"


def test_too_few_runs_for_a_between_run_claim():
    error = NotMeasurable("too_few_runs", stage="prefill", rows=3)
    assert error.cause == {"kind": "too_few_runs", "stage": "prefill", "rows": 3}
    assert cause_text({"kind": "too_few_runs"}, KEY).startswith("needs two runs")


def probe(ran: bool) -> dict:
    row = {"dtype": "float32", "causal": False, "T": 1024, "heads": 12, "d": 64,
           "backend": "flash", "can_run": ran, "ran": ran, "reason": None if ran else "x",
           "reason_source": "pytorch", "limit_kind": None if ran else "build", "op": None,
           "error": None}
    return {"environment": {"device": "cpu"}, "availability": [row],
            "ceilings": {"copy_gbs": 1.0, "matmul_gflops": {"float32": 1.0},
                         "copy_bytes": 1, "matmul_sizes": [1],
                         "matmul_gflops_by_size": {"float32": {"1": 1.0}}, "method": "x",
                         "timings": {}}}


def test_not_applicable_where_the_backend_ran_is_not_no_rows_match():
    """C13-51 on a CPU: flash ran, so it has no refusal kind (claims.json said "no rows
    match the filter")."""
    spec = {"device": "cuda", "dtype": "any", "where": {"backend": "flash"},
            "value": {"column": "limit_kind", "stat": "range"}, "expect": {"equals": "build"}}
    result = judged(spec, evidence("probe", probe(ran=True)), stage="probe",
                    kind="device-specific")
    assert result["verdict"] == "not comparable on this device"
    assert result["cause"] == {"kind": "not_applicable", "column": "limit_kind", "rows": 1}
    assert "no rows match" not in result["text"]
    assert result["text"].startswith("every selected row has an empty limit_kind")


READ_8192 = {"scope": {"T": [4096, 8192]}, "where": {"impl": "naive"},
             "value": {"column": "peak_extra_bytes", "per": "score_matrix", "stat": "max"},
             "expect": {"between": [2.0, 2.1]}}


def test_a_reading_not_taken_is_stopped_at_the_limit_not_that_it_does_not_apply():
    """A stage that stops reading at its step limit leaves timed rows without peak memory:
    stopped at the limit, not "not applicable"."""
    scores = 12 * 4096 * 4096 * 4
    rows = [prefill_row(T=4096, peak_extra_bytes=int(2.05 * scores)),
            prefill_row(T=8192, peak_extra_bytes=None)]
    some = judged(READ_8192, evidence("prefill", rows))
    assert some["verdict"] == "reproduced" and some["judged"][0]["not_applicable"] == 0
    assert some["judged"][0]["missing"] == [{"column": "T", "value": 8192,
                                             "kind": "stopped_at_limit",
                                             "reading": "peak_extra_bytes", "rows": 1}]
    assert "1 value(s) of T not measured here: 8192: 1 row(s) timed, its peak_extra_bytes " \
        "reading not taken (a stage reads after its timings and stops reading at its " \
        "limit)" in some["text"]
    assert "not applicable" not in some["text"]
    none = judged({**READ_8192, "scope": {"T": [8192]}}, evidence("prefill", rows[1:]))
    assert none["verdict"] == "not measurable here"
    assert none["cause"]["kind"] == "stopped_at_limit"
    assert "does not apply" not in none["text"] and "reading not taken" in none["text"]


def test_claims_json_holds_no_prose():
    result = judged(SPEED, evidence("prefill", [prefill_row()]))
    stored = {k: v for k, v in result.items() if k != "text"}
    assert not {"reason", "note", "chapter_value"} & set(stored)
    assert all(not isinstance(v, str) or k in ("id", "kind", "verdict", "unit", "answer",
                                               "device")
               for k, v in stored.items())


# ---------------------------------------------------------------- a premise that fails here


def intensity_row(T: int, intensity: float, **cells) -> dict:
    return {**traffic_row(T, 2.0), "fastest_fused": True, "naive_intensity": intensity,
            "machine_balance": 10.0, **cells}


BYTES_BOUND = claims.Premise("bytes_bound", "naive attention is bound by its bytes",
                             check=claims._check({
                                 "stage": "traffic", "dtype": "any",
                                 "value": {"column": "naive_intensity",
                                           "over": "machine_balance", "stat": "range"},
                                 "expect": {"direction": "<1"}}))
REREAD = claims.Premise("reread", "K and V are re-read per query tile",
                        refuted_on=("cuda-h200-box",), measured="19 MB, not 415 MB",
                        to_judge="the byte count as a stage artifact")
RESTS = {"dtype": "any", "premises": ["bytes_bound", "reread"],
         "value": {"column": "measured_ratio", "stat": "range"}, "expect": {"direction": ">1"}}
PREMISES = {"bytes_bound": BYTES_BOUND, "reread": REREAD}


FASTER = claims.Premise("faster", "the fused kernel is faster", check=claims._check({
    "stage": "traffic", "dtype": "any",
    "value": {"column": "measured_ratio", "stat": "range"}, "expect": {"direction": ">1"}}))
NOISY = evidence("traffic", [intensity_row(1024, 3.0, measured_ratio=1.2,
                                           measured_ratio_ci_low=0.9, measured_ratio_ci_high=1.5)])


def test_a_premise_whose_check_fails_here_leaves_no_verdict_whatever_the_kind():
    """On a CPU naive attention is not bound by its bytes, so a ratio of times does not
    stand for one of bytes (C13-21, C13-49): nothing is judged, nor shown beside."""
    found = evidence("traffic", [intensity_row(1024, 30.0), intensity_row(2048, 25.0)])
    for kind in ("measured", "device-specific", "question"):
        result = judged({**RESTS, "device": "cuda"} if kind == "device-specific" else RESTS,
                        found, stage="traffic", kind=kind, premises=PREMISES)
        assert result["verdict"] == "not measurable here", kind
        assert result["value"] is None and result["answer"] is None
        assert result["cause"] == {"kind": "premise_fails", "premise": "bytes_bound",
                                   "verdict": "not reproduced", "value": [2.5, 3.0],
                                   "interval": [2.5, 3.0]}
    assert result["text"] == ("its premise bytes_bound does not hold here: naive attention "
                              "is bound by its bytes; its value here is 2.50–3, needs "
                              "below 1")
    holds = evidence("traffic", [intensity_row(1024, 3.0), intensity_row(2048, 2.5)])
    bound_alone = {**RESTS, "premises": ["bytes_bound"]}  # the check that holds decides
    assert judged(bound_alone, holds, stage="traffic", premises=PREMISES)["verdict"] == \
        "reproduced"


def test_a_premise_refuted_on_one_machine_and_measured_on_no_other_leaves_no_verdict():
    """The H200's Nsight Compute count refuted K and V re-read per query tile: the cause
    names premise and machine, the words the measurement and what would make it a check.
    A premise holds only where something shows it, never where it merely was not refuted:
    elsewhere the cause says nothing here measures it, and where it was."""
    found = evidence("traffic", [intensity_row(1024, 3.0)])
    result = judged(RESTS, found, stage="traffic", premises=PREMISES, key="cuda-h200-box")
    assert result["verdict"] == "not measurable here"
    assert result["cause"] == {"kind": "premise_fails", "premise": "reread",
                               "machine": "cuda-h200-box"}
    assert result["text"] == ("its premise reread was refuted by a measurement on "
                              "cuda-h200-box: K and V are re-read per query tile; measured: "
                              "19 MB, not 415 MB; what would judge it: the byte count as a "
                              "stage artifact")
    for key in ("cuda-other-box", KEY):
        result = judged(RESTS, found, stage="traffic", premises=PREMISES, key=key)
        assert result["verdict"] == "not measurable here" and result["value"] is None
        assert result["cause"] == {"kind": "premise_unmeasured", "premise": "reread"}
    assert result["text"] == ("nothing here measures its premise reread: K and V are re-read "
                              "per query tile; it was measured only on cuda-h200-box, where it "
                              "did not hold (19 MB, not 415 MB); what would judge it: the byte "
                              "count as a stage artifact")


def test_a_question_about_a_premise_is_answered_by_it_where_it_fails():
    """A question asking whether a premise holds (check.asks) is answered by its failure:
    no where refuted, undecided where within noise, unanswered where nothing measures it."""
    asks = {**RESTS, "premises": ["reread"], "asks": "reread"}
    found = evidence("traffic", [intensity_row(1024, 3.0)])
    refuted = judged(asks, found, "traffic", "question", PREMISES, key="cuda-h200-box")
    assert (refuted["verdict"], refuted["answer"]) == ("answered here", "no")
    assert refuted["cause"] == {"kind": "premise_fails", "premise": "reread",
                                "machine": "cuda-h200-box"}
    assert refuted["text"].endswith("; answered here: no; judged on cuda-h200-box")
    unmeasured = judged(asks, found, "traffic", "question", PREMISES)
    assert unmeasured["verdict"] == "not measurable here" and unmeasured["answer"] is None
    spec = {**asks, "premises": ["faster"], "asks": "faster"}
    assert judged(spec, NOISY, "traffic", "question", {"faster": FASTER})["answer"] == \
        "undecided"


def test_a_premise_within_noise_is_not_established_and_one_not_measurable_says_why():
    spec = {**RESTS, "premises": ["faster"], "value": {"column": "model_ratio", "stat": "max"}}
    result = judged(spec, NOISY, stage="traffic", premises={"faster": FASTER})
    assert result["cause"]["verdict"] == "within noise here"
    assert result["text"].startswith("its premise faster is not established here (within "
                                     "noise): the fused kernel is faster; its value here is "
                                     "1.20 (95 % interval 0.900–1.50), needs above 1")
    none = evidence("traffic", [intensity_row(1024, None)])
    result = judged(RESTS, none, stage="traffic", premises=PREMISES)
    assert result["cause"] == {"kind": "not_applicable", "column": "naive_intensity",
                               "rows": 1}
