"""A timed Triton configuration is checked once at the stage's sizes (issue 19): a kernel
whose output is wrong there is a row with that status, never a timing. CUDA is stood in
for by letting the stage time the kernels on a CPU (under Triton's interpreter)."""

from __future__ import annotations

import pytest
import torch

from inferlab.algorithms import kernels
from inferlab.measurement.status import status_fields
from inferlab.stages import decode, prefill
from inferlab.workflow.config import effective_config, load_config


def _params(module, stage: str, overrides: list[str]):
    raw = load_config(overrides=["device=cpu", *overrides])
    return module.Params.from_config(effective_config(raw, stage, "cpu"))


@pytest.fixture
def timeable_here(monkeypatch):
    """The kernels timeable on this CPU, run by Triton's interpreter (which reads
    TRITON_INTERPRET at run time too; conftest imported them with it set)."""
    if not kernels.AVAILABLE:
        pytest.skip(f"inferlab.algorithms.kernels cannot run here: {kernels.triton_status()[1]}")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(kernels, "not_timeable", lambda device: None)


def test_prefill_refuses_an_inexact_triton_configuration(monkeypatch, timeable_here, make_qkv):
    params = _params(prefill, "prefill", ["prefill.d=16", "prefill.implementations=[triton]",
                                          "prefill.triton_blocks=[16, 32]"])
    q, k, v = make_qkv((1, 2, 48, 16))
    exact = kernels.flash_attention

    def wrong_at_32(q, k, v, causal, block_m, block_n):
        out = exact(q, k, v, causal, block_m, block_n)
        return out * 1.01 if block_m == 32 else out

    monkeypatch.setattr(kernels, "flash_attention", wrong_at_32)
    cases, meta, refused = prefill._cases(params, q, k, v, True, ((), []))
    assert list(cases) == ["triton_flash block=16 causal"]
    assert [r["block_q"] for r in refused] == [32]
    bad = status_fields(refused[0]["status"])  # as the row gets it: data, no prose
    assert (bad["status"], bad["cause"]) == ("error", "inexact")
    assert bad["max_error"] > bad["error_bound"] > 0


def test_decode_refuses_an_inexact_triton_configuration(monkeypatch, timeable_here, make_qkv):
    params = _params(decode, "decode", ["decode.d=16", "decode.splits=[1, 4]"])
    q, _, _ = make_qkv((1, 2, 1, 16))
    _, k, v = make_qkv((1, 2, 64, 16))
    exact = kernels.flash_decode
    monkeypatch.setattr(kernels, "flash_decode", lambda q, k, v, s: exact(q, k, v, s)
                        if s == 1 else torch.zeros_like(q))
    cases, meta, refused = decode._cases(params, q, k, v, ((), []))
    assert [c for c in cases if c.startswith("triton")] == ["triton_decode splits=1"]
    assert [(r["splits"], status_fields(r["status"])["cause"]) for r in refused] == [
        (4, "inexact")]


def test_one_profiled_call_reads_both_memory_and_kernel_on_a_cpu(monkeypatch, make_qkv):
    """The memory reading's profiler session names the kernel too: at 8,192 tokens each
    extra profiled call of naive attention cost 11.7 s."""
    from inferlab.algorithms.attention import naive_attention

    def second_call(fn):
        raise AssertionError("kernel_that_ran profiled the case a second time")

    monkeypatch.setattr(prefill, "kernel_that_ran", second_call)
    q, k, v = make_qkv((1, 2, 64, 16))
    reading = prefill._memory_and_kernel(lambda: naive_attention(q, k, v, True), None, "cpu")
    assert reading["peak_extra_bytes"] > 0
    assert reading["kernel"].startswith("aten::")  # named from the same session
