"""The sandbox a machine runs in (gVisor, Firecracker, another VM, a container, or none),
read from what its kernel shows, and what that rules out for the profilers.

Under gVisor ``ncu`` cannot read the hardware counters ("Failed to initialize the
profiler: LibraryNotLoaded" on the lent GPU machines) and compute-sanitizer refuses the
device; under Firecracker both work. So the runtime is recorded in every artifact's
environment and ``ncu`` is skipped with the reason where it cannot work (``ncu_blocked``).

How each shows itself (every hint found is kept as evidence):

* gVisor: release ``4.4.0`` with no distribution suffix (``/proc/version``), its own boot
  story in ``dmesg`` ("Starting gVisor..."), ``runsc`` on the command line;
* Firecracker: ``/proc/cmdline`` ("--firecracker-init"), a release like
  ``6.18.44-fc-v236-gpu``, or DMI naming it;
* another VM: cpuinfo's ``hypervisor`` flag; a container: ``/.dockerenv`` or
  ``/run/.containerenv``.

Torch-free, and every read may fail (then that hint is absent).
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

RUNTIMES = ("gvisor", "firecracker", "vm", "container", "none")
DMESG_TIMEOUT_S = 2.0
_GVISOR_RELEASE = re.compile(r"^Linux version 4\.4\.0 ")  # no "-NNN-generic" suffix
_FC_RELEASE = re.compile(r"^Linux version \S*-fc-")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return ""


def _dmesg() -> str:
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True,
                              timeout=DMESG_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout[:65536]


def detect(read: Callable[[str], str] = _read,
           dmesg: Callable[[], str] = _dmesg) -> dict:
    """{"runtime": one of RUNTIMES, "evidence": [what was seen, each a short string]}."""
    version, cmdline = read("/proc/version"), read("/proc/cmdline")
    vendor = " ".join(read(f"/sys/class/dmi/id/{f}").strip()
                      for f in ("sys_vendor", "product_name")).strip()
    boot = dmesg()
    evidence, kinds = [], []
    if _GVISOR_RELEASE.match(version):
        evidence.append("/proc/version: release 4.4.0 (gVisor's)")
        kinds.append("gvisor")
    if "gvisor" in boot.lower() or "runsc" in cmdline:
        evidence.append("dmesg: gVisor's boot messages" if "gvisor" in boot.lower()
                        else "/proc/cmdline: runsc")
        kinds.append("gvisor")
    if "firecracker" in cmdline.lower():
        evidence.append("/proc/cmdline: firecracker")
        kinds.append("firecracker")
    if _FC_RELEASE.match(version):
        evidence.append(f"/proc/version: {version.split()[2]} (a Firecracker guest kernel)")
        kinds.append("firecracker")
    if "firecracker" in vendor.lower():
        evidence.append(f"DMI: {vendor}")
        kinds.append("firecracker")
    if re.search(r"^flags\s*:.*\bhypervisor\b", read("/proc/cpuinfo"), re.MULTILINE):
        evidence.append("/proc/cpuinfo: hypervisor flag")
        kinds.append("vm")
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        evidence.append("/.dockerenv or /run/.containerenv")
        kinds.append("container")
    found = next((k for k in RUNTIMES if k in kinds), "none")
    return {"runtime": found, "evidence": evidence}


@functools.cache
def this_machine() -> dict:
    """``detect()`` for this machine, once per process."""
    return detect()


def ncu_blocked(found: dict) -> str | None:
    """Why ``ncu`` cannot read the hardware counters under the runtime ``found``
    (``detect``'s result), or None where it may."""
    if found.get("runtime") == "gvisor":
        return ("unavailable: ncu cannot read the hardware counters under gVisor (\"Failed "
                "to initialize the profiler: LibraryNotLoaded\" on the lent machines; "
                f"seen: {'; '.join(found.get('evidence') or ['gVisor'])})")
    return None

