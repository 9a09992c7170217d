"""Tests for inferlab.backends: the availability probe, the kernel that ran, the CPU
flash kernel's block sizes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from inferlab.backends import (
    BACKENDS,
    BackendStatus,
    availability,
    classify_reason,
    cpu_flash_split_sizes,
    format_availability,
    kernel_that_ran,
    run_sdpa,
)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                   reason="needs a CUDA device; this machine has none")
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


def test_availability_covers_every_backend_in_order():
    rows = availability(*qkv())
    assert [r.backend for r in rows] == list(BACKENDS) == ["flash", "efficient", "cudnn", "math"]


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
    scores = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        future = torch.ones(20, 20, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ v.double()
    got = run_sdpa(q, k, v, backend, causal=causal)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)


@cpu_only_build
def test_run_sdpa_raises_for_a_backend_that_cannot_run():
    with pytest.raises(RuntimeError):
        run_sdpa(*qkv(), "efficient")


@pytest.mark.parametrize(("args", "argument"), [
    ((*qkv(), "flash2"), "backend="),
    ((torch.randn(2, 24, 16), *qkv()[1:], "math"), "q must be a 4-D"),
    ((*qkv()[:2], "not a tensor", "math"), "v must be a 4-D"),
])
def test_run_sdpa_rejects_bad_input(args, argument):
    with pytest.raises(ValueError, match=argument):
        run_sdpa(*args)


def test_availability_rejects_mixed_devices_and_shapes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="4-D"):
        availability(q[0], k, v)
    with pytest.raises(ValueError, match="must share a device"):
        availability(q, k.to("meta"), v)


def test_kernel_that_ran_names_the_sdpa_op():
    q, k, v = qkv()
    assert kernel_that_ran(lambda: run_sdpa(q, k, v, "flash")) == FLASH_CPU_OP
    assert kernel_that_ran(lambda: run_sdpa(q, k, v, "math")) == MATH_OP


def test_kernel_that_ran_summarises_plain_pytorch_attention():
    q, k, v = qkv(shape=(1, 4, 256, 64), seed=2)

    def naive():
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=-1) @ v

    parts = kernel_that_ran(naive).split("+")
    # Which ops pass the time-share cut depends on the machine's load; the products
    # dominate, they come first (the order ops first ran), and nothing else is invented.
    assert parts[0] == "aten::bmm", "ops are listed in the order they first ran"
    assert 1 <= len(parts) <= 3 and len(set(parts)) == len(parts)
    assert set(parts) <= {"aten::bmm", "aten::_softmax", "aten::div", "aten::div_",
                          "aten::clone", "aten::copy_", "aten::expand", "aten::matmul"}


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


def test_format_availability_one_header_per_input_and_rejects_empty():
    rows = [_status("math"), _status("math", dtype="bfloat16")]
    text = format_availability(rows)
    assert text.count(f"torch {torch.__version__}") == 2
    with pytest.raises(ValueError, match="rows is empty"):
        format_availability([])


def _flash_buffer_sizes_bytes(T_q: int, T_k: int, head_dim: int) -> list[int]:
    """Bytes of each aten::empty the CPU flash kernel allocated, from the profiler."""
    q, k, v = qkv(shape=(1, 1, T_q, head_dim))
    if T_k != T_q:
        k, v = (torch.randn(1, 1, T_k, head_dim) for _ in range(2))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run_sdpa(q, k, v, "flash")
    return [e.cpu_memory_usage for e in prof.events()
            if e.name == "aten::empty" and e.cpu_parent is not None
            and e.cpu_parent.name == FLASH_CPU_OP]


@pytest.mark.parametrize("T_q", [1, 100, 191, 192, 767, 768])
@pytest.mark.parametrize("T_k", [64, 1000])
def test_cpu_flash_split_sizes_match_the_installed_kernel(T_q, T_k):
    # cpu_flash_attention allocates one float32 scratch block per thread of
    # q_split * kv_split + 2 * q_split + q_split * head_dim elements (scores, row max,
    # row sum, accumulator); its size reveals the block sizes the kernel chose.
    head_dim = 16
    q_split, kv_split = cpu_flash_split_sizes(T_q, T_k)
    per_thread = q_split * kv_split + 2 * q_split + q_split * head_dim
    expected_bytes = torch.get_num_threads() * per_thread * 4
    assert expected_bytes in _flash_buffer_sizes_bytes(T_q, T_k, head_dim)


@pytest.mark.parametrize(("T_q", "T_k"), [(0, 10), (10, -1), (1.5, 10), (10, True)])
def test_cpu_flash_split_sizes_rejects_bad_lengths(T_q, T_k):
    with pytest.raises(ValueError, match="T_q=|T_k="):
        cpu_flash_split_sizes(T_q, T_k)


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
