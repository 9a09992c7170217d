"""Where the work ran: device choice, machine id and the environment fingerprint.

Every artifact's provenance carries ``fingerprint(device)``, so a number can be traced to
the Python, PyTorch build, device, driver, CPU and thread settings that produced it; every
results folder is named by ``machine_id(device)``, a stable slug of the hardware
(``cpu-amd-epyc-avx512bf16-2c``, ``cuda-nvidia-h200``). A machine with an NVIDIA GPU
that torch cannot use is stopped with the reason and the fix (``gpu_not_visible``), never
quietly measured as a CPU (``python -m inferlab.measurement.environment``, run by
``make setup``, exits 1).

The fingerprint holds facts about hardware and software only: no hostname, user name or
path under $HOME (``scrub``). A fact PyTorch does not expose is ``None``, explained in
``notes``.
"""

from __future__ import annotations

import getpass
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import warnings
from importlib import metadata
from typing import Any

from inferlab.measurement import sandbox

# torch.utils.collect_env shells out (pip, lscpu, nvidia-smi); it is not allowed to
# hold up or break a fingerprint, so it runs in a thread with this time limit.
COLLECT_ENV_TIMEOUT_S = 20.0
NVIDIA_SMI_TIMEOUT_S = 10.0
# The collect_env fields worth keeping: system facts PyTorch's own bug template asks for.
_COLLECT_ENV_FIELDS = (
    "os", "libc_version", "gcc_version", "python_platform", "nvidia_driver_version",
    "nvidia_gpu_models", "cuda_runtime_version", "cudnn_version", "is_xnnpack_available",
)
# Words that name a marketing mark or the obvious, not the hardware.
_NOISE_WORDS = re.compile(
    r"\((?:r|tm|c)\)|\b(?:processor|cpu|\d+-core)\b|@\s*[\d.]+\s*[gm]hz", re.IGNORECASE
)
_MAX_MACHINE_CHARS = 80


