"""Tests for inferlab.measurement.backends: the availability probe, the kernel that ran (and
the profiler's quiet output), the backend map, the CPU flash kernel's block sizes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from inferlab.algorithms.attention import naive_attention
from inferlab.core.layout import REPO_ROOT
from inferlab.evidence import artifacts
from inferlab.measurement.backend_map import MAP_COLUMNS, map_cases, map_rows
from inferlab.measurement.backends import (
    BACKENDS,
    BackendStatus,
    availability,
    classify_reason,
    cpu_flash_split_sizes,
    format_availability,
    kernel_that_ran,
    refusal,
    run_sdpa,
)
from inferlab.measurement.kernel_names import _attention_op, kernel_in
from inferlab.stages import probe
from inferlab.workflow.config import effective_config, load_config
from inferlab.workflow.runner import StageContext
from tests.numerics import requires_cuda

cpu_only_build = pytest.mark.skipif(torch.backends.cuda.is_built(),
                                    reason="expectations for a PyTorch build without CUDA")
FLASH_CPU_OP = "aten::_scaled_dot_product_flash_attention_for_cpu"
MATH_OP = "aten::_scaled_dot_product_attention_math"
ROW_KEYS = ["dtype", "causal", "T", "heads", "d", "backend", "can_run", "ran", "reason",
            "reason_source", "limit_kind", "op", "error"]


def qkv(shape=(1, 2, 24, 16), dtype=torch.float32, seed=0, device="cpu", d_v=None):
    """Seeded random q, k, v of shape (B, H, T, D); v may have its own head dim."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(shape, generator=gen) for _ in range(2))
    v = torch.randn((*shape[:-1], d_v or shape[-1]), generator=gen)
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v))


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=str)
def cpu_rows(request) -> dict[str, BackendStatus]:
    return {r.backend: r for r in availability(*qkv(dtype=request.param), causal=True)}


@pytest.mark.parametrize("backend", ["flash", "math"])
def test_cpu_flash_and_math_run_and_name_their_op(cpu_rows, backend):
    row = cpu_rows[backend]
    assert row.can_run and row.ran and row.error is None
    assert row.op == {"flash": FLASH_CPU_OP, "math": MATH_OP}[backend]
    assert row.reason is None and row.limit_kind is None


@cpu_only_build
@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_cuda_only_backends_refused_here_as_a_build_limit(cpu_rows, backend):
    row = cpu_rows[backend]
    assert not row.can_run and not row.ran and row.op is None
    assert row.reason and "no CUDA" in row.reason
    assert row.limit_kind == "build"
    assert row.reason_source == "inferlab"
    assert row.error, "a refused run keeps PyTorch's exception text"


def test_pytorch_reason_kept_when_cpu_flash_refuses_input():
    rows = {r.backend: r for r in availability(*qkv(d_v=8))}
    flash = rows["flash"]
    assert (flash.can_run, flash.ran) == (False, False)
    assert flash.reason_source == "pytorch"
    assert "same last dimension" in flash.reason
    assert "Triggered internally" not in flash.reason
    assert flash.limit_kind == "input"
    assert rows["math"].ran and rows["math"].op == MATH_OP


def test_as_dict_is_the_probe_json_row(cpu_rows):
    row = cpu_rows["flash"].as_dict()
    assert list(row) == ROW_KEYS
    assert (row["T"], row["heads"], row["d"], row["causal"]) == (24, 2, 16, True)
    assert json.loads(json.dumps(row)) == row


@pytest.mark.parametrize("backend", ["flash", "math"])
@pytest.mark.parametrize("causal", [False, True])
def test_run_sdpa_computes_attention(backend, causal):
    q, k, v = qkv(shape=(2, 3, 20, 8), seed=1)
    expected = naive_attention(q.double(), k.double(), v.double(), causal=causal)
    got = run_sdpa(q, k, v, backend, causal=causal)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)


@cpu_only_build
def test_run_sdpa_raises_for_a_backend_that_cannot_run():
    with pytest.raises(RuntimeError):
        run_sdpa(*qkv(), "efficient")


