"""The probe's ceilings: the matmul size grown by time, a slow path recorded as one.

The slow path is injected (a fake clock whose calls cost what a bf16 fallback costs on an
AVX2 CPU), so the test needs neither such a CPU nor minutes of waiting; the last test runs
the real ceilings at tiny sizes through the artifact's schema.
"""

from __future__ import annotations

import jsonschema
import pytest
import torch

from inferlab.evidence import artifacts
from inferlab.measurement import backends
from inferlab.stages import probe
from inferlab.workflow.cli import main as cli_main
from inferlab.workflow.config import effective_config, load_config
from tests.test_stages import _ctx


def _params(**probe_cpu) -> probe.Params:
    """config.yaml's probe params on a CPU, with ``probe_cpu`` over its cpu: block."""
    raw = load_config(overrides=[f"probe.cpu.{k}={v}" for k, v in probe_cpu.items()])
    return probe.Params.from_config(effective_config(raw, "probe", "cpu"))


class _FakeClock:
    """A clock whose one call costs ``ms_per_flop`` x 2n^3 ms: what the dtype's rate says,
    without running anything. It counts the calls it was asked to time."""

    calls: list[int] = []

    def __init__(self, n: int, ms_per_gflop: float):
        self._ms = 2 * n**3 / 1e9 * ms_per_gflop
        self._n = n

    def seconds_per_call(self, number: int) -> float:
        _FakeClock.calls.append(self._n)
        return self._ms / 1e3


@pytest.fixture
def fake_clock(monkeypatch):
    """make_clock -> a _FakeClock at the rate of the dtype of the matrices it multiplies:
    fp32 at 100 GFLOP/s, bf16 at 2.6 GFLOP/s: the oneDNN fallback's rate at n <= 512 on
    this host under ONEDNN_MAX_CPU_ISA=AVX2 (docs/other-cpu.md)."""
    ms_per_gflop = {torch.float32: 1e3 / 100, torch.bfloat16: 1e3 / 2.6}

    def make_clock(fn, device, threads):
        a = fn.__defaults__[0]  # the lambda binds a, b, c
        return _FakeClock(a.shape[0], ms_per_gflop[a.dtype])

    _FakeClock.calls = []
    monkeypatch.setattr(probe, "make_clock", make_clock)
    monkeypatch.setattr(probe, "_matrices", lambda n, dtype, device, gen: (
        torch.empty(n, 1, dtype=probe.DTYPES[dtype]), None, None))
    return _FakeClock


@pytest.mark.parametrize(("max_n", "call_ms", "sizes"), [
    # 2 n^3 / 100 GFLOP/s: 0.34, 2.7, 21.5 ms (< 25), then 172 ms at 2,048
    (4096, 25, [256, 512, 1024, 2048]),
    (1024, 1e4, [256, 512, 1024]),  # never past max_n
])
def test_the_growth_stops_at_the_first_size_long_enough_or_at_max_n(tmp_path, fake_clock,
                                                                    max_n, call_ms, sizes):
    params = _params(matmul_min_n=256, matmul_max_n=max_n, matmul_call_ms=call_ms)
    steps = probe.matmul_sizing(params, "float32", _ctx(tmp_path, "probe"), None)
    assert [s["n"] for s in steps] == sizes
    assert all(s["call_ms"] < call_ms for s in steps[:-1])


def test_a_slow_path_dtype_stops_growing_after_one_long_call(tmp_path, fake_clock):
    """A bf16 fallback: a fixed n = 2,048 cost 58.7 s a call on the AVX2 host; grown by
    time the sizing spends two calls at 256 (13 ms) and two at 512 (103 ms), under 1 s."""
    params = _params(matmul_min_n=256, matmul_max_n=4096, matmul_call_ms=25)
    steps = probe.matmul_sizing(params, "bfloat16", _ctx(tmp_path, "probe"), None)
    assert [s["n"] for s in steps] == [256, 512]
    assert fake_clock.calls == [256, 256, 512, 512]
    assert sum(2 * s["call_ms"] for s in steps) < 1e3


@pytest.mark.parametrize(("rates", "expected"), [
    ({"float32": 105.0, "bfloat16": 1.4}, {"float32": False, "bfloat16": True}),
    ({"float32": 100.0, "bfloat16": 440.0}, {"float32": False, "bfloat16": False}),
    ({"float32": 100.0, "bfloat16": 25.0}, {"float32": False, "bfloat16": False}),
    ({"float32": 100.0, "bfloat16": 24.9}, {"float32": False, "bfloat16": True}),
    ({"float32": None, "bfloat16": 1.0}, {"float32": False, "bfloat16": None}),
    ({"float32": 100.0, "bfloat16": None}, {"float32": False, "bfloat16": None}),
])
def test_slow_path_is_below_a_quarter_of_fp32(rates, expected):
    assert probe.slow_paths(rates) == expected


def test_the_real_ceilings_at_tiny_sizes_fit_the_schema(tmp_path):
    params = _params(matmul_min_n=32, matmul_max_n=64, matmul_call_ms=1e3, copy_mib=1,
                     dtypes=["float32", "bfloat16"])
    params = probe.Params(**{**params.__dict__, "timing": probe.TimingParams(
        warmup=1, min_rounds=6, max_rounds=6, target=0.5, time_cap_s=1,
        noisy_threshold=0.5, min_run_ms=0)})
    result = probe.ceilings(params, _ctx(tmp_path, "probe"))
    assert result["matmul_sizes"] == [64]
    assert [s["n"] for s in result["matmul_sizing"]["bfloat16"]] == [32, 64]
    assert set(result["matmul_slow_path"]) == {"float32", "bfloat16"}
    assert result["matmul_slow_path"]["float32"] is False
    only_ceilings = {**artifacts.schema("probe"), "required": ["ceilings"]}
    jsonschema.validate({"ceilings": result}, only_ceilings)


def test_availability_runs_only_the_backends_asked_for(monkeypatch):
    """The stages ask for the backends they time; the math backend is not run for them."""

    ran = []
    real = backends._run
    monkeypatch.setattr(backends, "_run", lambda b, *a: (ran.append(b), real(b, *a))[1])
    q = k = v = torch.randn(1, 2, 16, 8)
    rows = backends.availability(q, k, v, backends=("flash", "cudnn"))
    assert [r.backend for r in rows] == ["flash", "cudnn"] and ran == ["flash", "cudnn"]
    assert [r.backend for r in backends.availability(q, k, v)] == list(backends.BACKENDS) == [
        "flash", "efficient", "cudnn", "math"]


@pytest.mark.parametrize(("args", "says"), [
    (["--heads", "-1"], "argument --heads: -1 must be at least 1"),
    (["--tokens", "0"], "argument --tokens: 0 must be at least 1"),
    (["--head-dim", "x"], "argument --head-dim: 'x' is not an integer"),
    (["--device", "tpu"], "invalid choice: 'tpu'")])
def test_the_probe_command_refuses_bad_arguments_by_name(args, says, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["probe", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
