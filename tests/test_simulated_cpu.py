"""A run that makes this CPU behave like a lesser one (docs/other-cpu.md) is keyed apart."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from inferlab.measurement import environment
from inferlab.workflow import config, cpu_guard


@pytest.mark.parametrize(("env", "expected"), [
    ({}, None),
    ({"ATEN_CPU_CAPABILITY": ""}, None),
    ({"ATEN_CPU_CAPABILITY": "avx2"}, "avx2"),
    ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "avx2"),
    ({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2"}, "avx2 default"),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "avx512_core"),
])
def test_simulated_isa_names_the_limits_set(env, expected):
    assert environment.simulated_isa(env) == expected


@pytest.mark.parametrize("name", environment.ISA_LIMITS)
def test_an_isa_limit_changes_the_machine_id(monkeypatch, name):
    for other in environment.ISA_LIMITS:
        monkeypatch.delenv(other, raising=False)
    plain = environment.machine_id("cpu")
    monkeypatch.setenv(name, "avx2")
    limited = environment.machine_id("cpu")
    assert limited != plain
    assert limited.endswith("-as-avx2" + plain[plain.rindex("-"):])


AVX2_FLAGS = {"sse4_2", "avx", "avx2", "fma"}
AVX512_FLAGS = AVX2_FLAGS | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}


@pytest.mark.parametrize(("flags", "expected"), [
    (set(), ["default"]),
    ({"avx2"}, ["default"]),  # ATen's AVX2 kernels need FMA too
    (AVX2_FLAGS, ["default", "avx2"]),
    (AVX2_FLAGS | {"avx512f"}, ["default", "avx2"]),  # not all four AVX512 subsets
    (AVX512_FLAGS, ["default", "avx2", "avx512"]),
])
def test_aten_capabilities_stop_at_what_the_cpus_flags_allow(flags, expected):
    # torch 2.13 takes ATEN_CPU_CAPABILITY=avx512 on trust on a CPU without AVX512 (it even
    # reports AVX512) and its first AVX512 kernel dies of SIGILL: make test-isa crashed so
    # on the AVX2 EPYC when it asked torch which capability it got.
    assert cpu_guard.aten_capabilities(flags) == expected


@pytest.mark.parametrize(("setting", "flags", "refused"), [
    ("avx512", AVX2_FLAGS, True),
    ("AVX512", AVX2_FLAGS, True),
    ("avx2", {"sse4_2"}, True),
    ("avx512", AVX512_FLAGS, False),
    ("avx2", AVX2_FLAGS, False),
    ("default", {"sse4_2"}, False),
    ("avx512", set(), False),  # no flags to read (not Linux): torch is left to decide
    ("zvector", AVX2_FLAGS, False),  # not an x86 level: torch ignores it and says so
])
def test_a_capability_the_cpu_lacks_is_named(setting, flags, refused):
    problem = cpu_guard.capability_beyond_cpu({"ATEN_CPU_CAPABILITY": setting}, flags)
    if not refused:
        assert problem is None
        return
    assert f"ATEN_CPU_CAPABILITY={setting!r}" in problem
    assert "illegal instruction" in problem
    lacking = problem.split("lacks ")[1].split(")")[0].split(", ")
    assert lacking and not set(lacking) & flags


def test_a_capability_the_cpu_lacks_stops_the_pipeline(monkeypatch):
    monkeypatch.setattr(cpu_guard, "cpu_flags", lambda: AVX2_FLAGS)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    with pytest.raises(ValueError, match="ATEN_CPU_CAPABILITY='avx512'.*avx512f"):
        config.resolve_device({"device": "auto"})
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert config.resolve_device({"device": "cpu"}) == "cpu"


def test_the_cli_refuses_it_with_a_clear_error(tmp_path):
    flags = environment.cpu_flags()
    above = next((c for c in ("avx512", "avx2") if c not in cpu_guard.aten_capabilities(flags)),
                 None)
    if not flags or above is None:
        pytest.skip("this CPU runs every x86 capability: none is above it")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": above}
    done = subprocess.run([sys.executable, "-m", "inferlab", "--root", str(tmp_path), "probe"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert f"ATEN_CPU_CAPABILITY={above!r}" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_guard_prints_this_cpus_capabilities_lowest_first():
    out = subprocess.run([sys.executable, "-m", "inferlab.workflow.cpu_guard"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert out == cpu_guard.aten_capabilities(environment.cpu_flags())
    assert out[0] == "default"
