"""A run that makes this CPU behave like a lesser one (docs/other-cpu.md) is keyed apart."""

from __future__ import annotations

import pytest

from inferlab.measurement import environment


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
