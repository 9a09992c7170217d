"""Which SDPA backend can run here, which one actually ran, and why the others did not.

The chapter's rule: a timing row names the kernel that ran, read from the profiler and
not assumed, and every backend that did not run carries PyTorch's own reason. So the
probe keeps two facts per backend and never lets one overwrite the other:

- the *check*: PyTorch's verdict before running (``can_use_*_attention`` with
  ``debug=True`` on CUDA tensors, the dispatcher's choice on other devices), with the
  warnings PyTorch emitted as the reason (``reason_source="pytorch"``); where PyTorch
  says nothing useful (a CUDA-only kernel asked about CPU tensors) the reason is ours,
  built from stated facts (``reason_source="inferlab"``);
- the *run*: the backend forced with ``sdpa_kernel([backend])`` under the profiler,
  recording whether it ran, the ATen op that executed, and the exception if it failed.

Each reason is classified as a ``build`` limit (this PyTorch binary lacks the kernel),
a ``hardware`` limit (this device cannot run it) or an ``input`` limit (dtype, head
dimension, mask, device of the tensors): the chapter's distinction between
"FlashAttention is not in this build" and "cuDNN attention needs a newer GPU".

References: PyTorch ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` (CUDA
checks and their warnings) and ``sdp_utils_cpp.cpp`` (CPU checks).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from itertools import groupby
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from inferlab.shapes import check_qkv

# Our names, in the order the table prints them -> PyTorch's enum.
BACKENDS: dict[str, SDPBackend] = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
LIMIT_KINDS = ("build", "hardware", "input")
# "The fused kernel" of the chapter: the SDPA backends that never write the score matrix
# (math is the unfused composite). Rows timing one of them carry fused_sdpa = True.
FUSED_SDPA = ("flash", "efficient", "cudnn")

# torch.backends.cuda functions that answer "can this backend run these tensors?".
_CUDA_CHECKS = {
    "flash": "can_use_flash_attention",
    "efficient": "can_use_efficient_attention",
    "cudnn": "can_use_cudnn_attention",
}
_CUDA_ONLY = ("efficient", "cudnn")
# Dtypes the CPU flash kernel accepts: use_flash_attention_cpp in sdp_utils_cpp.cpp.
_CPU_FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)

# Reason text -> limit kind, first match wins: a missing kernel in the build makes
# every other limit moot, and a hardware limit outranks an input one.
_LIMIT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("build", re.compile(
        r"not (?:been )?(?:compiled|built)|was not compiled|this build|"
        r"cudnn version too old|requires cudnn \d", re.IGNORECASE)),
    ("hardware", re.compile(
        r"gpu architectures?|attempting to run on a sm|compute capability|\bis_sm\d|"
        r"gpus? or newer|requires a cuda device|not supported on this gpu", re.IGNORECASE)),
    ("input", re.compile(
        r"dtype|head_?dim|size\(-1\)|last dimension|mask|device|shape|seq_?len|"
        r"sequence length|dropout|stride|layout|nested|batch size|num_heads|"
        r"requires_grad|causal|divisible|multiple of|align", re.IGNORECASE)),
)
# PyTorch prints a header line before each backend's reasons, and a source location
# after each message; neither is a reason.
_HEADER = re.compile(r"kernel not used because:?$", re.IGNORECASE)
_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*$")
# kernel_that_ran for a non-SDPA function: ops holding at least this share of the
# self time, at most this many, name the work.
DOMINANT_SHARE = 0.10
MAX_DOMINANT_OPS = 3
_MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class BackendStatus:
    """One backend's check and run on one input.

    ``can_run``: the check's verdict (PyTorch's, or ours where ``reason_source`` is
    ``"inferlab"``). ``ran``: it actually ran under ``sdpa_kernel([backend])``.
    ``reason``: why the check said no (``None`` when it said yes). ``limit_kind``:
    ``"build"``, ``"hardware"``, ``"input"`` or ``None`` (unclassified or no limit).
    ``op``: the ATen op the profiler saw. ``error``: the exception text if running
    failed. ``shape`` is the query's ``(B, H, T, D)``.
    """

    backend: str
    can_run: bool
    ran: bool
    reason: str | None
    reason_source: str
    limit_kind: str | None
    op: str | None
    error: str | None
    dtype: str
    causal: bool
    shape: tuple[int, int, int, int]
    device: str

    def as_dict(self) -> dict[str, Any]:
        """The ``probe.json`` availability row (docs/contracts.md), in contract order."""
        row = asdict(self)
        _, heads, tokens, head_dim = self.shape
        return {"dtype": self.dtype, "causal": self.causal, "T": tokens, "heads": heads,
                "d": head_dim, **{k: row[k] for k in (
                    "backend", "can_run", "ran", "reason", "reason_source", "limit_kind",
                    "op", "error")}}


@dataclass(frozen=True)
class _Check:
    """What a backend's check said before anything ran."""

    can_run: bool
    reason: str | None
    reason_source: str
    limit_kind: str | None


