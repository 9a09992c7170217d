"""The runtime a machine runs in (inferlab.measurement.sandbox), read from fake kernel
files: what the lent machines showed (the device tool's KINDS.md) and a plain host."""

from __future__ import annotations

import pytest

from inferlab.measurement import environment, sandbox

GVISOR = {"/proc/version": "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016\n",
          "/proc/cpuinfo": "flags\t\t: fpu vme avx2 hypervisor\n"}
GVISOR_DMESG = "[   0.000000] Starting gVisor...\n[   0.412312] Reticulating splines...\n"
FIRECRACKER = {"/proc/version": "Linux version 6.18.44-fc-v236-gpu (builder@sandboxing)\n",
               "/proc/cmdline": "console=ttyS0 rdinit=/process_api -- --firecracker-init\n",
               "/proc/cpuinfo": "flags\t\t: fpu avx2 hypervisor\n"}
UBUNTU_VM = {"/proc/version": "Linux version 4.4.0-210-generic (buildd@lcy01) #242-Ubuntu\n",
             "/proc/cpuinfo": "flags\t\t: fpu avx2 hypervisor\n"}
BARE = {"/proc/version": "Linux version 6.8.0-45-generic (buildd@lcy02)\n",
        "/proc/cpuinfo": "flags\t\t: fpu avx2\n"}


def detect(files: dict, dmesg: str = "") -> dict:
    return sandbox.detect(read=lambda path: files.get(path, ""), dmesg=lambda: dmesg)


@pytest.mark.parametrize(("files", "dmesg", "runtime"), [
    (GVISOR, GVISOR_DMESG, "gvisor"),
    (GVISOR, "", "gvisor"),                       # dmesg refused: the release alone
    ({"/proc/version": "Linux version 5.15"}, GVISOR_DMESG, "gvisor"),
    (FIRECRACKER, "", "firecracker"),
    ({**BARE, "/sys/class/dmi/id/sys_vendor": "Firecracker\n"}, "", "firecracker"),
    (UBUNTU_VM, "", "vm"),                        # 4.4.0 with a suffix is not gVisor
])
def test_the_runtime_is_named_with_what_showed_it(files, dmesg, runtime, monkeypatch):
    monkeypatch.setattr(sandbox.Path, "exists", lambda self: False)
    found = detect(files, dmesg)
    assert found["runtime"] == runtime
    assert found["evidence"], "a runtime is never named without what showed it"


def test_a_plain_host_is_none(monkeypatch):
    monkeypatch.setattr(sandbox.Path, "exists", lambda self: False)
    assert detect(BARE) == {"runtime": "none", "evidence": []}


def test_ncu_is_blocked_under_gvisor_only(monkeypatch):
    monkeypatch.setattr(sandbox.Path, "exists", lambda self: False)
    why = sandbox.ncu_blocked(detect(GVISOR, GVISOR_DMESG))
    assert why.startswith("unavailable: ") and "gVisor" in why and "LibraryNotLoaded" in why
    assert sandbox.ncu_blocked(detect(FIRECRACKER)) is None
    assert sandbox.ncu_blocked(detect(BARE)) is None


def test_the_fingerprint_records_the_runtime():
    facts = environment.fingerprint("cpu", collect_env=False)
    assert facts["runtime"]["runtime"] in sandbox.RUNTIMES
    assert isinstance(facts["runtime"]["evidence"], list)
