"""Refuse an ``ATEN_CPU_CAPABILITY`` above this CPU's before anything runs: torch takes the
setting on trust, and its first AVX512 kernel on an AVX2 CPU dies of an illegal
instruction. ``python -m inferlab.workflow.cpu_guard`` prints the capabilities this CPU can
run, lowest first (what ``make test-isa`` loops over). A guard: it changes no number.
"""

from __future__ import annotations

import os

from inferlab.measurement.environment import cpu_flags

# ATen's kernel variants on x86, lowest first, and the flags each needs (ATen's own test in
# DispatchStub.cpp: AVX2 with FMA; AVX512 with its F, BW, VL and DQ subsets and FMA).
_ATEN_LEVELS = (("default", frozenset()),
                ("avx2", frozenset({"avx2", "fma"})),
                ("avx512", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"})))


def aten_capabilities(flags: set[str]) -> list[str]:
    """The ``ATEN_CPU_CAPABILITY`` values a CPU with ``flags`` can execute, lowest first."""
    return [name for name, needed in _ATEN_LEVELS if needed <= flags]


def capability_beyond_cpu(env: dict | None = None, flags: set[str] | None = None) -> str | None:
    """Why ``ATEN_CPU_CAPABILITY`` cannot run on a CPU with ``flags`` (this one's), or
    None; also for a value that is no x86 level (torch ignores it) or unknown flags."""
    env = os.environ if env is None else env
    flags = cpu_flags() if flags is None else flags
    setting = env.get("ATEN_CPU_CAPABILITY", "").strip()
    needed = dict(_ATEN_LEVELS).get(setting.lower())
    if needed is None or not flags or needed <= flags:
        return None
    return (f"ATEN_CPU_CAPABILITY={setting!r} asks for kernels this CPU cannot execute (it "
            f"lacks {', '.join(sorted(needed - flags))}): torch takes the setting on trust "
            f"and its first such kernel dies of an illegal instruction; this CPU runs "
            f"{', '.join(aten_capabilities(flags))} (docs/other-cpu.md)")


def refuse_capability_beyond_cpu() -> None:
    problem = capability_beyond_cpu()
    if problem is not None:
        raise ValueError(problem)


if __name__ == "__main__":
    print("\n".join(aten_capabilities(cpu_flags())))
