"""naive, tiled and tiled_fast attention: exactness against float64, causal tile skipping,
large scores, input validation. CPU only; the whole file runs in a few seconds."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from inferlab.algorithms.attention import (
    TILED,
    TileStats,
    naive_attention,
    tiled_attention,
    tiled_attention_fast,
)
from inferlab.algorithms.partials import splitkv_decode
from tests.numerics import assert_as_exact_as_naive, max_abs_err, naive_reference, requires_cuda

pytestmark = pytest.mark.usefixtures("single_thread")
BLOCKS = [(16, 16), (64, 64), (128, 128), (64, 128), (128, 64)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HEADS, HEAD_DIM = 2, 64
FP32_TOL = 1e-5      # unit-scale inputs: fp32 rounding of a convex combination of N(0,1) values


@pytest.fixture(scope="module")
def case(draw_qkv):
    """case(T, heads, dtype, causal) -> seeded q, k, v, their float64 answer, naive's error
    in dtype. Memoised: shared by every block shape and implementation, because fp16
    naive attention at T=2048 alone takes about a second on this CPU."""

    @functools.cache
    def make(T: int, heads: int, dtype: torch.dtype, causal: bool):
        gen = torch.Generator().manual_seed(T)
        q, k, v = draw_qkv(gen, (1, heads, T, HEAD_DIM), dtype)
        return q, k, v, *naive_reference(q, k, v, causal)

    return make


def _assert_as_exact_as_naive(out, q, ref, naive_err):
    """fp32 tight; fp16/bf16 may err up to twice naive in that dtype (flash-attention's rule,
    tests/numerics.py)."""
    assert out.dtype == q.dtype and out.shape == q.shape
    if q.dtype == torch.float32:
        assert max_abs_err(out, ref) <= FP32_TOL, (max_abs_err(out, ref), naive_err)
    else:
        assert_as_exact_as_naive(out, ref, naive_err)


def _check_against_naive(out, q, k, v, causal):
    _assert_as_exact_as_naive(out, q, *naive_reference(q, k, v, causal))


# ---------------------------------------------------------------- the reference itself


@pytest.mark.parametrize(("keys", "causal", "scale"), [
    (None, False, None), (None, True, None), (1, False, None), (37, False, None),
    (80, False, None), (None, True, 0.3)])
def test_naive_matches_pytorch_sdpa_in_float64(make_qkv, keys, causal, scale):
    q, k, v = make_qkv((2, 3, 50, 16), torch.float64, keys=keys)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                scale=scale)
    got = naive_attention(q, k, v, causal=causal, scale=scale)
    assert max_abs_err(got, expected) <= 1e-12


# ---------------------------------------------------------------- equivalence grid

# Short lengths (1, block non-multiples 100 and 300, 512) take every block shape; 2048
# (one head keeps it affordable) takes the two shapes the chapter reports, (128,128) and
# (64,64): (16,16) at 2048 is 16k python-level block pairs per call, for no new path.
SIZES = [(T, HEADS, blocks) for T in (1, 100, 300, 512) for blocks in BLOCKS] + [
    (2048, 1, blocks) for blocks in ((128, 128), (64, 64))]


@pytest.mark.parametrize("impl", list(TILED))
@pytest.mark.parametrize("T, heads, blocks", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_equals_float64_attention(case, impl, T, heads, blocks, dtype, causal):
    q, k, v, ref, naive_err = case(T, heads, dtype, causal)
    out, _ = TILED[impl](q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1])
    _assert_as_exact_as_naive(out, q, ref, naive_err)


@pytest.mark.parametrize("impl", list(TILED))
@pytest.mark.parametrize("blocks", [(1, 1), (3, 5), (5, 3), (7, 2), (2, 9)])
def test_tiled_awkward_blocks_causal(make_qkv, impl, blocks):
    # Tiny, coprime blocks put tile edges at every offset from the diagonal.
    q, k, v = make_qkv((1, HEADS, 37, 8))
    out, _ = TILED[impl](q, k, v, causal=True, block_q=blocks[0], block_k=blocks[1])
    _check_against_naive(out, q, k, v, causal=True)


@pytest.mark.parametrize("impl", list(TILED))
@pytest.mark.parametrize("keys", [1, 77, 200])
def test_tiled_rectangular_non_causal(make_qkv, impl, keys):
    q, k, v = make_qkv((2, HEADS, 45, 32), keys=keys)
    out, stats = TILED[impl](q, k, v, block_q=16, block_k=64)
    _check_against_naive(out, q, k, v, causal=False)
    assert stats.computed_pairs == stats.total_pairs == math.ceil(45 / 16) * math.ceil(keys / 64)


@pytest.mark.parametrize("impl", list(TILED))
def test_tiled_honours_explicit_scale(make_qkv, impl):
    q, k, v = make_qkv((1, HEADS, 90, 16))
    out, _ = TILED[impl](q, k, v, causal=True, block_q=32, block_k=32, scale=0.05)
    ref = naive_attention(q.double(), k.double(), v.double(), causal=True, scale=0.05)
    assert max_abs_err(out, ref) <= FP32_TOL


@pytest.mark.parametrize("impl", list(TILED))
def test_tiled_accepts_non_contiguous_inputs(make_qkv, impl):
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2)
               for t in make_qkv((2, HEADS, 70, 16)))
    assert not q.is_contiguous()
    out, _ = TILED[impl](q, k, v, causal=True, block_q=32, block_k=16)
    _check_against_naive(out, q, k, v, causal=True)


# ---------------------------------------------------------------- large scores


@pytest.mark.parametrize("impl", list(TILED))
@pytest.mark.parametrize("query_scale", [30.0, 40.0])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_large_scores_stay_finite_and_exact(make_qkv, impl, query_scale, dtype, causal):
    q, k, v = make_qkv((1, HEADS, 300, HEAD_DIM), dtype)
    q = q * query_scale  # scores in the hundreds: exp would overflow without the running max
    out, _ = TILED[impl](q, k, v, causal=causal, block_q=64, block_k=128)
    assert torch.isfinite(out).all()
    assert_as_exact_as_naive(out, *naive_reference(q, k, v, causal))


# ---------------------------------------------------------------- causal tile skipping


def _run_stats(impl, T, block_q, block_k, causal=True) -> TileStats:
    gen = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(1, 1, T, 4, generator=gen) for _ in range(3))
    return TILED[impl](q, k, v, causal=causal, block_q=block_q, block_k=block_k)[1]


@pytest.mark.parametrize("impl", list(TILED))
@pytest.mark.parametrize("block, computed, total", [(128, 136, 256), (64, 528, 1024)])
def test_causal_pairs_match_the_chapter(impl, block, computed, total):
    stats = _run_stats(impl, 2048, block, block)
    assert (stats.computed_pairs, stats.total_pairs) == (computed, total)
    assert stats.fraction == pytest.approx(computed / total)


@pytest.mark.parametrize("impl", list(TILED))
@pytest.mark.parametrize("draw", range(3))
def test_causal_pairs_brute_force_on_random_shapes(rng, impl, draw):
    T, block_q, block_k = (int(x) for x in torch.randint(5, 160, (3,), generator=rng))
    stats = _run_stats(impl, T, block_q, block_k)
    # the tile pairs holding at least one (query i, key j <= i), every pair enumerated
    allowed = torch.ones(T, T, dtype=torch.bool).tril().nonzero().tolist()
    tiles = {(i // block_q, j // block_k) for i, j in allowed}
    assert stats.computed_pairs == len(tiles), (T, block_q, block_k)
    assert stats.total_pairs == math.ceil(T / block_q) * math.ceil(T / block_k)


@pytest.mark.parametrize("impl", list(TILED))
def test_non_causal_computes_every_pair(impl):
    stats = _run_stats(impl, 300, 64, 128, causal=False)
    assert stats.computed_pairs == stats.total_pairs == 5 * 3
    assert stats.fraction == 1.0


# ---------------------------------------------------------------- validation


ENTRY_POINTS = {"naive": naive_attention, "tiled": tiled_attention,
                "tiled_fast": tiled_attention_fast,
                "splitkv": lambda q, k, v, **kw: splitkv_decode(q, k, v, splits=1, **kw)}


BAD_INPUTS = {
    # name: (argument the message must name, function making (q, k, v, kwargs) from good ones)
    "q_3d": ("q", lambda q, k, v: (q[0], k, v, {})),
    "k_5d": ("k", lambda q, k, v: (q, k[None], v, {})),
    "v_list": ("v", lambda q, k, v: (q, k, v.tolist(), {})),
    "int_dtype": ("q", lambda q, k, v: (q.long(), k.long(), v.long(), {})),
    "k_dtype": ("k", lambda q, k, v: (q, k.double(), v, {})),
    "v_batch": ("v", lambda q, k, v: (q, k, torch.cat([v, v]), {})),
    "k_heads": ("k", lambda q, k, v: (q, k[:, :1], v, {})),
    "k_head_dim": ("k", lambda q, k, v: (q, k[..., :4], v, {})),
    "v_keys": ("v", lambda q, k, v: (q, k, v[:, :, :3], {})),
    "no_keys": ("k", lambda q, k, v: (q, k[:, :, :0], v[:, :, :0], {})),
    "k_device": ("k", lambda q, k, v: (q, k.to("meta"), v, {})),  # 'meta': no hardware
    "scale_zero": ("scale", lambda q, k, v: (q, k, v, {"scale": 0.0})),
    "scale_negative": ("scale", lambda q, k, v: (q, k, v, {"scale": -1.0})),
    "scale_nan": ("scale", lambda q, k, v: (q, k, v, {"scale": float("nan")})),
    "scale_inf": ("scale", lambda q, k, v: (q, k, v, {"scale": float("inf")})),
    "scale_str": ("scale", lambda q, k, v: (q, k, v, {"scale": "0.1"})),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_raise_naming_the_argument(make_qkv, entry, case):
    argument, corrupt = BAD_INPUTS[case]
    q, k, v, kwargs = corrupt(*make_qkv((1, 2, 8, 8)))
    with pytest.raises(ValueError, match=argument):
        ENTRY_POINTS[entry](q, k, v, **kwargs)


@pytest.mark.parametrize("entry", ["naive", "tiled", "tiled_fast"])
def test_causal_with_unequal_lengths_is_refused(make_qkv, entry):
    q, k, v = make_qkv((1, 2, 8, 8), keys=12)
    with pytest.raises(ValueError, match="causal"):
        ENTRY_POINTS[entry](q, k, v, causal=True)


@pytest.mark.parametrize("impl", list(TILED))
@pytest.mark.parametrize("argument", ["block_q", "block_k"])
@pytest.mark.parametrize("value", [0, -4, 16.0, True, "16"])
def test_bad_blocks_raise_naming_the_argument(make_qkv, impl, argument, value):
    q, k, v = make_qkv((1, 2, 8, 8))
    with pytest.raises(ValueError, match=argument):
        TILED[impl](q, k, v, **{argument: value})


@requires_cuda
@pytest.mark.parametrize("impl", list(TILED))
def test_tiled_runs_on_cuda(draw_qkv, impl):
    q, k, v = draw_qkv(torch.Generator().manual_seed(0), (1, HEADS, 300, HEAD_DIM),
                       torch.float16, device="cuda")
    out, stats = TILED[impl](q, k, v, causal=True, block_q=64, block_k=128)
    assert out.device == q.device and stats.computed_pairs < stats.total_pairs
    _check_against_naive(out, q, k, v, causal=True)