# Vector ISA levels that change what a CPU computes fast, best first: (name, flags needed).
# torch dispatches its CPU kernels by AVX2 / AVX512 (f, bw, vl, dq); bf16 matmuls take a
# fast path only with AVX512-BF16 or AMX (without it, bf16 naive attention ran ~12x slower
# than fp32 on an AVX2 EPYC; with it, faster than fp32 on an AVX512-BF16 one).
_ISA_LEVELS = (("amx", {"amx_bf16", "amx_tile"}),
               ("avx512bf16", {"avx512_bf16", "avx512f", "avx512bw", "avx512vl", "avx512dq"}),
               ("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
               ("avx2", {"avx2", "fma"}))
# Settings that make a CPU compute like a lesser one (docs/other-cpu.md): ATen's kernel
# dispatch and oneDNN's (which holds the bf16 matmul).
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


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


def simulated_isa(env: dict | None = None) -> str | None:
    """"avx2", "default", "avx2 default" ...: the ISA limits set in ``env`` (os.environ),
    lowercased, sorted, deduplicated; None when none is set."""
    env = os.environ if env is None else env
    limits = sorted({env[name].strip().lower() for name in ISA_LIMITS if env.get(name, "").strip()})
    return " ".join(limits) or None


def scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` with any private string (home path, user, host) a tool echoed back
    replaced by ``<redacted>``."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "<redacted>")
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, secrets) for v in value]
    return value


def private_strings() -> list[str]:
    found = [os.path.expanduser("~"), socket.gethostname()]
    try:
        found.append(getpass.getuser())
    except (KeyError, OSError):
        pass  # no user database entry (common in containers): nothing to hide
    # longest first, so a home path goes before the user name inside it; very short names
    # would redact ordinary words
    return sorted({s for s in found if s and len(s) >= 4 and s != "/"}, key=len, reverse=True)


def default_device() -> str:
    """``"cuda"`` when PyTorch sees a CUDA device, else ``"cpu"``; a ValueError with the
    reason and the fix when an NVIDIA GPU is here that torch cannot use.

    A machine with no GPU driver at all (no NVIDIA driver, no ROCm device node) is a CPU
    machine without asking torch: importing it costs seconds that a no-op
    ``snakemake`` run (which resolves the machine id) should not pay.
    """
    if not (os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/kfd")
            or shutil.which("nvidia-smi")):
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    problem = gpu_not_visible()
    if problem is not None:
        raise ValueError(problem)
    return "cpu"


def _nvidia_smi(*args: str) -> str | None:
    """nvidia-smi's output for ``args``, None when it is absent or fails (no driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True,
                             timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _nvidia_gpus() -> list[str]:
    """'<name>, <driver version>' for each GPU the NVIDIA driver sees, [] if none."""
    out = _nvidia_smi("--query-gpu=name,driver_version", "--format=csv,noheader") or ""
    return [line.strip() for line in out.splitlines() if line.strip()]


def gpu_not_visible() -> str | None:
    """Why torch cannot use the NVIDIA GPU that is here, and how to fix it; None when no
    NVIDIA GPU is here or torch sees it."""
    gpus = _nvidia_gpus()
    if not gpus:
        return None
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            return None
    said = "; ".join(" ".join(str(w.message).split()) for w in caught)
    driver_cuda = re.search(r"CUDA Version:\s*([\d.]+)", _nvidia_smi() or "")
    build = (f"is built for CUDA {torch.version.cuda}" if torch.version.cuda
             else "is a CPU build, without CUDA")
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    parts = [
        f"An NVIDIA GPU is here ({gpus[0]}) but torch {torch.__version__} {build}, and "
        "torch.cuda.is_available() is False" + (f" (PyTorch said: {said})." if said else "."),
        f"The driver supports CUDA {driver_cuda.group(1)} at most." if driver_cuda else "",
        f"CUDA_VISIBLE_DEVICES={hidden!r} may hide it." if hidden is not None else "",
        "Run as it is, every stage would time the CPU and file it as a cpu-... machine.",
        "Fix: install torch 2.13.0's CUDA build for this driver into the venv: make "
        "clean-venv && make setup (PyPI's build is for CUDA 13 and needs driver 580 or "
        "newer; for an older driver add TORCH_INDEX=<PyTorch's wheel index of a CUDA 12 "
        "build>, see docs/gpu-run.md). To run the CPU grid here on purpose: --config "
        "device=cpu (python -m inferlab ...: --set device=cpu).",
    ]
    return " ".join(part for part in parts if part)


def _torch_sees_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def host_device(device: str) -> str:
    """``device`` where this host has it, else "cpu": where a stage that runs nothing on
    the device (series, traffic, claims, manuscript) ran, for its provenance, when it
    derives a GPU machine's evidence on a CPU host."""
    return "cpu" if device.startswith("cuda") and not _torch_sees_cuda() else device


def _check_device(device: str) -> str:
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"device={device!r} is not supported; use 'cpu', 'cuda' or 'cuda:N'")
    if device.startswith("cuda") and not _torch_sees_cuda():
        raise ValueError(f"device={device!r} but torch.cuda.is_available() is False here; "
                         "use 'cpu'")
    return device


def slug_machine(kind: str, name: str, count: int) -> str:
    """A machine id from a device kind, its hardware name and how many there are.

    ``kind="cpu"``: ``count`` is the logical CPUs available to the process ->
    ``cpu-<name words>-<count>c``. ``kind="cuda"``: ``count`` is the number of GPUs ->
    ``cuda-<name words>`` plus ``-x<count>`` when more than one.
    """
    words = _NOISE_WORDS.sub(" ", str(name)).lower().replace("+", "plus")
    body = re.sub(r"[^a-z0-9.]+", "-", words).strip("-.")
    if not body:
        raise ValueError(f"name={name!r} has no letters or digits to name the hardware by")
    suffix = f"-{count}c" if kind == "cpu" else (f"-x{count}" if count > 1 else "")
    room = _MAX_MACHINE_CHARS - len(kind) - 1 - len(suffix)
    # a lowercase slug by construction: what inferlab.core.layout.check_machine accepts
    return f"{kind}-{body[:room].rstrip('-.')}{suffix}"


def _cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, else whatever ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: fall through to platform
    return platform.processor() or platform.machine() or "unknown"


def _cpu_name() -> str:
    """The CPU's model and its ISA level: two EPYCs that both say "AMD EPYC" in a VM but
    differ in AVX512-BF16 are different machines for this project's numbers. Under an ISA
    limit (``simulated_isa``) the name adds "as <limit>": a run that behaves like another
    CPU never writes into this one's evidence, nor into the other's."""
    isa = cpu_isa(cpu_flags())
    name = f"{_cpu_model()} {isa}" if isa else _cpu_model()
    simulated = simulated_isa()
    return f"{name} as {simulated}" if simulated else name


def _cpus_available() -> int:
    # The CPUs this process may run on (a container or taskset may allow fewer than exist).
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine_id(device: str) -> str:
    """Stable lowercase slug of the hardware behind ``device`` (see ``slug_machine``)."""
    device = _check_device(device)
    if device.startswith("cuda"):
        import torch

        # The stages use this one device, however many are visible: the id names it alone.
        index = torch.device(device).index or 0
        return slug_machine("cuda", torch.cuda.get_device_name(index), 1)
    return slug_machine("cpu", _cpu_name(), _cpus_available())


def _nvidia_driver() -> str | None:
    lines = (_nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader") or "").split()
    return lines[0] if lines else None


def _version(package: str) -> str | None:
    """An installed distribution's version, without importing it (None: not installed)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _collect_env() -> dict[str, Any]:
    """The useful part of ``torch.utils.collect_env.get_env_info()``, or why it is missing."""
    timeout_s = COLLECT_ENV_TIMEOUT_S
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            from torch.utils import collect_env

            info = collect_env.get_env_info()._asdict()
            box["info"] = {k: info.get(k) for k in _COLLECT_ENV_FIELDS}
        except Exception as exc:  # any failure in a shell-out is a note, not a crash
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "info" in box:
        return box["info"]
    return {"error": box.get("error", f"timed out after {timeout_s:g} s")}


def _cuda_facts(device: str) -> dict[str, Any]:
    import torch
    index = torch.device(device).index or 0
    props = torch.cuda.get_device_properties(index)
    return {
        "device_name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "total_memory_bytes": props.total_memory,
        "device_count": torch.cuda.device_count(),
        "driver_version": _nvidia_driver(),
    }


def _build_facts() -> dict[str, Any]:
    """What this PyTorch binary was built with, in PyTorch's own words."""
    import torch
    cuda_backends = torch.backends.cuda
    flash = getattr(cuda_backends, "is_flash_attention_available", None)
    show = torch.__config__.show()
    setting = {k: v for k, v in re.findall(r"\b(BLAS_INFO|LAPACK_INFO)=([^,\s]+)", show)}
    return {
        "torch": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", None),
        "torch_cuda": torch.version.cuda,
        "torch_hip": getattr(torch.version, "hip", None),
        "cuda_built": cuda_backends.is_built(),
        "cudnn_version": torch.backends.cudnn.version() if cuda_backends.is_built() else None,
        "flash_attention_compiled": flash() if callable(flash) else None,
        # PyTorch has no public query for the memory-efficient kernel being compiled in.
        "mem_efficient_attention_compiled": None,
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "blas_info": setting.get("BLAS_INFO"),
        "lapack_info": setting.get("LAPACK_INFO"),
        # our kernels' compiler (inferlab.algorithms.kernels); the timing clocks do not use it
        "triton": _version("triton"),
    }


def _host_facts() -> dict[str, Any]:
    import torch
    try:
        import numpy
        numpy_version: str | None = numpy.__version__
    except ImportError:
        numpy_version = None
    parallel = [ln.strip() for ln in torch.__config__.parallel_info().splitlines() if ln.strip()]
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpus_available": _cpus_available(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "parallel_info": parallel,
        "numpy": numpy_version,
    }


def fingerprint(device: str, collect_env: bool = True) -> dict[str, Any]:
    """JSON-serialisable facts about the software and hardware ``device`` runs on.

    ``collect_env=False`` skips ``torch.utils.collect_env`` (it shells out and costs about
    a second): the pipeline records it once, in probe.json, and the lighter fingerprint in
    every artifact's provenance.

    Keys: ``device``, ``build`` (torch version, CUDA/cuDNN build, flash compiled in,
    BLAS), ``host`` (Python, platform, CPU model, CPUs, thread counts, parallel info,
    numpy), ``cuda`` (device name, compute capability, driver; ``None`` on CPU),
    ``collect_env`` (a subset of ``torch.utils.collect_env``, or its error), ``runtime``
    (the sandbox: gVisor, Firecracker, ...: ``sandbox.this_machine``), ``notes``.
    """
    device = _check_device(device)
    notes = [
        "build.mem_efficient_attention_compiled: PyTorch offers no query for it",
        "collect_env.cuda_runtime_version is the system's CUDA toolkit as collect_env finds "
        "it, not necessarily the CUDA this torch was built with (build.torch_cuda)",
    ]
    cuda = _cuda_facts(device) if device.startswith("cuda") else None
    if cuda is not None and cuda["driver_version"] is None:
        notes.append("cuda.driver_version: nvidia-smi not found or failed")
    facts = {
        "device": device,
        "build": _build_facts(),
        "host": _host_facts(),
        "cuda": cuda,
        "collect_env": _collect_env() if collect_env else None,
        "runtime": sandbox.this_machine(),
        "notes": notes if collect_env else
        [*notes, "collect_env: not collected here; probe.json's environment has it"],
    }
    return scrub(facts, private_strings())


def hardware(env: dict) -> dict:
    """The facts of a fingerprint that decide what a timing means: CPU model and vector
    ISA level (torch's cpu_capability), torch's intra-op threads, GPU name. Two results
    with different ``hardware`` were not made alike, whatever the machine id says."""
    build, host, cuda = env.get("build") or {}, env.get("host") or {}, env.get("cuda") or {}
    return {"cpu_model": host.get("cpu_model"), "cpu_capability": build.get("cpu_capability"),
            "threads": host.get("torch_threads"), "gpu": cuda.get("device_name")}


def _main() -> int:
    """The setup check: print the device and machine id, or why the GPU here is unusable."""
    try:
        device = default_device()
    except ValueError as exc:
        print(f"inferlab: {exc}", file=sys.stderr)
        return 1
    print(f"device {device}, machine {machine_id(device)}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
