"""Which kernel did the work of a call: read from the profiler, never assumed.

The chapter's rule for every timing row. For SDPA the answer is the backend's own ATen
op (``aten::_scaled_dot_product_flash_attention_for_cpu`` on a CPU,
``aten::_scaled_dot_product_flash_attention`` on CUDA); for plain PyTorch code (naive or
tiled attention) it is the few ATen ops that took most of the time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

# Kineto, the profiler's C++ side, logs "USDT:... profiler_start/stop" to stderr around
# every profiled region at its highest severity (USDT = 5, above ERROR = 4): only a level
# above all of them silences it. Kineto reads it once, when a process first profiles.
KINETO_QUIET_LEVEL = "6"

# For a non-SDPA function: ops holding at least this share of the self time, at most this
# many, name the work.
DOMINANT_SHARE = 0.10
MAX_DOMINANT_OPS = 3
_SDPA_ENTRY = "aten::scaled_dot_product_attention"


def quiet_profile(**kwargs: Any) -> profile:
    """``torch.profiler.profile(**kwargs)`` without Kineto's USDT lines on stderr (every
    profiled region of the library goes through here)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET_LEVEL)
    return profile(**kwargs)


def _depth(event: Any) -> int:
    depth, parent = 0, event.cpu_parent
    while parent is not None:
        depth, parent = depth + 1, parent.cpu_parent
    return depth


def _attention_op(events: Iterable[Any]) -> str | None:
    """The SDPA backend's own op: the shallowest ATen attention op below the
    ``scaled_dot_product_attention`` entry (the entry itself if nothing is below it).

    One level on every device: CPU's flash op calls no deeper attention op, CUDA's
    (``aten::_scaled_dot_product_flash_attention``) calls ``aten::_flash_attention_forward``,
    and naming the deepest would report different levels for the same backend.
    """
    ops = [e for e in events if e.name.startswith("aten::") and "attention" in e.name]
    below = [e for e in ops if e.name != _SDPA_ENTRY] or ops
    if not below:
        return None
    shallowest = min(_depth(e) for e in below)
    return next(e.name for e in below if _depth(e) == shallowest)


def _dominant_ops(prof: profile, use_device_time: bool) -> str | None:
    """'op+op' for the ATen ops that took most self time, in the order they first ran."""
    averages = [a for a in prof.key_averages() if a.key.startswith("aten::")]
    totals = {a.key: a.self_cpu_time_total for a in averages}
    if use_device_time:
        on_device = {a.key: getattr(a, "self_device_time_total", 0) or 0 for a in averages}
        # A function that launched nothing on the GPU is named by its CPU time instead.
        totals = on_device if sum(on_device.values()) > 0 else totals
    grand = sum(totals.values())
    if grand <= 0:
        # Ops too short for the profiler's clock (tiny inputs): rank them by call count.
        totals = {a.key: a.count for a in averages}
        grand = sum(totals.values())
    if grand <= 0:
        return None
    top = sorted(totals, key=totals.get, reverse=True)[:MAX_DOMINANT_OPS]
    # The largest op always names the work, even when the time is spread thin.
    chosen = {top[0]} | {name for name in top if totals[name] >= DOMINANT_SHARE * grand}
    first_seen = list(dict.fromkeys(e.name for e in prof.events() if e.name in chosen))
    return "+".join(first_seen) or None


def kernel_that_ran(fn: Callable[[], Any]) -> str | None:
    """Run ``fn()`` once under the profiler and name the kernel that did the work
    (``kernel_in``): for SDPA the backend's op, for anything else the dominant ATen ops by
    self time joined with ``+`` (``aten::bmm+aten::_softmax``); None if no ATen op ran."""
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with quiet_profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()  # kernels still in flight would be missed
    return kernel_in(prof, use_device_time=cuda)


def kernel_in(prof: profile, use_device_time: bool = False) -> str | None:
    """The kernel that did the work in a finished profiler session (``kernel_that_ran``'s
    rule), so a session that also traced memory names it without a second call."""
    return _attention_op(prof.events()) or _dominant_ops(prof, use_device_time)
