"""A CPU's vector ISA level, read from its flags, and the settings that make it compute
like a lesser one (``environment.machine_id`` names both: two CPUs of one model that
differ in AVX512-BF16 are different machines for this project's numbers)."""

from __future__ import annotations

import os

# Vector ISA levels that change what a CPU computes fast, best first: (name, flags needed).
# torch dispatches its CPU kernels by AVX2 / AVX512 (f, bw, vl, dq); bf16 matmuls take a
# fast path only with AVX512-BF16 or AMX (without it, bf16 naive attention ran ~12x slower
# than fp32 on an AVX2 EPYC; with it, faster than fp32 on an AVX512-BF16 one).
_ISA_LEVELS = (("amx", {"amx_bf16", "amx_tile"}),
               ("avx512bf16", {"avx512_bf16", "avx512f", "avx512bw", "avx512vl", "avx512dq"}),
               ("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
               ("avx2", {"avx2", "fma"}))


def cpu_isa(flags: set[str]) -> str | None:
    """The best ISA level of ``_ISA_LEVELS`` whose flags are all present, else None."""
    return next((name for name, needed in _ISA_LEVELS if needed <= flags), None)


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass  # not Linux: no flags known
    return set()


# Settings that make a CPU compute like a lesser one (docs/other-cpu.md): ATen's kernel
# dispatch and oneDNN's (which holds the bf16 matmul). Under them the numbers are not this
# machine's, nor the lesser machine's: the id says "as <setting>".
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def simulated_isa(env: dict | None = None) -> str | None:
    """"avx2", "default", "avx2 default" ...: the ISA limits set in ``env`` (os.environ),
    lowercased, sorted, deduplicated; None when none is set."""
    env = os.environ if env is None else env
    limits = sorted({env[name].strip().lower() for name in ISA_LIMITS if env.get(name, "").strip()})
    return " ".join(limits) or None
