"""Which SDPA backend can run here, which one actually ran, and why the others did not.

The chapter's rule: a timing row names the kernel that ran, read from the profiler and
not assumed, and every backend that did not run carries PyTorch's own reason. So the
probe keeps two facts per backend and never lets one overwrite the other:

- the *check*: PyTorch's verdict before running, from the SDPA dispatcher itself
  (``torch._fused_sdp_choice`` with only this backend enabled), with its reasons for this
  backend (``reason_source="pytorch"``); where PyTorch says nothing useful (a CUDA-only
  kernel asked about CPU tensors) the reason is ours, from stated facts ("inferlab");
- the *run*: the backend forced with ``sdpa_kernel([backend])`` under the profiler: whether
  it ran, the ATen op that executed, and the exception if it failed.

Each reason is classified as a ``build`` limit (this binary lacks the kernel), a
``hardware`` limit (this device cannot run it) or an ``input`` limit (dtype, head dim,
mask, device): the chapter's "FlashAttention is not in this build" against "cuDNN
attention needs a newer GPU".

Why the dispatcher and not ``torch.backends.cuda.can_use_*_attention(params, debug=True)``:
those are pybind11 functions whose ``TORCH_WARN`` reasons go to stderr, never to Python.
``_fused_sdp_choice`` is an ATen op: its warnings reach Python. When nothing enabled can
run it re-runs every backend's check with debug on, each headed "<backend> kernel not used
because:", then raises. References: PyTorch ``aten/src/ATen/native/transformers/cuda/
sdp_utils.cpp`` (``select_sdp_backend``) and ``sdp_utils_cpp.cpp`` (the CPU checks).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from inferlab.measurement.kernel_names import kernel_that_ran
from inferlab.measurement.memory import is_oom

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

_CUDA_ONLY = ("efficient", "cudnn")
# The dispatcher's header line before each backend's reasons (select_sdp_backend; the
# CPU dispatcher has flash only). cuDNN's read "CuDNN" in older releases.
_SECTIONS = {
    "efficient": re.compile(r"^memory efficient kernel not used because", re.IGNORECASE),
    "flash": re.compile(r"^flash attention kernel not used because", re.IGNORECASE),
    "cudnn": re.compile(r"^cudnn attention kernel not used because", re.IGNORECASE),
}

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
# PyTorch adds a source location to each message; it is not part of the reason.
_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*$")
_MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class BackendStatus:
    """One backend's check and run on one input.

    ``can_run``: the check's verdict (PyTorch's, or ours where ``reason_source`` is
    ``"inferlab"``). ``ran``: it actually ran under ``sdpa_kernel([backend])``. ``reason``:
    why the check said no (None when it said yes). ``limit_kind``: ``"build"``,
    ``"hardware"``, ``"input"`` or None (unclassified or no limit). ``op``: the ATen op the
    profiler saw. ``error``: the exception text if running failed. ``shape``: the query's
    ``(B, H, T, D)``; ``mask``: the explicit attention mask's dtype, if any.
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
    mask: str | None = None
    dropout_p: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The ``probe.json`` availability row (docs/contracts.md), in contract order."""
        row = asdict(self)
        _, heads, tokens, head_dim = self.shape
        return {"dtype": self.dtype, "causal": self.causal, "T": tokens, "heads": heads,
                "d": head_dim, **{k: row[k] for k in (
                    "backend", "can_run", "ran", "reason", "reason_source", "limit_kind",
                    "op", "error")}}


def run_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str,
             causal: bool = False, **options: Any) -> torch.Tensor:
    """``scaled_dot_product_attention`` forced to one backend; raises if it cannot run.

    q: (B, H, T_q, D), k: (B, H_kv, T_k, D), v: (B, H_kv, T_k, D_v) -> (B, H, T_q, D_v);
    ``options``: ``attn_mask``, ``dropout_p``, ``enable_gqa``.
    """
    with sdpa_kernel([BACKENDS[backend]]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **options)


def classify_reason(reason: str | None) -> str | None:
    """``"build"``, ``"hardware"`` or ``"input"`` from a refusal's text, else ``None``."""
    if not reason:
        return None
    return next((kind for kind, pattern in _LIMIT_PATTERNS if pattern.search(reason)), None)