def test_kernel_that_ran_summarises_plain_pytorch_attention():
    # d = 128: the products' 2d FLOPs per score, against one for the scale and a few for
    # the softmax, make them the bulk of the work
    q, k, v = qkv(shape=(1, 4, 512, 128), seed=2)

    def naive():
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v

    assert kernel_that_ran(naive)  # a name, from its own profiled call (and a warm-up)
    # Which ops pass the time-share cut, and in which order, is the load's. What holds under
    # any load: at most three ops, each one that ran in the profiled call, and the product
    # among them: aten::bmm, or aten::matmul (which calls it) when its own time passes too.
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        naive()
    named = kernel_in(prof).split("+")
    assert 1 <= len(named) <= 3 and len(set(named)) == len(named), named
    assert set(named) <= {event.key for event in prof.key_averages()}, named
    assert {"aten::bmm", "aten::matmul"} & set(named), named


def test_kernel_that_ran_none_without_aten_ops_and_errors_propagate():
    assert kernel_that_ran(lambda: None) is None

    def boom():
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        kernel_that_ran(boom)


# Real messages from PyTorch (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp,
# sdp_utils_cpp.cpp, test/test_transformers.py) and the flash-attn package's errors
# quoted in public issues (Dao-AILab/flash-attention#762, QwenLM/Qwen#103).
@pytest.mark.parametrize(("reason", "kind"), [
    ("Torch was not compiled with flash attention.", "build"),
    ("Torch was not compiled with cuDNN attention.", "build"),
    ("Torch was not compiled with memory efficient attention.", "build"),
    ("Flash attention was not compiled for current AMD GPU architecture. Attempting to run "
     "on architecture gfx1030", "build"),
    ("Flash attention only supports gpu architectures in the range [sm80, sm121]. "
     "Attempting to run on a sm 7.5 gpu.", "hardware"),
    ("cuDNN MHA only supports gpu architectures in the range [sm80, sm121]. "
     "Attempting to run on a sm 7.5 gpu.", "hardware"),
    ("Mem Efficient Attention only supports gpu architectures in the range [sm50, sm121]. "
     "Attempting to run on a sm 3.7 gpu.", "hardware"),
    ("flash attention requires a CUDA device, which is not available.", "hardware"),
    ("FlashAttention only supports Ampere GPUs or newer.", "hardware"),
    ("Expected is_sm90 || is_sm8x || is_sm75 to be true, but got false.", "hardware"),
    ("Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: "
     "float, Key dtype: float, and Value dtype: float instead.", "input"),
    ("Flash attention requires q,k,v to have the same last dimension and to be less than or "
     "equal to 256. Got Query.size(-1): 512, Key.size(-1): 512, Value.size(-1): 512 "
     "instead.", "input"),
    ("Mem efficient attention requires last dimension of inputs to be divisible by 4. "
     "Got Query.size(-1): 30, Key.size(-1): 30, Value.size(-1): 30 instead.", "input"),
    ("All tensors need to be on cuda device. Got query on device: cpu, key on device: cpu, "
     "value on device: cpu", "input"),
    ("Flash attention does not support the is_causal flag when seqlen_q != seqlen_k. "
     "Got seqlen_q: 1 seqlen_k: 1024.", "input"),
    ("head_dim should be a multiple of 8", "input"),
    ("cuDNN attention has been runtime disabled.", None),
    ("", None),
    (None, None),
])
def test_classify_reason_on_pytorch_messages(reason, kind):
    assert classify_reason(reason) == kind


def _status(backend, **over):
    base = dict(backend=backend, can_run=True, ran=True, reason=None, reason_source="pytorch",
                limit_kind=None, op=f"aten::{backend}_op", error=None, dtype="float16",
                causal=False, shape=(1, 12, 1024, 64), device="cuda:0")
    return BackendStatus(**{**base, **over})