def _check_backend(backend: str) -> SDPBackend:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not an SDPA backend; "
                         f"expected one of {list(BACKENDS)}")
    return BACKENDS[backend]


def run_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str,
             causal: bool = False) -> torch.Tensor:
    """``scaled_dot_product_attention`` forced to one backend; raises if it cannot run.

    q: (B, H, T_q, D), k: (B, H, T_k, D), v: (B, H, T_k, D_v) -> (B, H, T_q, D_v).
    """
    sdp_backend = _check_backend(backend)
    check_qkv(q, k, v, strict=False)
    with sdpa_kernel([sdp_backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def classify_reason(reason: str | None) -> str | None:
    """``"build"``, ``"hardware"`` or ``"input"`` from a refusal's text, else ``None``."""
    if not reason:
        return None
    for kind, pattern in _LIMIT_PATTERNS:
        if pattern.search(reason):
            return kind
    return None


def _pytorch_reasons(caught: Iterable[warnings.WarningMessage]) -> list[str]:
    """PyTorch's refusal warnings as clean sentences, headers and source locations dropped."""
    reasons = []
    for w in caught:
        text = _TRIGGERED.sub("", str(w.message)).strip()
        if text and not _HEADER.search(text) and text not in reasons:
            reasons.append(text)
    return reasons


def _from_pytorch(ok: bool, caught: Iterable[warnings.WarningMessage]) -> _Check:
    if ok:
        return _Check(True, None, "pytorch", None)
    reasons = _pytorch_reasons(caught)
    if not reasons:
        # TORCH_WARN_ONCE messages appear once per process; say so rather than invent one.
        return _Check(False, "PyTorch's check said no and gave no reason (a once-per-process "
                      "warning may have been shown earlier)", "inferlab", None)
    kinds = [classify_reason(r) for r in reasons]
    kind = next((k for k in LIMIT_KINDS if k in kinds), None)
    return _Check(False, "; ".join(reasons), "pytorch", kind)


def _sdpa_params(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Any:
    # The constructor gained enable_gqa in torch 2.5 (7 arguments); older takes 6.
    params_cls = torch.backends.cuda.SDPAParams
    try:
        return params_cls(q, k, v, None, 0.0, causal, False)
    except TypeError:
        return params_cls(q, k, v, None, 0.0, causal)


def _cuda_check(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                causal: bool) -> _Check:
    """PyTorch's own check for a fused backend on CUDA tensors, with its warnings."""
    can_use = getattr(torch.backends.cuda, _CUDA_CHECKS[backend], None)
    if can_use is None:
        return _Check(False, f"this PyTorch has no torch.backends.cuda.{_CUDA_CHECKS[backend]} "
                      "to ask", "inferlab", None)
    # Inside sdpa_kernel so that a globally disabled backend is not reported as the reason.
    with sdpa_kernel([BACKENDS[backend]]), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = bool(can_use(_sdpa_params(q, k, v, causal), debug=True))
    return _from_pytorch(ok, caught)


def _cuda_only_check(backend: str, q: torch.Tensor) -> _Check:
    """Our reason for a CUDA-only kernel asked about non-CUDA tensors, from stated facts."""
    kernel = f"{backend} attention is a CUDA-only kernel"
    if not torch.backends.cuda.is_built():
        return _Check(False, f"{kernel} and this PyTorch build has no CUDA "
                      f"(torch.version.cuda is {torch.version.cuda}, torch {torch.__version__})",
                      "inferlab", "build")
    if not torch.cuda.is_available():
        return _Check(False, f"{kernel}; this build has CUDA {torch.version.cuda} but no CUDA "
                      "device is available to this process", "inferlab", "hardware")
    return _Check(False, f"{kernel} and the tensors are on {q.device.type}",
                  "inferlab", "input")


def _dispatcher_check(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      causal: bool) -> _Check:
    """Ask the SDPA dispatcher (flash on CPU, math anywhere), with our fallback."""
    choose = getattr(torch, "_fused_sdp_choice", None)  # private, so guarded
    if choose is not None:
        with sdpa_kernel([BACKENDS[backend]]), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return _from_pytorch(choose(q, k, v, is_causal=causal) ==
                                     BACKENDS[backend].value, caught)
            except TypeError:
                pass  # another signature in another torch: use our own rule below
            except RuntimeError:
                return _from_pytorch(False, caught)
    if backend == "math":
        return _Check(True, None, "inferlab", None)
    if q.dtype not in _CPU_FLASH_DTYPES or not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        return _Check(False, f"the CPU flash kernel takes {list(map(str, _CPU_FLASH_DTYPES))} "
                      f"and equal head dims; got {q.dtype}, head dims {q.shape[-1]}, "
                      f"{k.shape[-1]}, {v.shape[-1]}", "inferlab", "input")
    return _Check(True, None, "inferlab", None)


def _check(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           causal: bool) -> _Check:
    if backend in _CUDA_CHECKS and q.is_cuda:
        return _cuda_check(backend, q, k, v, causal)
    if backend in _CUDA_ONLY:
        return _cuda_only_check(backend, q)
    return _dispatcher_check(backend, q, k, v, causal)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_ERROR_CHARS else flat[:_MAX_ERROR_CHARS - 3] + "..."


def _run(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
         causal: bool) -> tuple[bool, str | None, str | None]:
    """(ran, op, error) from actually running the backend under the profiler."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return True, kernel_that_ran(lambda: run_sdpa(q, k, v, backend, causal)), None
        except RuntimeError as exc:  # a refused backend raises; that is the fact to keep
            said = _pytorch_reasons(caught)
            suffix = f" PyTorch warned: {'; '.join(said)}" if said else ""
            return False, None, _one_line(f"{exc}{suffix}")


def availability(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 causal: bool = False) -> list[BackendStatus]:
    """Check, then run, each SDPA backend on these inputs; one status per backend.

    q: (B, H, T_q, D), k: (B, H, T_k, D), v: (B, H, T_k, D_v), all on one device.
    """
    check_qkv(q, k, v, strict=False)
    context = {"dtype": str(q.dtype).removeprefix("torch."), "causal": bool(causal),
               "shape": tuple(q.shape), "device": str(q.device)}
    rows = []
    for backend in BACKENDS:
        check = _check(backend, q, k, v, causal)
        ran, op, error = _run(backend, q, k, v, causal)
        rows.append(BackendStatus(backend, check.can_run, ran, check.reason,
                                  check.reason_source, check.limit_kind, op, error, **context))
    return rows


def sdpa_cases(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               backends: Iterable[str]) -> tuple[dict, dict, list]:
    """SDPA forced to each of ``backends`` that runs on these inputs: ({label: fn},
    {label: row fields with the ATen op that ran}, [a row for each that does not, with
    PyTorch's reason or "oom"]). Labels are "sdpa_<backend>", the rows' ``impl``."""
    cases, meta, refused = {}, {}, []
    for status in availability(q, k, v, causal=causal):
        if status.backend not in backends:
            continue
        label = f"sdpa_{status.backend}"
        if status.ran:
            cases[label] = lambda b=status.backend: run_sdpa(q, k, v, b, causal)
            meta[label] = {"impl": label, "kernel": status.op,
                           "fused_sdpa": status.backend in FUSED_SDPA}
        else:
            refused.append({"impl": label, "fused_sdpa": status.backend in FUSED_SDPA,
                            "status": _refusal_status(status)})
    return cases, meta, refused


def _refusal_status(status: BackendStatus) -> str:
    """'oom' when forcing the backend ran out of memory, else 'unavailable: <reason>'."""
    from inferlab.memory import is_oom

    if status.error and is_oom(RuntimeError(status.error)):
        return "oom"
    return f"unavailable: {status.reason or status.error or 'refused without a reason'}"


def _depth(event: Any) -> int:
    depth, parent = 0, event.cpu_parent
    while parent is not None:
        depth, parent = depth + 1, parent.cpu_parent
    return depth


def _attention_op(events: Iterable[Any]) -> str | None:
    """The most specific (deepest-called) ATen attention op, e.g. the backend's own op."""
    ops = [e for e in events if e.name.startswith("aten::") and "attention" in e.name]
    if not ops:
        return None
    deepest = max(_depth(e) for e in ops)
    return next(e.name for e in ops if _depth(e) == deepest)


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
    """Run ``fn()`` once under the profiler and name the kernel that did the work.

    For SDPA: the most specific attention ATen op (e.g.
    ``aten::_scaled_dot_product_flash_attention_for_cpu``). For anything else (naive or
    tiled attention in plain PyTorch): the dominant ATen ops by self time, joined with
    ``+`` (e.g. ``aten::bmm+aten::_softmax``). ``None`` if no ATen op ran. Exceptions
    from ``fn`` propagate.
    """
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()  # kernels still in flight would be missed
    events = prof.events()
    return _attention_op(events) or _dominant_ops(prof, use_device_time=cuda)


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def format_availability(rows: list[BackendStatus]) -> str:
    """A fixed-width table of ``availability`` rows, headed by the facts they rest on."""
    if not rows:
        raise ValueError("rows is empty; pass the list that availability(q, k, v) returned")
    cuda_build = torch.version.cuda or "no"
    columns = ("backend", "can run", "ran", "op", "limit", "source", "reason")
    lines: list[str] = []
    for (device, dtype, shape, causal), group in groupby(
            rows, key=lambda r: (r.device, r.dtype, r.shape, r.causal)):
        group = list(group)
        lines.append(f"torch {torch.__version__} | CUDA build: {cuda_build} | device {device} | "
                     f"dtype {dtype} | (B, H, T, D) = {shape} | causal {causal}")
        table = [columns] + [(r.backend, _yes_no(r.can_run), _yes_no(r.ran), r.op or "-",
                              r.limit_kind or "-", r.reason_source, r.reason or "-")
                             for r in group]
        widths = [max(len(row[i]) for row in table) for i in range(len(columns) - 1)]
        for row, status in zip(table, [None, *group], strict=True):
            cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
            if status is not None and status.error:
                lines.append(f"    error: {status.error}")
    return "\n".join(lines)


def cpu_flash_split_sizes(T_q: int, T_k: int) -> tuple[int, int]:
    """(qSplitSize, kvSplitSize): the query and key/value blocks of PyTorch's CPU flash kernel.

    Read from pytorch/pytorch ``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``
    (commit 008ec6b1840c94ff6d0f685bc10fbf585167c673; the index gave no release tag):
    ``flash_attention_kernel_impl`` picks the query block from the query length
    (256 if T_q >= 768, 64 if T_q >= 192, else 32) and always 512 for key/value, and
    ``cpu_flash_attention`` clips each to the sequence length. The forward rule was
    checked against torch 2.13.0's per-thread buffer size (tests/test_backends.py).
    """
    for name, value in (("T_q", T_q), ("T_k", T_k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer sequence length")
    q_split = 256 if T_q >= 768 else 64 if T_q >= 192 else 32
    kv_split = 512
    return min(q_split, T_q), min(kv_split, T_k)
