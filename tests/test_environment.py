"""Tests for inferlab.measurement.environment: machine id slugs, device choice, fingerprint."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch
from torch.utils import collect_env

from inferlab.core.layout import REPO_ROOT, check_machine
from inferlab.measurement import environment
from inferlab.measurement.environment import default_device, fingerprint, machine_id, slug_machine
from tests.numerics import requires_cuda

without_cuda = pytest.mark.skipif(torch.cuda.is_available(),
                                  reason="checks a torch that cannot see the GPU")
TOP_KEYS = {"device", "build", "host", "cuda", "collect_env", "runtime", "notes"}
BUILD_KEYS = {"torch", "torch_git_version", "torch_cuda", "torch_hip", "cuda_built",
              "cudnn_version", "flash_attention_compiled", "mem_efficient_attention_compiled",
              "mkldnn_available", "cpu_capability", "blas_info", "lapack_info", "triton"}
HOST_KEYS = {"python", "python_implementation", "platform", "machine", "cpu_model",
             "logical_cpus", "cpus_available", "torch_threads", "torch_interop_threads",
             "parallel_info", "numpy"}
CUDA_KEYS = {"device_name", "compute_capability", "multiprocessors", "total_memory_bytes",
             "device_count", "driver_version"}


@pytest.fixture(scope="module")
def cpu_facts() -> dict:
    return fingerprint("cpu")


@pytest.mark.parametrize(("kind", "name", "count", "expected"), [
    ("cpu", "AMD EPYC", 2, "cpu-amd-epyc-2c"),
    ("cpu", "Intel(R) Xeon(R) Platinum 8480+", 112, "cpu-intel-xeon-platinum-8480plus-112c"),
    ("cpu", "AMD EPYC 7B13", 60, "cpu-amd-epyc-7b13-60c"),
    ("cpu", "Apple M2", 8, "cpu-apple-m2-8c"),
    ("cpu", "Intel(R) Core(TM) i7-9700K CPU @ 3.60GHz", 8, "cpu-intel-core-i7-9700k-8c"),
    ("cpu", "AMD Ryzen 9 5950X 16-Core Processor", 32, "cpu-amd-ryzen-9-5950x-32c"),
    ("cuda", "NVIDIA H200", 1, "cuda-nvidia-h200"),
    ("cuda", "NVIDIA A100-SXM4-80GB", 1, "cuda-nvidia-a100-sxm4-80gb"),
    ("cuda", "NVIDIA A100-SXM4-80GB", 8, "cuda-nvidia-a100-sxm4-80gb-x8"),
])
def test_slug_machine_on_real_hardware_names(kind, name, count, expected):
    assert slug_machine(kind, name, count) == expected


@pytest.mark.parametrize("count", [1, 3, 1024])
def test_slug_machine_long_name_stays_a_valid_id(count):
    name = "Vendor(R) " + " ".join(f"Word{i}" for i in range(40))
    slug = slug_machine("cpu", name, count)
    assert len(slug) <= 80
    assert slug.endswith(f"-{count}c")
    assert check_machine(slug) == slug


@pytest.mark.parametrize("name", ["(R) (TM)", ""])
def test_a_hardware_name_with_nothing_to_slug_is_named(name):
    with pytest.raises(ValueError, match="name="):
        slug_machine("cpu", name, 2)


@pytest.mark.parametrize(("flags", "level"), [
    ({"avx2", "fma"}, "avx2"),
    ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, "avx512"),
    ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"},
     "avx512bf16"),
    ({"avx512f"}, None),  # AVX512F alone is not torch's AVX512 level
    (set(), None),
])
def test_the_cpu_isa_level_names_what_changes_the_numbers(flags, level):
    assert environment.cpu_isa(flags) == level


def test_machine_id_cpu_names_this_cpu_and_its_available_cpus():
    n = len(os.sched_getaffinity(0))
    mid = machine_id("cpu")
    assert mid == slug_machine("cpu", environment._cpu_name(), n)
    assert mid.startswith("cpu-") and mid.endswith(f"-{n}c")
    assert check_machine(mid) == mid


@pytest.mark.parametrize("device", ["tpu", "CPU", "cuda:x", "", *(
    [] if torch.cuda.is_available() else ["cuda"])])  # cuda where torch has none: refused
def test_device_argument_is_checked(device):
    with pytest.raises(ValueError, match="device="):
        machine_id(device)
    with pytest.raises(ValueError, match="device="):
        fingerprint(device)


def test_default_device_follows_torch():
    assert default_device() == ("cuda" if torch.cuda.is_available() else "cpu")


def test_fingerprint_is_json_and_has_documented_keys(cpu_facts):
    assert json.loads(json.dumps(cpu_facts)) == cpu_facts
    assert set(cpu_facts) == TOP_KEYS
    assert set(cpu_facts["build"]) == BUILD_KEYS
    assert set(cpu_facts["host"]) == HOST_KEYS
    assert cpu_facts["cuda"] is None


def test_fingerprint_reports_this_torch(cpu_facts):
    from importlib import metadata

    build = cpu_facts["build"]
    try:
        assert build["triton"] == metadata.version("triton")
    except metadata.PackageNotFoundError:
        assert build["triton"] is None
    assert build["torch"] == torch.__version__
    assert build["torch_cuda"] == torch.version.cuda
    assert build["cuda_built"] == torch.backends.cuda.is_built()
    assert cpu_facts["host"]["torch_interop_threads"] == torch.get_num_interop_threads()
    assert cpu_facts["host"]["parallel_info"], "parallel_info summary is empty"


def test_fingerprint_reads_threads_at_call_time():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert fingerprint("cpu")["host"]["torch_threads"] == 1
    finally:
        torch.set_num_threads(before)


def test_fingerprint_holds_no_hostname_or_home(cpu_facts):
    text = json.dumps(cpu_facts)
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        assert home not in text
    host = socket.gethostname()
    if len(host) >= 4:
        assert host not in text


def test_fingerprint_redacts_a_home_path_a_tool_echoes(monkeypatch):
    home = os.path.expanduser("~")
    if len(home) < 4:
        pytest.skip(f"home directory {home!r} is too short to be redacted")
    monkeypatch.setattr(environment.platform, "platform", lambda: f"Linux ({home}/x)")
    assert home not in json.dumps(fingerprint("cpu"))


def _lscpu_vanished():
    raise OSError("lscpu vanished")


@pytest.mark.parametrize(("get_env_info", "error"), [
    (_lscpu_vanished, "lscpu vanished"), (lambda: time.sleep(2.0), "timed out")])
def test_fingerprint_survives_collect_env_failing_or_hanging(monkeypatch, get_env_info, error):
    monkeypatch.setattr(collect_env, "get_env_info", get_env_info)
    monkeypatch.setattr(environment, "COLLECT_ENV_TIMEOUT_S", 0.1)
    start = time.perf_counter()
    facts = fingerprint("cpu")
    assert time.perf_counter() - start < 1.5
    assert error in facts["collect_env"]["error"]
    assert facts["build"]["torch"] == torch.__version__


@requires_cuda
def test_cuda_fingerprint_and_machine_id():
    facts = fingerprint("cuda")
    assert set(facts["cuda"]) == CUDA_KEYS
    assert facts["cuda"]["device_name"] == torch.cuda.get_device_name(0)
    mid = machine_id("cuda")
    assert mid.startswith("cuda-") and check_machine(mid) == mid


# --------------------------------------------------------------------------- GPU, on CPU

FAKE_SMI = """#!/bin/sh
# nvidia-smi as an H200 machine's driver 550 answers it
case "$*" in
  *--query-gpu=name,driver_version*) echo "NVIDIA H200, 550.54.15" ;;
  *--query-gpu=driver_version*) echo "550.54.15" ;;
  *-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *) echo "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |" ;;