def _pytorch_reasons(caught: Iterable[warnings.WarningMessage], backend: str) -> list[str]:
    """PyTorch's refusal warnings for ``backend`` as clean sentences: the ones under its
    header when the dispatcher headed them (other backends' sections are theirs), all of
    them when it did not; headers and source locations dropped."""
    sections: dict[str | None, list[str]] = {None: []}
    current = None
    for w in caught:
        text = _TRIGGERED.sub("", str(w.message)).strip()
        header = next((b for b, pattern in _SECTIONS.items() if pattern.search(text)), None)
        if header is not None:
            current = header
            sections.setdefault(current, [])
        elif text and text not in sections[current]:
            sections[current].append(text)
    return sections.get(backend, []) if len(sections) > 1 else sections[None]


def _check(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           options: dict[str, Any]) -> tuple[bool, str | None, str, str | None]:
    """(can_run, reason, reason_source, limit_kind): what the backend's check said."""
    if backend in _CUDA_ONLY and not q.is_cuda:  # our reason, from stated facts
        kernel = f"{backend} attention is a CUDA-only kernel"
        if not torch.backends.cuda.is_built():
            return (False, f"{kernel} and this PyTorch build has no CUDA (torch.version.cuda "
                    f"is {torch.version.cuda}, torch {torch.__version__})", "inferlab", "build")
        if not torch.cuda.is_available():
            return (False, f"{kernel}; this build has CUDA {torch.version.cuda} but no CUDA "
                    "device is available to this process", "inferlab", "hardware")
        return False, f"{kernel} and the tensors are on {q.device.type}", "inferlab", "input"
    with sdpa_kernel([BACKENDS[backend]]), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ok = torch._fused_sdp_choice(q, k, v, **options) == BACKENDS[backend].value
        except RuntimeError:  # "No available kernel": the reasons were warned first
            ok = False
    if ok:
        return True, None, "pytorch", None
    reasons = _pytorch_reasons(caught, backend)
    if not reasons:
        # TORCH_WARN_ONCE messages appear once per process; say so rather than invent one.
        return (False, "PyTorch's check said no and gave no reason (a once-per-process "
                "warning may have been shown earlier)", "inferlab", None)
    kinds = [classify_reason(r) for r in reasons]
    return (False, "; ".join(reasons), "pytorch",
            next((k for k in LIMIT_KINDS if k in kinds), None))


def _run(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
         options: dict[str, Any]) -> tuple[bool, str | None, str | None]:
    """(ran, op, error) from actually running the backend under the profiler."""
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel([BACKENDS[backend]]):
        warnings.simplefilter("always")
        try:
            op = kernel_that_ran(lambda: F.scaled_dot_product_attention(q, k, v, **options))
            return True, op, None
        except RuntimeError as exc:  # a refused backend raises; that is the fact to keep
            said = _pytorch_reasons(caught, backend)
            suffix = f" PyTorch warned: {'; '.join(said)}" if said else ""
            flat = " ".join(f"{exc}{suffix}".split())
            if len(flat) > _MAX_ERROR_CHARS:
                flat = flat[:_MAX_ERROR_CHARS - 3] + "..."
            return False, None, flat


def availability(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                 backends: Iterable[str] = BACKENDS, attn_mask: torch.Tensor | None = None,
                 dropout_p: float = 0.0, enable_gqa: bool = False) -> list[BackendStatus]:
    """Check, then run, each SDPA backend of ``backends`` (all four by default) on these
    inputs; one status per backend. A stage asks only for the backends it times (running
    the unfused math backend at 8,192 tokens only to leave it out cost 8 s a mask).

    q: (B, H, T_q, D), k: (B, H_kv, T_k, D), v: (B, H_kv, T_k, D_v), all on one device.
    """
    options = {"attn_mask": attn_mask, "dropout_p": float(dropout_p), "is_causal": causal,
               "enable_gqa": enable_gqa}
    context = {"dtype": str(q.dtype).removeprefix("torch."), "causal": causal,
               "shape": tuple(q.shape), "device": str(q.device),
               "mask": None if attn_mask is None else str(attn_mask.dtype).removeprefix("torch."),
               "dropout_p": float(dropout_p)}
    rows = []
    for backend in (b for b in BACKENDS if b in backends):
        can_run, reason, source, limit = _check(backend, q, k, v, options)
        ran, op, error = _run(backend, q, k, v, options)
        rows.append(BackendStatus(backend, can_run, ran, reason, source, limit, op, error,
                                  **context))
    return rows