def test_format_availability_table():
    rows = [_status("flash", can_run=False, ran=False, op=None, limit_kind="build",
                    reason="Torch was not compiled with flash attention.",
                    error="No available kernel."),
            _status("math")]
    lines = format_availability(rows).splitlines()
    assert torch.__version__ in lines[0] and "float16" in lines[0]
    assert "(1, 12, 1024, 64)" in lines[0] and "cuda:0" in lines[0]
    header, flash, error, math_row = lines[1:]
    assert flash.split()[:3] == ["flash", "no", "no"]
    assert "Torch was not compiled with flash attention." in flash
    assert error.strip() == "error: No available kernel."
    assert math_row.split()[:4] == ["math", "yes", "yes", "aten::math_op"]
    column = header.index("source")
    assert flash[column:].startswith("pytorch") and math_row[column:].startswith("pytorch")


@pytest.mark.parametrize("T_q", [1, 100, 191, 192, 767, 768])
@pytest.mark.parametrize("T_k", [64, 1000])
def test_cpu_flash_split_sizes_match_the_installed_kernel(T_q, T_k):
    # cpu_flash_attention allocates one float32 scratch block per thread of
    # q_split * kv_split + 2 * q_split + q_split * head_dim elements (scores, row max,
    # row sum, accumulator); its size reveals the block sizes the kernel chose.
    head_dim = 16
    q_split, kv_split = cpu_flash_split_sizes(T_q, T_k)
    per_thread = q_split * kv_split + 2 * q_split + q_split * head_dim
    q = qkv(shape=(1, 1, T_q, head_dim))[0]
    k, v = (torch.randn(1, 1, T_k, head_dim) for _ in range(2))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run_sdpa(q, k, v, "flash")
    allocated = [e.cpu_memory_usage for e in prof.events() if e.name == "aten::empty"
                 and e.cpu_parent is not None and e.cpu_parent.name == FLASH_CPU_OP]
    assert torch.get_num_threads() * per_thread * 4 in allocated


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_cuda_probe_keeps_pytorch_reasons_and_ops(dtype):
    rows = {r.backend: r for r in availability(*qkv(shape=(1, 4, 128, 64), dtype=dtype,
                                                    device="cuda"))}
    assert rows["math"].ran and rows["math"].op == MATH_OP
    for name in ("flash", "efficient", "cudnn"):
        row = rows[name]
        if row.can_run:
            assert row.reason is None and row.reason_source == "pytorch"
        else:
            assert row.reason, f"{name} refused without a reason"
        if row.ran:
            assert name in row.op, row.op
        else:
            assert row.error and row.op is None
    if dtype == torch.float32 and torch.backends.cuda.is_flash_attention_available():
        # flash takes only fp16/bf16: PyTorch says so, and it is an input limit
        assert not rows["flash"].can_run and rows["flash"].limit_kind == "input"


# --------------------------------------------------------------------------- CUDA, on CPU
# The CUDA checks cannot run here; their failure modes can. PyTorch's CUDA dispatcher
# (select_sdp_backend in sdp_utils.cpp) and the pybind11 can_use_* checks are replaced by
# stand-ins that behave as the real ones do: the check's warnings bypass Python's warnings
# machinery (they are written to fd 2), the dispatcher's reach Python, headed per backend.

FLASH_DTYPE_REASON = ("Expected query, key and value to all be of dtype: {Half, BFloat16}. "
                      "Got Query dtype: float, Key dtype: float, and Value dtype: float "
                      "instead.")
TRIGGERED = " (Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/" \
            "sdp_utils.cpp:512.)"


def _pybind_style_check(params, debug=False):
    """can_use_flash_attention as a plain pybind11 function: TORCH_WARN goes to stderr."""
    if debug:
        os.write(2, f"[W101 12:00:00.000000000 sdp_utils.cpp:512] Warning: "
                    f"{FLASH_DTYPE_REASON} (function check_dtypes_flash_attention)\n".encode())
    return False