esac
"""


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """An nvidia-smi on the PATH that reports an H200, on this machine's torch."""
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir()
    exe.write_text(FAKE_SMI)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    return exe


def test_machine_id_names_the_one_gpu_used_not_all_visible(monkeypatch):
    monkeypatch.setattr(environment, "_torch_sees_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H200")
    assert machine_id("cuda") == "cuda-nvidia-h200"
    assert machine_id("cuda:0") == "cuda-nvidia-h200"


@without_cuda
def test_gpu_that_torch_cannot_see_stops_the_run(fake_nvidia_smi):
    with pytest.raises(ValueError) as info:
        default_device()
    message = str(info.value)
    assert "NVIDIA H200" in message and torch.__version__ in message
    assert "CUDA 12.4" in message, "the driver's CUDA version, to pick a torch build by"
    assert "device=cpu" in message and "make setup" in message, "how to fix it, both ways"


@without_cuda
def test_config_auto_device_stops_too(fake_nvidia_smi):
    from inferlab.workflow.config import resolve_device

    with pytest.raises(ValueError, match="NVIDIA H200"):
        resolve_device({"device": "auto"})
    assert resolve_device({"device": "cpu"}) == "cpu", "the CPU grid on purpose still runs"


def _check_command(env: dict) -> subprocess.CompletedProcess:
    """The setup check the Makefile runs after installing torch."""
    return subprocess.run([sys.executable, "-m", "inferlab.measurement.environment"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


@without_cuda
def test_setup_check_fails_with_a_fake_gpu_and_passes_without(fake_nvidia_smi):
    failed = _check_command(dict(os.environ))
    assert failed.returncode == 1
    assert "NVIDIA H200" in failed.stderr and "make setup" in failed.stderr
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if p != str(fake_nvidia_smi.parent))
    passed = _check_command({**os.environ, "PATH": path})
    if shutil.which("nvidia-smi", path=path) is None:
        assert passed.returncode == 0, passed.stderr
        assert passed.stdout.startswith("device cpu, machine cpu-")


def test_makefile_pins_torch_on_a_gpu_machine_too(fake_nvidia_smi):
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = subprocess.run([make, "-n", "-B", "setup", "VENV=/nonexistent-venv"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    install = [line for line in out.stdout.splitlines()
               if "pip install" in line and "torch" in line]
    assert install and all("torch==2.13.0" in line for line in install), out.stdout
    assert "inferlab.measurement.environment" in out.stdout, "setup checks that torch sees the GPU"


def test_book_profile_forces_cuda_and_keeps_the_book_grid():
    from inferlab.workflow.config import load_config, resolve_grid

    raw = load_config([REPO_ROOT / "profiles" / "book.yaml"])
    assert raw["device"] == "cuda"
    # the same effective configs as config.yaml's on a GPU: results/{machine}/, no @grid
    assert resolve_grid(raw, "cuda") is None
