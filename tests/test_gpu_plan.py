"""The GPU call's plan (inferlab.workflow.gpu_plan), checked before anything runs: from the
stage declaration and config.yaml's cuda blocks, against the lent machine's limits."""

from __future__ import annotations

import re

import pytest

from inferlab.core.layout import REPO_ROOT
from inferlab.core.pipeline import STAGES
from inferlab.workflow import gpu_plan
from inferlab.workflow.config import deep_merge, load_config, validate_config

BOOK = [REPO_ROOT / "profiles" / "book.yaml"]


@pytest.fixture(scope="module")
def committed() -> gpu_plan.Plan:
    return gpu_plan.load_plan(BOOK)


def test_the_committed_plan_fits_with_a_quarter_to_spare_under_every_limit(committed):
    for check in committed.checks():
        assert check.margin >= gpu_plan.MARGIN, gpu_plan.report(committed)
    assert committed.problems() == []


def test_the_steps_are_the_device_stages_in_order_then_the_extras(committed):
    """The stages that run on the device, in their declared order, are what the plan
    holds; the device-free ones (any host derives them once the call's evidence is
    merged), ncu's bytes and the tests run in what is left."""
    on_device = [n for n, s in STAGES.items() if s.needs_device]
    derived = [n for n, s in STAGES.items() if not s.needs_device]
    assert on_device and derived
    names = [s.name for s in committed.steps]
    assert names == [f"stage-{n}" for n in on_device + derived] + \
        ["ncu", "tests-kernels", "tests-cuda"]
    assert [s.planned for s in committed.steps] == \
        [True] * len(on_device) + [False] * (len(derived) + 3)
    # each derived stage after everything it reads
    order = {s.stage: i for i, s in enumerate(committed.steps) if s.stage}
    for name, stage in STAGES.items():
        assert all(order[up] < order[name] for up in stage.reads), name


def test_a_timing_stage_stops_timing_before_its_backstop(committed):
    for step in committed.steps:
        if step.budget_s is not None:
            assert step.budget_s < step.limit_s < step.timeout_s
            assert step.points and step.workers and step.rounds
            assert step.timeout_s - step.limit_s >= gpu_plan.STOP_GRACE_S


def test_only_the_stages_that_stop_at_a_limit_are_given_one(committed):
    # --limit-s reaches the stage as ctx.stop_at, which only the point-timed stages read
    # (workers.time_points); probe's 22 s and model's 1 s were a limit nothing obeyed.
    for step in committed.steps:
        assert (step.limit_s is not None) == (step.budget_s is not None), step


@pytest.mark.parametrize(("stage", "budget_s"), [("prefill", 300), ("decode", 120)])
def test_the_budgets_before_this_plan_did_not_fit(stage, budget_s):
    # config.yaml's cuda blocks gave prefill 300 s and decode 120 s: the script killed them
    # at 130 s and 100 s, and a killed stage wrote nothing.
    raw = validate_config(deep_merge(load_config(BOOK), {stage: {"cuda": {"budget_s": budget_s}}}))
    problems = gpu_plan.plan(raw).problems()
    assert problems and "the script's budget" in problems[0]
    assert "budget_s in config.yaml" in problems[0]  # the fix, named


def test_the_steps_text_is_what_the_script_reads(committed):
    text = gpu_plan.steps_text(committed)
    assert text.splitlines()[:3] == [f"budget_s {committed.budget_s}",
                                      f"timeout_s {committed.call_timeout_s}",
                                      f"kill_after_s {gpu_plan.KILL_AFTER_S}"]
    steps = [line.split() for line in text.splitlines() if line.startswith("step ")]
    assert [s[1] for s in steps] == [s.name for s in committed.steps]
    prefill = next(s for s in steps if s[2] == "prefill")
    assert int(prefill[3]) > 65 and int(prefill[4]) > int(prefill[3])


def test_the_script_restates_no_stage():
    # The stage list, order and limits come from the plan: no stage is named in the
    # script's code (today's lacked manuscript and killed prefill at 130 s).
    code = [line for line in (REPO_ROOT / "scripts" / "gpu-check.sh").read_text().splitlines()
            if not line.lstrip().startswith("#")]
    for name in STAGES:
        named = [line for line in code if re.search(rf"\b{name}\b", line)]
        assert not named, f"scripts/gpu-check.sh restates stage {name}: {named}"
    assert any("inferlab.workflow.gpu_plan" in line for line in code)


def test_the_cli_check_exits_1_with_the_fix_when_the_plan_does_not_fit(tmp_path, capsys):
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text("device: cuda\nprefill: {cuda: {budget_s: 400}}\n")
    assert gpu_plan.main(["check", "--configfile", str(heavy)]) == 1
    assert "lower the cuda blocks' budget_s" in capsys.readouterr().err
    assert gpu_plan.main(["check"]) == 0


def test_the_docs_time_model_is_the_plans(committed):
    from inferlab.workflow import gpu_plan_doc

    text = gpu_plan_doc.DOC.read_text(encoding="utf-8")
    expected = gpu_plan_doc.replaced(text, gpu_plan_doc.render(committed))
    assert text == expected, ("docs/gpu-run.md's time model is not the plan's: run python -m "
                              "inferlab.workflow.gpu_plan_doc --write")


def test_a_doc_without_the_generated_block_says_where_it_goes():
    from inferlab.workflow import gpu_plan_doc

    with pytest.raises(ValueError, match="no generated block"):
        gpu_plan_doc.replaced("# The first GPU run\n", "table")