def _cuda_dispatcher(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False):
    """torch._fused_sdp_choice on CUDA float32 inputs: flash refuses the dtype, the others
    are disabled by sdpa_kernel; every backend's reasons, headed, then the error."""
    import warnings

    from torch.nn.attention import SDPBackend

    if torch.backends.cuda.math_sdp_enabled():
        return SDPBackend.MATH.value
    if torch.backends.cuda.mem_efficient_sdp_enabled():
        return SDPBackend.EFFICIENT_ATTENTION.value
    for message in ("Memory efficient kernel not used because:",
                    "Memory Efficient attention has been runtime disabled.",
                    "Flash attention kernel not used because:",
                    *(["Flash attention has been runtime disabled."]
                      if not torch.backends.cuda.flash_sdp_enabled() else [FLASH_DTYPE_REASON]),
                    "cuDNN attention kernel not used because:",
                    "cuDNN attention has been runtime disabled."):
        warnings.warn(message + TRIGGERED, UserWarning, stacklevel=2)
    raise RuntimeError("No available kernel. Aborting execution.")


@pytest.fixture
def as_if_on_cuda(monkeypatch):
    """Tensors that say they are on CUDA, PyTorch's CUDA checks replaced by stand-ins."""
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.backends.cuda, "can_use_flash_attention", _pybind_style_check)
    monkeypatch.setattr(torch.backends.cuda, "can_use_efficient_attention", _pybind_style_check)
    monkeypatch.setattr(torch.backends.cuda, "can_use_cudnn_attention", _pybind_style_check)
    monkeypatch.setattr(torch, "_fused_sdp_choice", _cuda_dispatcher)


def test_cuda_refusal_keeps_pytorchs_reason_for_that_backend_only(as_if_on_cuda):
    rows = {r.backend: r for r in availability(*qkv())}
    flash = rows["flash"]
    assert (flash.can_run, flash.reason_source) == (False, "pytorch")
    assert flash.reason == FLASH_DTYPE_REASON, "only flash's section, without the header"
    assert flash.limit_kind == "input"
    cudnn = rows["cudnn"]
    assert (cudnn.can_run, cudnn.reason_source) == (False, "pytorch")
    assert cudnn.reason == "cuDNN attention has been runtime disabled."
    assert cudnn.limit_kind is None
    assert rows["efficient"].can_run and rows["efficient"].reason is None
    assert rows["math"].can_run and rows["math"].reason is None


def test_kernel_that_ran_names_the_sdpa_backend_op_on_every_device():
    """CUDA's flash SDPA op calls a deeper attention op (aten::_flash_attention_forward);
    CPU's does not. The rule names the backend's op, the same level on both."""
    class Event:
        def __init__(self, name, parent=None):
            self.name, self.cpu_parent = name, parent

    top = Event("aten::scaled_dot_product_attention")
    flash = Event("aten::_scaled_dot_product_flash_attention", top)
    cuda_events = [top, flash, Event("aten::_flash_attention_forward", flash),
                   Event("aten::empty", flash)]
    cpu_top = Event("aten::scaled_dot_product_attention")
    cpu_events = [cpu_top, Event(FLASH_CPU_OP, cpu_top)]

    assert _attention_op(cuda_events) == "aten::_scaled_dot_product_flash_attention"
    assert _attention_op(cpu_events) == FLASH_CPU_OP
    assert _attention_op([Event("aten::scaled_dot_product_attention")]) == \
        "aten::scaled_dot_product_attention"


# --------------------------------------------------------------------------- options, map