def sdpa_cases(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               backends: Iterable[str]) -> tuple[dict, dict, list]:
    """SDPA forced to each of ``backends`` that runs on these inputs: ({label: fn},
    {label: row fields with the ATen op that ran}, [a row for each that does not, with
    PyTorch's reason or "oom"]). Labels are "sdpa_<backend>", the rows' ``impl``."""
    cases, meta, refused = {}, {}, []
    for status in availability(q, k, v, causal=causal, backends=tuple(backends)):
        label = f"sdpa_{status.backend}"
        if status.ran:
            cases[label] = lambda b=status.backend: run_sdpa(q, k, v, b, causal)
            meta[label] = {"impl": label, "kernel": status.op,
                           "fused_sdpa": status.backend in FUSED_SDPA}
        else:
            refused.append({"impl": label, "fused_sdpa": status.backend in FUSED_SDPA,
                            "status": refusal(status)})
    return cases, meta, refused


# our reason for a CUDA-only kernel (``_check``'s limit) -> the row's cause
_CUDA_ONLY_CAUSE = {"build": "no_cuda_build", "hardware": "no_cuda_device",
                    "input": "not_on_cuda"}


def refusal(status: BackendStatus) -> dict:
    """A backend that did not run, as the row's status (``measurement.status``): oom where
    forcing it ran out of memory; else unavailable, with PyTorch's own words as the reason
    (its check's, or the exception of the forced run), or where the reason is ours the
    cause it states (a CUDA-only kernel here) and no words."""
    if status.error and is_oom(RuntimeError(status.error)):
        return {"status": "oom", "cause": "memory"}
    if status.reason_source == "inferlab" and status.limit_kind in _CUDA_ONLY_CAUSE:
        return {"status": "unavailable", "cause": _CUDA_ONLY_CAUSE[status.limit_kind]}
    said = status.reason if status.reason_source == "pytorch" else status.error
    return {"status": "unavailable", "cause": "backend_refused", "reason": said or None}


def format_availability(rows: list[BackendStatus]) -> str:
    """A fixed-width table of the ``availability`` rows of one input, headed by the facts
    they rest on."""
    r0 = rows[0]
    lines = [f"torch {torch.__version__} | CUDA build: {torch.version.cuda or 'no'} | device "
             f"{r0.device} | dtype {r0.dtype} | (B, H, T, D) = {r0.shape} | causal {r0.causal}"]
    table = [("backend", "can run", "ran", "op", "limit", "source", "reason")] + [
        (r.backend, "yes" if r.can_run else "no", "yes" if r.ran else "no", r.op or "-",
         r.limit_kind or "-", r.reason_source, r.reason or "-") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(6)]
    for row, status in zip(table, [None, *rows], strict=True):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if status is not None and status.error:
            lines.append(f"    error: {status.error}")
    return "\n".join(lines)


def cpu_flash_split_sizes(T_q: int, T_k: int) -> tuple[int, int]:
    """(qSplitSize, kvSplitSize): the query and key/value blocks of PyTorch's CPU flash kernel.

    Read from pytorch/pytorch ``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``
    (commit 008ec6b1840c94ff6d0f685bc10fbf585167c673): ``flash_attention_kernel_impl``
    picks the query block from the query length (256 if T_q >= 768, 64 if T_q >= 192, else
    32) and always 512 for key/value, and ``cpu_flash_attention`` clips each to the
    sequence length; checked against torch 2.13.0's buffer sizes (tests/test_backends.py).
    """
    q_split = 256 if T_q >= 768 else 64 if T_q >= 192 else 32
    return min(q_split, T_q), min(512, T_k)
