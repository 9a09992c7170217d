"""Partials (m, l, o): the merge rule's algebra, agreement with one softmax and with
PyTorch's own log-sum-exp, masked rows, and split-KV decoding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.profiler import ProfilerActivity, profile

from inferlab.algorithms.attention import naive_attention
from inferlab.algorithms.partials import (
    Partial,
    finalize,
    merge_partials,
    partial_attention,
    splitkv_decode,
)
from inferlab.measurement.memory import peak_extra_bytes
from tests.numerics import assert_as_exact_as_naive, max_abs_err, naive_bound, naive_reference

pytestmark = pytest.mark.usefixtures("single_thread")

F64_TOL = 1e-12
FP32_TOL = 1e-5


def splitkv_decode_fold(q, k, v, splits: int):
    """``splitkv_decode`` as a left fold: one ``partial_attention`` per chunk, merged one
    at a time (a Python loop whose cost grows with the split count: the reference)."""
    merged = None
    for k_chunk, v_chunk in zip(k.tensor_split(splits, dim=2), v.tensor_split(splits, dim=2),
                                strict=True):
        part = partial_attention(q, k_chunk, v_chunk)
        merged = part if merged is None else merge_partials(merged, part)
    return finalize(merged).to(q.dtype)


def _assert_same_partial(a: Partial, b: Partial, tol: float) -> None:
    """Same attention state: equal lse (-inf where no key) and equal output."""
    torch.testing.assert_close(a.lse, b.lse, rtol=0, atol=tol)
    torch.testing.assert_close(finalize(a), finalize(b), rtol=0, atol=tol)


# A partition of the keys into three (possibly empty) groups, drawn key by key.
partitions = st.lists(st.integers(0, 2), min_size=1, max_size=40)


@settings(max_examples=30, deadline=None)
@given(labels=partitions, seed=st.integers(0, 2**31 - 1))
def test_merge_is_associative_commutative_and_one_softmax_over_the_union(draw_qkv, labels,
                                                                         seed):
    q, k, v = draw_qkv(torch.Generator().manual_seed(seed), (1, 2, 3, 8), torch.float64,
                         keys=len(labels))
    groups = ([j for j, label in enumerate(labels) if label == g] for g in range(3))
    a, b, c = (partial_attention(q, k[:, :, keys], v[:, :, keys]) for keys in groups)
    merged = merge_partials(merge_partials(a, b), c)
    _assert_same_partial(merged, merge_partials(a, merge_partials(b, c)), F64_TOL)
    _assert_same_partial(merge_partials(a, b), merge_partials(b, a), F64_TOL)
    assert max_abs_err(finalize(merged), naive_attention(q, k, v)) <= F64_TOL
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    assert max_abs_err(merged.lse, torch.logsumexp(scores, dim=-1)) <= F64_TOL


@pytest.mark.parametrize("side", ["left", "right"])
def test_empty_partial_is_the_identity(make_qkv, side):
    q, k, v = make_qkv((2, 3, 5, 16), keys=9)
    p = partial_attention(q, k, v)
    empty = partial_attention(q, k[:, :, :0], v[:, :, :0])
    merged = merge_partials(empty, p) if side == "left" else merge_partials(p, empty)
    for got, want in zip(merged, p, strict=True):
        assert torch.equal(got, want)


def test_empty_partial_values(make_qkv):
    q, k, v = make_qkv((1, 2, 4, 8), keys=0)
    p = partial_attention(q, k, v)
    assert torch.all(p.m == float("-inf")) and torch.all(p.l == 0) and torch.all(p.o == 0)
    assert torch.all(p.lse == float("-inf"))
    merged = merge_partials(p, p)
    assert not any(torch.isnan(t).any() for t in (*merged, merged.lse, finalize(merged)))
    assert torch.all(finalize(merged) == 0)


def test_lse_agrees_with_pytorch_flash_attention_for_cpu(make_qkv):
    q, k, v = make_qkv((2, 3, 40, 32), keys=70)
    out, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[:2]
    p = partial_attention(q, k, v)
    assert logsumexp.shape == p.lse.shape == (2, 3, 40)
    assert max_abs_err(p.lse, logsumexp) <= FP32_TOL
    assert max_abs_err(finalize(p), out) <= FP32_TOL


def test_fully_masked_rows_give_zero_and_no_nan(rng, make_qkv):
    q, k, v = make_qkv((1, 2, 6, 8), keys=10)
    mask = torch.rand(1, 2, 6, 10, generator=rng) < 0.5
    mask[:, :, 2] = False  # row 2 sees no key at all
    p = partial_attention(q, k, v, mask=mask)
    out = finalize(merge_partials(p, partial_attention(q, k, v, mask=mask.clone())))
    assert not any(torch.isnan(t).any() for t in (*p, p.lse, out))
    assert torch.all(out[:, :, 2] == 0) and torch.all(p.lse[:, :, 2] == float("-inf"))
    kept = mask.any(dim=-1).nonzero(as_tuple=True)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask)
    assert max_abs_err(out[kept], expected[kept]) <= FP32_TOL


def test_mask_broadcasts_over_batch_and_heads(make_qkv):
    q, k, v = make_qkv((2, 3, 4, 8), torch.float64, keys=6)
    keep = torch.ones(4, 6, dtype=torch.bool).tril()
    p = partial_attention(q, k, v, mask=keep)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    assert max_abs_err(finalize(p), expected) <= F64_TOL


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_partial_accumulates_in_float32(make_qkv, dtype):
    p = partial_attention(*make_qkv((1, 2, 3, 8), dtype, keys=5))
    assert p.m.dtype == p.l.dtype == p.o.dtype == torch.float32


# ---------------------------------------------------------------- split-KV decoding

CACHE_KEYS = 97  # prime, so most split counts cut the cache unevenly


@pytest.fixture(scope="module")
def decode_case(draw_qkv):
    q, k, v = draw_qkv(torch.Generator().manual_seed(97), (2, 2, 1, 64), keys=CACHE_KEYS)
    return q, k, v, naive_attention(q.double(), k.double(), v.double())


# The split counts whose chunks differ in kind over 97 keys: none (1), halves and small
# primes (uneven), chunks of two or three (48), of two or one (49, 96), of one (97).
SPLIT_COUNTS = [1, 2, 3, 5, 7, 48, 49, 96, 97]


@pytest.mark.parametrize("splits", SPLIT_COUNTS)
def test_splitkv_decode_exact_for_every_kind_of_split(decode_case, splits):
    q, k, v, reference = decode_case
    out = splitkv_decode(q, k, v, splits)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert max_abs_err(out, reference) <= FP32_TOL


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_splitkv_equals_the_fold_for_every_uneven_split(make_qkv, dtype):
    """37 keys cut 1..37 ways (uneven chunks: tensor_split's first S % n are longer):
    the batched version and the left fold are both within the 2x rule of float64 (with
    its floor: at one split naive's error is one ulp), so they agree to within twice that."""
    q, k, v = make_qkv((2, 3, 1, 16), dtype, keys=37)
    reference, naive_err = naive_reference(q, k, v)
    for splits in range(1, 38):  # all of them: the loop costs well under a second
        batched, fold = splitkv_decode(q, k, v, splits), splitkv_decode_fold(q, k, v, splits)
        assert_as_exact_as_naive(batched, reference, naive_err, f"batched, {splits} splits")
        assert_as_exact_as_naive(fold, reference, naive_err, f"fold, {splits} splits")
        assert max_abs_err(batched, fold) <= 2 * naive_bound(naive_err, reference, dtype), splits


def test_splitkv_runs_the_same_operations_for_one_and_sixty_four_splits(make_qkv):
    """The chapter's implementation: a fixed number of batched operations, whatever the
    split count (the fold's count grows with it)."""

    compute = {"aten::bmm", "aten::exp", "aten::amax", "aten::sum", "aten::mul", "aten::sub",
               "aten::div", "aten::cat"}

    def aten_ops(fn, keys, splits) -> tuple[int, int]:
        """(compute ops, all ATen ops) of one call."""
        q, k, v = make_qkv((1, 4, 1, 16), keys=keys)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn(q, k, v, splits)
        names = [e.name for e in prof.events() if e.name.startswith("aten::")]
        return sum(n in compute for n in names), len(names)

    # 1024 keys: every split count divides the cache, chunks are views: only broadcasting
    # q adds ops. 1000 keys, 7 and 63 splits: uneven, the same compute (the products
    # gather a partial group in the cache's dtype, a few copy ops more)
    (c1, all1), (c64, all64) = aten_ops(splitkv_decode, 1024, 1), aten_ops(splitkv_decode,
                                                                        1024, 64)
    assert c64 == c1 and all64 <= all1 + 5
    assert aten_ops(splitkv_decode, 1000, 63)[0] == aten_ops(splitkv_decode, 1000, 7)[0] == c1
    assert aten_ops(splitkv_decode_fold, 1024, 64)[0] > 20 * aten_ops(splitkv_decode_fold,
                                                                        1024, 1)[0]


@pytest.mark.parametrize(("fn", "dtype"), [
    (lambda q, k, v: splitkv_decode(q, k, v, 64), torch.float32),  # 64 splits divide 4096
    (partial_attention, torch.bfloat16),  # only scores and outputs are float32
])
def test_no_copy_the_size_of_the_cache_in_float32(make_qkv, fn, dtype):
    q, k, v = make_qkv((1, 4, 1, 64), dtype, keys=4096)
    peak = peak_extra_bytes(lambda: fn(q, k, v)).peak_extra_bytes
    assert peak < k.numel() * 4 / 4  # well below one fp32 copy of K (4 MiB here)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_splitkv_many_queries_low_precision(make_qkv, dtype):
    q, k, v = make_qkv((1, 2, 7, 32), dtype, keys=50)
    out = splitkv_decode(q, k, v, splits=6)
    assert out.dtype == dtype
    assert_as_exact_as_naive(out, *naive_reference(q, k, v))


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("splits", [0, -1, CACHE_KEYS + 1, 2.0, True, None])
def test_bad_splits_raise_naming_the_argument(make_qkv, splits):
    q, k, v = make_qkv((1, 2, 1, 8), keys=CACHE_KEYS)
    with pytest.raises(ValueError, match="splits"):
        splitkv_decode(q, k, v, splits)


@pytest.mark.parametrize("mask_case", ["float", "shape", "list"])
def test_bad_mask_raises_naming_the_argument(make_qkv, mask_case):
    q, k, v = make_qkv((1, 2, 4, 8), keys=6)
    mask = {"float": torch.ones(4, 6), "shape": torch.ones(5, 6, dtype=torch.bool),
            "list": [[True] * 6] * 4}[mask_case]
    with pytest.raises(ValueError, match="mask"):
        partial_attention(q, k, v, mask=mask)


def test_merge_rejects_mismatched_partials(make_qkv):
    q, k, v = make_qkv((1, 2, 4, 8), keys=6)
    a = partial_attention(q, k, v)
    b = partial_attention(q[:, :, :3], k, v)
    with pytest.raises(ValueError, match="b"):
        merge_partials(a, b)