def test_grouped_heads_and_a_mask_reach_sdpa():
    q, k, v = qkv(shape=(1, 4, 24, 16))
    mask = torch.ones(24, 24, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(
        q, k[:, :2].repeat_interleave(2, dim=1), v[:, :2].repeat_interleave(2, dim=1),
        attn_mask=mask)
    got = run_sdpa(q, k[:, :2], v[:, :2], "math", enable_gqa=True, attn_mask=mask)
    torch.testing.assert_close(got, expected)


def test_map_cases_name_each_head_dim_and_feature():
    cases = map_cases((32, 80), d=64, heads=12, gqa_groups=4, dropout_p=0.1)
    assert [c.name for c in cases] == ["d=32", "d=80", "causal", "gqa 12:3", "bool mask",
                                       "dropout 0.1"]
    assert [c.d for c in cases] == [32, 80, 64, 64, 64, 64]
    assert cases[3].kv_heads == 3 and cases[2].causal and cases[4].mask


@pytest.fixture(scope="module")
def map_table() -> list[dict]:
    cases = map_cases((16, 24), d=16, heads=4, gqa_groups=2, dropout_p=0.5)
    return map_rows(cases, (torch.float32, torch.bfloat16), heads=4, tokens=32, device="cpu",
                    seed=0)


def test_map_rows_are_the_probe_json_backend_map(map_table):
    schema = json.loads((REPO_ROOT / "schemas" / "probe.schema.json").read_text())
    assert list(MAP_COLUMNS) == schema["properties"]["backend_map"]["items"]["required"]
    assert all(list(row) == list(MAP_COLUMNS) for row in map_table)
    assert len(map_table) == 6 * 2 * len(BACKENDS)
    assert json.loads(json.dumps(map_table)) == map_table


def test_map_rows_on_this_cpu(map_table):
    cell = {(r["case"], r["dtype"], r["backend"]): r for r in map_table}
    gqa = cell[("gqa 4:2", "float32", "math")]
    assert gqa["ran"] and (gqa["heads"], gqa["kv_heads"]) == (4, 2)
    assert cell[("bool mask", "bfloat16", "math")]["mask"] == "bool"
    dropout = cell[("dropout 0.5", "float32", "flash")]  # the CPU flash kernel refuses it
    assert not (dropout["can_run"] or dropout["ran"]) and dropout["limit_kind"] == "input"
    assert "dropout" in dropout["reason"] and dropout["reason_source"] == "pytorch"
    assert cell[("dropout 0.5", "float32", "math")]["dropout_p"] == 0.5
    assert all(r["ran"] for r in map_table if r["backend"] == "math")
    assert cell[("d=24", "float32", "flash")]["d"] == 24


def test_probe_stage_writes_the_map_and_the_timing_method(tmp_path):
    raw = load_config([REPO_ROOT / "profiles" / "smoke.yaml"], [
        "device=cpu", "probe.map={tokens: 16, heads: 2, d: 8, head_dims: [8, 16], "
        "gqa_groups: 2, dropout_p: 0.5, dtypes: [float32]}"])
    params = probe.Params.from_config(effective_config(raw, "probe", "cpu"))
    ctx = StageContext("probe", tmp_path, "test-probe", "cpu", 1, 0, {}, lambda line: None)
    content = probe.run(params, ctx)
    assert artifacts.decode("probe", artifacts.encode("probe", content)) == content
    assert {r["case"] for r in content["backend_map"]} == {
        "d=8", "d=16", "causal", "gqa 2:1", "bool mask", "dropout 0.5"}
    methods = {t["method"] for t in content["ceilings"]["timings"].values()}
    assert methods == {content["ceilings"]["method"]}


@requires_cuda
def test_cuda_map_refusals_carry_pytorchs_reasons():
    cases = map_cases((64, 256), d=64, heads=4, gqa_groups=2, dropout_p=0.1)
    rows = map_rows(cases, (torch.float16, torch.float32), heads=4, tokens=128,
                    device="cuda", seed=0)
    cell = {(r["case"], r["dtype"], r["backend"]): r for r in rows}
    assert cell[("d=64", "float16", "math")]["ran"]
    for row in rows:
        if row["backend"] != "math" and row["can_run"] is False:
            # on CUDA every refusal has PyTorch's own words
            assert row["reason_source"] == "pytorch" and row["reason"], row
    if torch.backends.cuda.is_flash_attention_available():
        assert cell[("d=64", "float16", "flash")]["ran"]
        fp32 = cell[("d=64", "float32", "flash")]
        assert not fp32["can_run"] and fp32["limit_kind"] == "input"
        mask = cell[("bool mask", "float16", "flash")]
        assert not mask["can_run"] and mask["limit_kind"] == "input" and "mask" in mask["reason"]


def test_a_probe_json_without_the_map_still_reads():
    """A probe.json without a backend map (a machine probed before the map existed) is
    valid: readers say the map was not probed rather than refuse the file."""
    old = {"environment": {"device": "cpu"}, "availability": [
        {"dtype": "float32", "causal": False, "T": 8, "heads": 1, "d": 8, "backend": "math",
         "can_run": True, "ran": True, "reason": None, "reason_source": "pytorch",
         "limit_kind": None, "op": None, "error": None}],
        "ceilings": {"copy_gbs": 1.0, "matmul_gflops": {"float32": 1.0}, "copy_bytes": 1,
                     "matmul_sizes": [16], "matmul_gflops_by_size": {"float32": {"16": 1.0}},
                     "method": "torch.utils.benchmark.Timer", "timings": {}}}
    assert artifacts.decode("probe", artifacts.encode("probe", old)) == old


@pytest.mark.parametrize(("reason", "source", "limit", "error", "fields"), [
    ("cudnn attention is a CUDA-only kernel and this PyTorch build has no CUDA", "inferlab",
     "build", "No viable backend", {"cause": "no_cuda_build"}),
    ("... but no CUDA device is available to this process", "inferlab", "hardware", None,
     {"cause": "no_cuda_device"}),
    ("... and the tensors are on cpu", "inferlab", "input", None, {"cause": "not_on_cuda"}),
    ("Head dimension 512 exceeds 256", "pytorch", "shape", None,
     {"cause": "backend_refused", "reason": "Head dimension 512 exceeds 256"}),
    # our words that PyTorch gave none: the run's exception is what it said
    ("PyTorch's check said no and gave no reason", "inferlab", None, "No viable backend",
     {"cause": "backend_refused", "reason": "No viable backend"}),
    ("PyTorch's check said no and gave no reason", "inferlab", None, None,
     {"cause": "backend_refused", "reason": None}),
])
def test_a_refused_backends_row_holds_a_cause_and_only_pytorchs_words(reason, source, limit,
                                                                       error, fields):
    """Evidence holds no prose of ours. A refusal is the cause as data; the
    ``reason`` column only ever holds what PyTorch said."""
    status = BackendStatus("cudnn", False, False, reason, source, limit, None, error,
                           "float32", False, (1, 2, 8, 16), "cpu")
    assert refusal(status) == {"status": "unavailable", **fields}
    oom = BackendStatus("flash", True, False, None, "pytorch", None, None,
                        "CUDA out of memory. Tried to allocate 2.00 GiB", "float16", False,
                        (1, 2, 8, 16), "cuda")
    assert refusal(oom) == {"status": "oom", "cause": "memory"}


# Every profiled region of the library: the kernel name, the CPU memory peak, the model
# stage's operation count and FLOPs.
PROFILED = """
import torch
from inferlab.measurement.kernel_names import kernel_that_ran
from inferlab.measurement.memory import peak_extra_bytes
from inferlab.stages import model
q = torch.randn(1, 2, 64, 16)
print(kernel_that_ran(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q)))
print(peak_extra_bytes(lambda: q @ q.transpose(-1, -2)).peak_extra_bytes)
print(model._kernel_ops(lambda: q @ q.transpose(-1, -2)))
"""


def test_profiled_regions_print_no_usdt_lines():
    """Kineto wrote ``USDT:... profiler_start`` / ``profiler_stop`` to stderr around every
    profiled region; the stage logs were mostly those lines. In a fresh interpreter:
    Kineto reads its log level once, when a process first profiles."""
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run([sys.executable, "-c", PROFILED], env=env, capture_output=True,
                          text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "aten::" in done.stdout  # the regions did run under the profiler
    usdt = [line for line in output.splitlines() if "USDT" in line]
    assert usdt == [], f"{len(usdt)} profiler lines, e.g. {usdt[0]!r}"
