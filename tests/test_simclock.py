"""The simulated GPU clock (inferlab.measurement.simclock): the chapter's figures, a
virtual clock shared by processes, and never a measurement."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from inferlab.core.layout import REPO_ROOT
from inferlab.measurement import clocks, simclock
from inferlab.measurement.measure import time_interleaved


@pytest.mark.parametrize(("T", "naive_over_fused"), [(1024, 7.8), (2048, 13.5), (4096, 9.5),
                                                     (8192, 8.6)])
def test_prefill_times_are_the_chapters(T, naive_over_fused):
    fused = simclock.prefill_seconds("sdpa_efficient", T, 1, causal=False)
    assert simclock.prefill_seconds("naive", T, 1, False) / fused == pytest.approx(naive_over_fused)
    assert simclock.prefill_seconds("tiled", T, 1, False) / \
        simclock.prefill_seconds("naive", T, 1, False) == pytest.approx(23)
    assert simclock.prefill_seconds("sdpa_flash", T, 1, True) / fused == pytest.approx(0.71)


def test_the_fused_kernel_at_8192_tokens_is_the_slower_run():
    # "where the two runs disagreed (7.8 and 13.0 ms for the fused kernel)"
    assert simclock.prefill_seconds("sdpa_efficient", 8192, 1, False) == pytest.approx(13.0e-3)


def test_decode_at_16384_keys_is_the_chapters():
    # "571 to 751 us against 992": the split implementation against the fused kernel
    assert simclock.decode_seconds("splitkv", 16384, 1) == pytest.approx(751e-6, rel=0.01)
    assert simclock.decode_seconds("sdpa_efficient", 16384, 1) == pytest.approx(1.0e-3, rel=0.02)
    assert simclock.decode_seconds("splitkv", 1024, 1) == simclock.SPLIT_FLOOR_S  # ~400 us


def test_an_unknown_case_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="impl='flash3'.*naive, tiled"):
        simclock.prefill_seconds("flash3", 1024, 1, False)


def test_the_clock_calls_nothing_and_reads_the_cases_shape():
    calls = []
    q = torch.randn(1, 1, 2048, 16, generator=torch.Generator().manual_seed(0))

    def case():
        calls.append(q)

    clock = simclock.SimulatedClock(lambda: case(), label="naive causal")
    assert clock.shapes == [(1, 1, 2048, 16)]  # found through the callable it calls
    clock = simclock.SimulatedClock(lambda q=q, k=q: calls.append((q, k)), label="naive full")
    seconds = clock.seconds_per_call(5)
    assert calls == []
    expected = simclock.prefill_seconds("naive", 2048, 1, False)
    assert seconds == pytest.approx(expected, rel=5 * simclock.NOISE_SD)
    assert clock.last_wall_s == pytest.approx(simclock.wall_seconds(seconds))


def test_virtual_time_is_shared_by_every_process_and_advanced_by_timings(tmp_path):
    state = tmp_path / "seconds"
    simclock.advance(2.5, state)
    code = ("import sys; from inferlab.measurement import simclock; simclock.install(sys.argv[1]);"
            " import time; simclock.advance(10.0); print(simclock.offset())")
    done = subprocess.run([sys.executable, "-c", code, str(state)], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    # 2.5 before, the process's start on the GPU, then its own 10 s
    assert float(done.stdout) == pytest.approx(2.5 + simclock.PROCESS_START_S + 10.0)
    assert simclock.offset(state) == pytest.approx(float(done.stdout))


def test_installed_the_harness_times_on_it_and_says_so(tmp_path, monkeypatch):
    real_time, real_perf = time.time, time.perf_counter
    monkeypatch.setattr(simclock, "_state", None)
    try:
        simclock.install(tmp_path / "seconds")
        started = time.perf_counter()
        q = torch.randn(1, 1, 4096, 8, generator=torch.Generator().manual_seed(1))
        timings = time_interleaved({"sdpa_flash full": lambda: (q, q)}, threads=1,
                                   min_rounds=6, max_rounds=6, warmup=1, min_run_s=0.01)
        spent = time.perf_counter() - started
    finally:
        time.time, time.perf_counter = real_time, real_perf
    timing = timings["sdpa_flash full"]
    assert timing.method.startswith("SIMULATED") and "NOT A MEASUREMENT" in timing.method
    assert timing.median_ms == pytest.approx(3.25, rel=0.1)  # 13 ms x (4096 / 8192)^2
    # a warm-up call, then six timings of >= 10 ms of calls (their wall: the flush and the
    # sleep too), after the process's start on the GPU
    assert spent >= 6 * 0.010
    assert simclock.offset(tmp_path / "seconds") >= 6 * 0.010 + simclock.PROCESS_START_S


def test_make_clock_is_the_real_one_unless_installed():
    assert not simclock.installed()
    assert type(clocks.make_clock(lambda: None, "cpu", 1, 0.0)).__name__ == "_CpuClock"


def test_the_probes_ceilings_are_the_lent_h200s():
    src = torch.rand(1 << 24, generator=torch.Generator().manual_seed(2))  # float32, 64 MiB
    dst = torch.empty_like(src)
    copy = simclock.SimulatedClock(lambda: dst.copy_(src), label="copy")
    # a copy reads and writes every byte: the probe's copy_gbs is 2 x bytes / time
    assert 2 * src.numel() * 4 / copy.seconds_per_call(1) / 1e9 == \
        pytest.approx(simclock.COPY_GBS, rel=5 * simclock.NOISE_SD)
    a = torch.rand(4096, 4096, generator=torch.Generator().manual_seed(3)).half()
    matmul = simclock.SimulatedClock(lambda: torch.mm(a, a))  # matmul_sizing names no case
    assert 2 * 4096**3 / matmul.seconds_per_call(1) / 1e12 == \
        pytest.approx(simclock.MATMUL_TFLOPS["float16"], rel=5 * simclock.NOISE_SD)
