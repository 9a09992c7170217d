"""The traffic and decode models: limits, monotonicity, the chapter's predictions."""

import math

import pytest

from inferlab.traffic import (
    block_pairs,
    decode_cache_bytes,
    decode_floor_time_us,
    implied_block_q,
    naive_hbm_elements,
    tiled_hbm_elements,
    traffic_ratio,
)


def _brute_force_pairs(T, block_q, block_k, causal):
    """Count tile pairs by looking at every (query, key) index they contain."""
    computed = total = 0
    for qs in range(0, T, block_q):
        for ks in range(0, T, block_k):
            total += 1
            needed = any(not causal or k <= q
                         for q in range(qs, min(T, qs + block_q))
                         for k in range(ks, min(T, ks + block_k)))
            computed += needed
    return computed, total


@pytest.mark.parametrize("T", [1, 7, 64, 100, 257])
@pytest.mark.parametrize("blocks", [(16, 16), (16, 32), (32, 16), (64, 64)])
def test_block_pairs_matches_brute_force(T, blocks):
    for causal in (False, True):
        assert block_pairs(T, T, *blocks, causal) == _brute_force_pairs(T, *blocks, causal)


def test_chapter_causal_block_counts():
    # Chapter: blocks of 128 at 2,048 tokens compute 53% of pairs, blocks of 64 52%,
    # and 2,080 block pairs at 8,192 tokens with blocks of 128.
    assert block_pairs(2048, 2048, 128, 128, True) == (136, 256)
    assert block_pairs(2048, 2048, 64, 64, True) == (528, 1024)
    assert block_pairs(8192, 8192, 128, 128, True)[0] == 2080


@pytest.mark.parametrize("T", [256, 1024, 4096])
def test_causal_tiled_closed_form(T):
    d, B = 64, 128
    assert tiled_hbm_elements(T, d, B, causal=True) == T * T * d // B + 3 * T * d
    assert tiled_hbm_elements(T, d, B, causal=False) == 2 * T * T * d // B + 2 * T * d


def test_chapter_predictions_for_query_tile_128():
    # The chapter printed 9.1, 10.3, 11.1, 11.5 for d = 64, B_q = 128.
    got = [round(traffic_ratio(T, 64, 128, causal=True), 1) for T in (1024, 2048, 4096, 8192)]
    assert got == [9.1, 10.3, 11.1, 11.5]


@pytest.mark.parametrize("causal,factor", [(True, 6), (False, 2)])
@pytest.mark.parametrize("d,block_q", [(64, 128), (128, 64), (64, 32)])
def test_ratio_tends_to_limit(causal, factor, d, block_q):
    limit = factor * block_q / d
    far = traffic_ratio(2**20, d, block_q, causal=causal)
    assert math.isclose(far, limit, rel_tol=1e-3)


@pytest.mark.parametrize("causal", [True, False])
def test_ratio_monotone_in_T_and_block(causal):
    by_T = [traffic_ratio(T, 64, 128, causal=causal) for T in (128, 512, 1024, 4096, 16384)]
    assert by_T == sorted(by_T) and len(set(by_T)) == len(by_T)
    by_B = [traffic_ratio(4096, 64, B, causal=causal) for B in (16, 32, 64, 128, 256, 512)]
    assert by_B == sorted(by_B) and len(set(by_B)) == len(by_B)


def test_naive_terms():
    T, d = 1000, 64
    assert naive_hbm_elements(T, d) == 4 * T * d + 4 * T * T
    assert naive_hbm_elements(T, d, causal=True) - naive_hbm_elements(T, d) == 2 * T * T


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block_q", [32, 128, 256])
def test_implied_block_q_inverts_ratio(causal, block_q):
    T, d = 4096, 64
    ratio = traffic_ratio(T, d, block_q, causal=causal)
    assert math.isclose(implied_block_q(ratio, T, d, causal=causal), block_q, rel_tol=1e-9)


def test_implied_block_q_limit_and_unexplainable():
    assert implied_block_q(12.0, None, 64, causal=True) == 128
    assert implied_block_q(4.0, None, 64, causal=False) == 128
    # more than naive/(Q, K, V, O once) cannot be explained by any tile
    assert implied_block_q(1e6, 1024, 64) == math.inf


def test_decode_model_reproduces_chapter_arithmetic():
    # 12 heads, d = 64, fp16, 16,384 keys at batch 1 is 48 MiB of K and V.
    cache = decode_cache_bytes(1, 12, 16384, 64, 2)
    assert cache == 48 * 2**20
    # The chapter's sustainable bandwidth is six times the 50 GB/s it measured.
    assert round(decode_floor_time_us(cache, 6 * 50.0), -1) == 170


@pytest.mark.parametrize("call,name", [
    (lambda: block_pairs(0, 1, 1, 1, False), "T_q"),
    (lambda: block_pairs(4, 4, 0, 1, False), "block_q"),
    (lambda: block_pairs(4, 5, 1, 1, True), "T_q"),
    (lambda: naive_hbm_elements(-3, 64), "T"),
    (lambda: tiled_hbm_elements(64, 64, 1.5), "block_q"),
    (lambda: traffic_ratio(64, 0, 16), "d"),
    (lambda: implied_block_q(-1.0, 64, 64), "measured_ratio"),
    (lambda: implied_block_q(float("nan"), 64, 64), "measured_ratio"),
    (lambda: decode_cache_bytes(1, 12, 0, 64, 2), "cache_len"),
    (lambda: decode_floor_time_us(100, 0.0), "bandwidth_gbs"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
