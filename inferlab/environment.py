"""Where the work ran: device choice, machine id and the environment fingerprint.

Every artifact's provenance carries ``fingerprint(device)`` so that a number can be
traced to the Python, PyTorch build, device, driver, CPU and thread settings that
produced it, and every results folder is named by ``machine_id(device)``, a stable
slug of the hardware (``cpu-amd-epyc-2c``, ``cuda-nvidia-h200``).

The fingerprint holds facts about hardware and software only: no hostname, no user
name, no path under $HOME. A fact PyTorch does not expose is recorded as ``None`` and
explained in ``notes``, never guessed.
"""

from __future__ import annotations

import getpass
import os
import platform
import re
import shutil
import socket
import subprocess
import threading
from typing import Any

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
_MACHINE_KINDS = ("cpu", "cuda")
_MAX_MACHINE_CHARS = 80


def default_device() -> str:
    """``"cuda"`` when PyTorch sees a CUDA device, else ``"cpu"``.

    A machine with no GPU driver at all (no NVIDIA driver, no ROCm device node) is a CPU
    machine without asking torch: importing it costs seconds that a no-op
    ``snakemake`` run (which resolves the machine id) should not pay.
    """
    if not (os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/kfd")
            or shutil.which("nvidia-smi")):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_sees_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


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
    ``cuda-<name words>`` plus ``-x<count>`` when more than one. Pure, so testable.
    """
    if kind not in _MACHINE_KINDS:
        raise ValueError(f"kind={kind!r} is not a device kind; expected one of {_MACHINE_KINDS}")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"count={count!r} must be a positive integer (CPUs or GPUs)")
    words = _NOISE_WORDS.sub(" ", str(name)).lower().replace("+", "plus")
    body = re.sub(r"[^a-z0-9.]+", "-", words).strip("-.")
    if not body:
        raise ValueError(f"name={name!r} has no letters or digits to name the hardware by")
    suffix = f"-{count}c" if kind == "cpu" else (f"-x{count}" if count > 1 else "")
    room = _MAX_MACHINE_CHARS - len(kind) - 1 - len(suffix)
    # a lowercase slug by construction: what inferlab.layout.check_machine accepts
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

        index = torch.device(device).index or 0
        return slug_machine("cuda", torch.cuda.get_device_name(index), torch.cuda.device_count())
    return slug_machine("cpu", _cpu_model(), _cpus_available())


def _nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


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


def _scrub(value: Any, secrets: list[str]) -> Any:
    """Replace any private string (home path, user, host) that a tool echoed back."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "<redacted>")
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v, secrets) for v in value]
    return value


def _private_strings() -> list[str]:
    found = [os.path.expanduser("~"), socket.gethostname()]
    try:
        found.append(getpass.getuser())
    except (KeyError, OSError):
        pass  # no user database entry (common in containers): nothing to hide
    # Longest first so a home path is replaced before the user name inside it;
    # very short names would redact ordinary words, so they are left alone.
    return sorted({s for s in found if s and len(s) >= 4 and s != "/"}, key=len, reverse=True)


def fingerprint(device: str, collect_env: bool = True) -> dict[str, Any]:
    """JSON-serialisable facts about the software and hardware ``device`` runs on.

    ``collect_env=False`` skips ``torch.utils.collect_env`` (it shells out and costs about
    a second): the pipeline records it once, in probe.json, and the lighter fingerprint in
    every artifact's provenance.

    Keys: ``device``, ``build`` (torch version, CUDA/cuDNN build, flash compiled in,
    BLAS), ``host`` (Python, platform, CPU model, CPUs, thread counts, parallel info,
    numpy), ``cuda`` (device name, compute capability, driver; ``None`` on CPU),
    ``collect_env`` (a subset of ``torch.utils.collect_env``, or its error), ``notes``.
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
        "notes": notes if collect_env else
        [*notes, "collect_env: not collected here; probe.json's environment has it"],
    }
    return _scrub(facts, _private_strings())


def hardware(env: dict) -> dict:
    """The facts of a fingerprint that decide what a timing means: CPU model and vector
    ISA level (torch's cpu_capability), threads, GPU name. Two results with different
    ``hardware`` were not measured on the same machine, whatever its id says."""
    build, host, cuda = env.get("build") or {}, env.get("host") or {}, env.get("cuda") or {}
    return {"cpu_model": host.get("cpu_model"), "cpu_capability": build.get("cpu_capability"),
            "gpu": cuda.get("device_name")}
