"""A timed Triton configuration is checked once at the stage's sizes: a kernel
whose output is wrong there is a row with that status, never a timing. CUDA is stood in
for by letting the stage time the kernels on a CPU (under Triton's interpreter)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferlab.algorithms import implementations, kernels
from inferlab.measurement.status import status_fields
from inferlab.stages import decode, prefill
from tests.test_stages import _params


@pytest.fixture
def timeable_here(monkeypatch):
    """The kernels timeable on this CPU, run by Triton's interpreter (which reads
    TRITON_INTERPRET at run time too; conftest imported them with it set)."""
    if not kernels.AVAILABLE:
        pytest.skip(f"inferlab.algorithms.kernels cannot run here: {kernels.triton_status()[1]}")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for impl in ("triton_flash", "triton_decode"):
        entry = implementations.get(impl)
        launch = replace(entry.launch, not_timeable=lambda device: None)
        monkeypatch.setitem(implementations.IMPLEMENTATIONS, impl, replace(entry, launch=launch))


def _ours_wrong(monkeypatch, impl: str, wrong) -> None:
    """Our kernel's registry entry with its output made wrong where ``wrong(args)`` says."""
    entry = implementations.get(impl)

    def run(*args):
        out = entry.run(*args)
        return out * 1.01 if wrong(args) else out

    monkeypatch.setitem(implementations.IMPLEMENTATIONS, impl, replace(entry, run=run))


def test_prefill_times_the_chosen_configuration_and_names_it(timeable_here, make_qkv):
    params = _params("prefill", ["prefill.d=16", "prefill.implementations=[triton_flash]"])
    q, k, v = make_qkv((1, 2, 48, 16))
    config = kernels.PrefillConfig(16, 32, 4, 2)
    cases, meta, refused = prefill._cases(params, q, k, v, True, ((), []),
                                          {("triton_flash", True): config})
    assert list(cases) == ["triton_flash causal"] and not refused
    fields = meta["triton_flash causal"]
    assert fields["kernel"] == "triton_flash[BM16,BN32,w4,s2]"
    assert (fields["block_q"], fields["block_k"]) == (16, 32)


def test_prefill_refuses_an_inexact_triton_configuration(monkeypatch, timeable_here, make_qkv):
    params = _params("prefill", ["prefill.d=16", "prefill.implementations=[triton_flash]"])
    q, k, v = make_qkv((1, 2, 48, 16))
    _ours_wrong(monkeypatch, "triton_flash", lambda args: args[4].block_m == 32)
    launches = {("triton_flash", True): kernels.PrefillConfig(32, 16, 4, 2)}
    cases, meta, refused = prefill._cases(params, q, k, v, True, ((), []), launches)
    assert not cases and [r["block_q"] for r in refused] == [32]
    bad = status_fields(refused[0]["status"])  # as the row gets it: data, no prose
    assert (bad["status"], bad["cause"]) == ("error", "inexact")
    assert bad["max_error"] > bad["error_bound"] > 0


def test_decode_refuses_an_inexact_triton_configuration(monkeypatch, timeable_here, make_qkv):
    params = _params("decode", ["decode.d=16", "decode.splits=[1, 4]"])
    q, _, _ = make_qkv((1, 2, 1, 16))
    _, k, v = make_qkv((1, 2, 64, 16))
    _ours_wrong(monkeypatch, "triton_decode", lambda args: args[3] != 1)
    launches = {"triton_decode": kernels.DEFAULT_DECODE}
    cases, meta, refused = decode._cases(params, q, k, v, ((), []), launches, None)
    assert [c for c in cases if c.startswith("triton")] == ["triton_decode splits=1"]
    assert [(r["splits"], status_fields(r["status"])["cause"]) for r in refused] == [
        (4, "inexact")]


@pytest.mark.parametrize("keys, chosen", [(768, 3), (1024, 4)])
def test_decode_times_our_kernel_at_its_chosen_split_count_beside_the_grids(
        timeable_here, make_qkv, keys, chosen):
    """On a GPU of 2 multiprocessors (2 programs a split: batch 1, 2 heads) the rule
    chooses 3 splits of 256 keys at 768 keys, 4 at 1,024: one of the grid's counts,
    then one row that is both."""
    assert kernels.decode_splits(keys, 2, 2, kernels.DEFAULT_DECODE.waves) == chosen
    params = _params("decode", ["decode.d=16", "decode.splits=[1, 4]"])
    q, _, _ = make_qkv((1, 2, 1, 16))
    _, k, v = make_qkv((1, 2, keys, 16))
    cases, meta, refused = decode._cases(params, q, k, v, ((), []),
                                         {"triton_decode": kernels.DEFAULT_DECODE}, 2)
    ours = {meta[c]["splits"]: meta[c] for c in cases if c.startswith("triton_decode")}
    assert sorted(ours) == sorted({1, 4, chosen}) and not refused
    assert [s for s, m in ours.items() if m["splits_chosen"]] == [chosen]
    assert ours[chosen]["kernel"] == "triton_decode[BN128,w4,s3,waves4]"
    assert ours[1]["kernel"] == "triton_decode[BN128,w4,s3]"


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
