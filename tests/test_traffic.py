"""The traffic and decode models: limits, monotonicity, the chapter's predictions, brute-force
counts over awkward shapes; split-KV decode honouring an explicit scale (the decode the
model's floor is about); and the traffic stage's rows."""

import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from inferlab.algorithms.attention import naive_attention
from inferlab.algorithms.partials import splitkv_decode
from inferlab.algorithms.traffic import (
    block_pairs,
    decode_cache_bytes,
    decode_floor_time_us,
    implied_block_q,
    naive_hbm_elements,
    tiled_hbm_elements,
    traffic_ratio,
)
from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.register import Evidence
from inferlab.measurement.backends import cpu_flash_split_sizes
from inferlab.stages import traffic
from inferlab.stages.traffic import CPU_FLASH_OP, naive_flops
from inferlab.workflow.runner import StageContext
from tests.series_helper import series_table


def _brute_force(T, d, block_q, block_k, causal):
    """(computed, total) tile pairs, found by looking at every (query, key) index they
    contain, and the elements moved: Q read and O written once, plus K and V (2·d per key)
    of every key tile a query tile computes, each tile at its real length (the last one may
    be short)."""
    computed = total = keys = 0
    for qs in range(0, T, block_q):
        for ks in range(0, T, block_k):
            tile = range(ks, min(T, ks + block_k))
            total += 1
            if any(not causal or k <= q for q in range(qs, min(T, qs + block_q)) for k in tile):
                computed += 1
                keys += len(tile)
    return (computed, total), 2 * T * d + 2 * d * keys


AWKWARD_T = [1, 7, 64, 100, 257, 300]
AWKWARD_BLOCKS = [(16, 16), (16, 48), (48, 16), (64, 32), (32, 64), (100, 7)]


@pytest.mark.parametrize("T", AWKWARD_T)
@pytest.mark.parametrize("blocks", AWKWARD_BLOCKS)
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_elements_and_pairs_match_a_brute_force_count(T, blocks, causal):
    """T not a multiple of the tile, B_k != B_q either way: the counts are the tiles'."""
    d = 8
    pairs, expected = _brute_force(T, d, *blocks, causal)
    assert block_pairs(T, T, *blocks, causal) == pairs
    assert tiled_hbm_elements(T, d, *blocks, causal=causal) == expected
    ratio = traffic_ratio(T, d, *blocks, causal=causal)
    assert ratio == naive_hbm_elements(T, d, causal=causal) / expected


def test_block_k_changes_the_causal_count_and_defaults_to_block_q():
    T, d = 256, 64
    # key tiles wider than the query tile read keys past the diagonal
    assert tiled_hbm_elements(T, d, 16, 64, causal=True) > tiled_hbm_elements(T, d, 16, 16,
                                                                              causal=True)
    assert tiled_hbm_elements(T, d, 16, causal=True) == _brute_force(T, d, 16, 16, True)[1]
    assert traffic_ratio(T, d, 16, 64) == traffic_ratio(T, d, 16, 64, causal=True) < \
        traffic_ratio(T, d, 16)


def test_the_defaults_are_full_for_the_count_and_causal_for_the_ratio():
    T, d, B = 300, 8, 48
    assert tiled_hbm_elements(T, d, B) == _brute_force(T, d, B, B, False)[1]
    assert traffic_ratio(T, d, B) == naive_hbm_elements(T, d, True) / \
        _brute_force(T, d, B, B, True)[1]
    assert naive_hbm_elements(T, d) == 4 * T * d + 4 * T * T
    assert naive_hbm_elements(T, d, causal=True) == 4 * T * d + 6 * T * T
    ratio = traffic_ratio(4096, 64, 128, causal=True)
    assert implied_block_q(ratio, 4096, 64) == pytest.approx(128)
    # the large-T limit: R·d/6 causal, R·d/2 full; more than naive over (Q, K, V, O once)
    # is explained by no tile
    assert implied_block_q(12.0, None, 64) == 128.0
    assert implied_block_q(4.0, None, 64, causal=False) == 128
    assert implied_block_q(1e6, 1024, 64) == math.inf


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


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("block_q", [32, 128, 256])
def test_implied_block_q_inverts_ratio(causal, block_q):
    T, d = 4096, 64
    ratio = traffic_ratio(T, d, block_q, causal=causal)
    assert math.isclose(implied_block_q(ratio, T, d, causal=causal), block_q, rel_tol=1e-9)


@pytest.mark.parametrize("causal,T,d", [(False, 64, 64), (False, 100, 50), (True, 64, 64),
                                        (True, 100, 50), (True, 30, 10)])
def test_implied_block_q_at_its_boundary_is_inf_not_zero_division(causal, T, d):
    """At the ratio where the kernel would move exactly Q, K, V and O once (naive / fixed
    traffic), no tile explains it: inf, not ZeroDivisionError; just below it, a finite tile."""
    fixed = (3 if causal else 2) * T * d
    boundary = naive_hbm_elements(T, d, causal=causal) / fixed
    assert naive_hbm_elements(T, d, causal=causal) / boundary == fixed  # exactly at it
    assert implied_block_q(boundary, T, d, causal=causal) == math.inf
    below = implied_block_q(boundary * (1 - 1e-6), T, d, causal=causal)
    assert math.isfinite(below) and below > 1e3 * T


def test_implied_block_q_of_a_ratio_below_one_is_a_small_tile():
    """A fused kernel slower than naive (a ratio under 1) still names a tile, not an error."""
    T, d = 1024, 64
    assert 0 < implied_block_q(0.5, T, d) < implied_block_q(1.0, T, d) < 64
    assert implied_block_q(0.5, None, d) == 0.5 * d / 6


def test_decode_floor_units_are_microseconds_at_gigabytes_per_second():
    assert decode_floor_time_us(10**9, 1.0) == 1e6  # 1 GB at 1 GB/s: one second
    assert decode_floor_time_us(3 * 10**9, 2.0) == 1.5e6
    assert decode_floor_time_us(0, 0.5) == 0.0  # an empty cache takes no time; 0.5 GB/s is fine
    assert decode_cache_bytes(1, 1, 1, 1, 1) == 2
    assert decode_cache_bytes(3, 5, 7, 11, 2) == 2 * 3 * 5 * 7 * 11 * 2


def test_decode_model_reproduces_chapter_arithmetic():
    # 12 heads, d = 64, fp16, 16,384 keys at batch 1 is 48 MiB of K and V.
    cache = decode_cache_bytes(1, 12, 16384, 64, 2)
    assert cache == 48 * 2**20
    # The chapter's sustainable bandwidth is six times the 50 GB/s it measured.
    assert round(decode_floor_time_us(cache, 6 * 50.0), -1) == 170


def test_causal_needs_equal_lengths_and_says_both():
    with pytest.raises(ValueError, match=r"^causal requires T_q == T_k, got T_q=4, T_k=5$"):
        block_pairs(4, 5, 2, 2, True)
    assert block_pairs(4, 5, 2, 2, False) == (6, 6)


# ---------------------------------------------------------------- split-KV decode


@pytest.mark.parametrize("splits", [1, 3, 8])
@pytest.mark.parametrize("scale", [0.05, 2.0])
def test_splitkv_decode_honours_an_explicit_scale(make_qkv, splits, scale):
    """The scale reaches every chunk: the result is attention at that scale, and not the
    default 1/sqrt(d) (the two differ by far more than the tolerance)."""
    q, k, v = make_qkv((2, 3, 1, 16), dtype=torch.float64, keys=37)
    out = splitkv_decode(q, k, v, splits, scale=scale)
    expected = naive_attention(q, k, v, scale=scale)
    assert (out - expected).abs().max().item() <= 1e-12
    assert (out - naive_attention(q, k, v)).abs().max().item() > 1e-3


# ---------------------------------------------------------------- the traffic stage's tiles


def _prefill_point(rng, T: int, causal: bool, fused_kernel: str | None,
                   triton_blocks=()) -> list[dict]:
    """Prefill rows of one point, paired with naive: naive, sdpa_flash (whose op the profiler
    named ``fused_kernel``) and our Triton kernel at each (BLOCK_M, BLOCK_N=64)."""
    naive_ms = rng.uniform(50, 100)
    impls = [("naive", False, None, None, "aten::bmm"),
             ("sdpa_flash", True, None, None, fused_kernel)]
    impls += [("triton_flash", False, b, 64, f"_attn_fwd (Triton, BLOCK_M={b})")
              for b in triton_blocks]
    return [_timed({"impl": impl, "fused_sdpa": fused, "T": T, "batch": 1, "heads": 2, "d": 64,
                    "dtype": "float32", "causal": causal, "block_q": block_q,
                    "block_k": block_k, "threads": 1, "ratio_to": "naive", "flops": 1,
                    "kernel": kernel, "status": "ok"},
                   naive_ms, 1 if impl == "naive" else rng.uniform(2, 12))
            for impl, fused, block_q, block_k, kernel in impls]


def _timed(row: dict, naive_ms: float, speedup: float, **fields) -> dict:
    """``row`` (with ``fields``) timed ``speedup`` times faster than naive, its ratio ±2 %."""
    ms = naive_ms / speedup
    return {**row, **fields, "median_ms": ms, "ratio": ms / naive_ms,
            "ratio_ci_low": 0.98 * ms / naive_ms, "ratio_ci_high": 1.02 * ms / naive_ms}


def _traffic(tmp_path, prefill_rows, device: str = "cpu", ceilings: dict | None = None):
    """The traffic stage on ``prefill_rows`` (row dicts, through the real writer and reader;
    or a prefill Table as read), its rows through the writer and reader."""

    table = prefill_rows if isinstance(prefill_rows, artifacts.Table) else artifacts.decode(
        "prefill", artifacts.encode("prefill", prefill_rows))
    series = series_table(prefill=table)  # what traffic reads: the series of that one run
    evidence = {"series": Evidence("series", Path(tmp_path), series, None, None)}
    if ceilings is not None:  # the probe's ceilings, for the roofline columns
        evidence["probe"] = Evidence("probe", Path(tmp_path), {"ceilings": ceilings}, None, None)
    ctx = StageContext("traffic", Path(tmp_path), "test", device, 1, 0, evidence, lambda _: None)
    out = traffic.run(traffic.Params(block_q_model=128), ctx)
    return artifacts.decode("traffic", artifacts.encode("traffic", out)).frame


@pytest.mark.parametrize("T", [100, 512, 1024, 2048])
@pytest.mark.parametrize("causal", [False, True])
def test_cpu_flash_kernel_rows_use_its_known_tile(tmp_path, T, causal):
    rng = random.Random(T + causal)
    rows = _traffic(tmp_path, _prefill_point(rng, T, causal, f"{CPU_FLASH_OP}+aten::empty"))
    assumed, known = rows[rows["tile"] == "assumed"], rows[rows["tile"] == "known"]
    assert len(assumed) == 1 and len(known) == 1
    q_split, kv_split = cpu_flash_split_sizes(T, T)
    row = known.iloc[0]
    assert (row["block_q_model"], row["cpu_kernel_q_split"], row["cpu_kernel_kv_split"]) == (
        q_split, q_split, kv_split)
    assert row["model_ratio"] == pytest.approx(traffic_ratio(T, 64, q_split, kv_split, causal))
    assert assumed.iloc[0]["model_ratio"] == pytest.approx(traffic_ratio(T, 64, 128, 128, causal))
    assert row["fused_impl"] == "sdpa_flash"
    assert row["measured_ratio"] == pytest.approx(assumed.iloc[0]["measured_ratio"])
    assert "FlashAttentionKernel.cpp" in row["note"] and CPU_FLASH_OP in row["note"]
    assert "traffic.block_q_model" in assumed.iloc[0]["note"]


@pytest.mark.parametrize("kernel", [None, "aten::_scaled_dot_product_efficient_attention"])
def test_no_known_tile_when_the_cpu_flash_kernel_did_not_run(tmp_path, kernel):
    rows = _traffic(tmp_path, _prefill_point(random.Random(7), 1024, True, kernel))
    assert list(rows["tile"]) == ["assumed"]


def test_triton_rows_use_the_blocks_they_were_launched_with(tmp_path):
    rows = _traffic(tmp_path, _prefill_point(random.Random(11), 1024, True, None, (64, 128)),
                    device="cuda")
    known = rows[rows["tile"] == "known"].set_index("block_q_model")
    assert sorted(known.index) == [64, 128] and set(known["fused_impl"]) == {"triton_flash"}
    for block_q in (64, 128):
        assert known.loc[block_q, "model_ratio"] == pytest.approx(
            traffic_ratio(1024, 64, block_q, 64, causal=True))
        assert f"BLOCK_M = {block_q}, BLOCK_N = 64" in known.loc[block_q, "note"]
    assert known["cpu_kernel_q_split"].isna().all()
    assumed = rows[rows["tile"] == "assumed"].iloc[0]
    assert "do not report" in assumed["note"] and pd.isna(assumed["cpu_kernel_q_split"])


def test_the_committed_prefill_of_every_key_gets_the_cpu_kernels_tile(tmp_path):
    """Evidence made by older code (every key committed under results/) still feeds the
    stage, measured ratios and all, and each point where PyTorch's CPU flash kernel ran
    gets its known-tile row (on a GPU's key, where our Triton kernel ran, at its own tile)."""

    keys = [k for k in layout.keys(layout.REPO_ROOT)
            if layout.artifact_path(layout.REPO_ROOT, k, "prefill").is_file()]
    if not keys:
        pytest.skip("no committed prefill.csv in this checkout")
    for key in keys:
        table = artifacts.read(layout.artifact_path(layout.REPO_ROOT, key, "prefill"), "prefill")
        prefill = table.frame
        ran = prefill[(prefill["status"] == "ok")
                      & (prefill["kernel"].fillna("").str.contains(CPU_FLASH_OP, regex=False)
                         | (prefill["impl"] == "triton_flash"))]
        rows = _traffic(tmp_path, table)
        assert rows["measured_ratio"].notna().any(), key
        known = rows[rows["tile"] == "known"]
        points = {(int(r.T), bool(r.causal), str(r.dtype)) for r in ran.itertuples()}
        assert {(int(r.T), bool(r.causal), str(r.dtype)) for r in known.itertuples()} == points


def test_each_fused_kernel_that_ran_has_its_own_assumed_row(tmp_path):
    """Two fused SDPA kernels at one point: two assumed-tile rows, each with its own
    kernel's measured ratio, the fastest one marked (a claim about the chapter's kernel
    selects it by name, one about PyTorch's fused kernel in general the fastest)."""
    naive, flash = _prefill_point(random.Random(5), 1024, True, None)
    rows = [naive, _timed(flash, naive["median_ms"], 8),
            _timed(flash, naive["median_ms"], 4, impl="sdpa_efficient")]
    out = _traffic(tmp_path, rows, device="cuda")
    assumed = out[out["tile"] == "assumed"].set_index("fused_impl")
    assert sorted(assumed.index) == ["sdpa_efficient", "sdpa_flash"]
    assert assumed.loc["sdpa_flash", "measured_ratio"] == pytest.approx(8)
    assert assumed.loc["sdpa_efficient", "measured_ratio"] == pytest.approx(4)
    assert assumed.loc["sdpa_efficient", "implied_block_q"] == pytest.approx(
        implied_block_q(4, 1024, 64, causal=True))
    assert assumed["fastest_fused"].to_dict() == {"sdpa_efficient": False, "sdpa_flash": True}
    assert (assumed["model_ratio"] == traffic_ratio(1024, 64, 128, causal=True)).all()
    # exercise 3's own formula beside the finite-T inversion: ratio = 6 B_q / d, causal
    assert assumed.loc["sdpa_flash", "implied_block_q_limit"] == pytest.approx(8 * 64 / 6)
    assert assumed.loc["sdpa_efficient", "implied_block_q_limit"] == pytest.approx(4 * 64 / 6)


def test_a_point_where_no_fused_kernel_ran_keeps_one_assumed_row(tmp_path):
    rows = [dict(r, status="unavailable") if r["fused_sdpa"] else r
            for r in _prefill_point(random.Random(9), 1024, False, None)]
    out = _traffic(tmp_path, rows, device="cuda")
    assert len(out) == 1 and out.iloc[0]["tile"] == "assumed"
    assert bool(out.iloc[0]["fastest_fused"]) and pd.isna(out.iloc[0]["fused_impl"])
    assert "no fused SDPA backend ran" in out.iloc[0]["note"]


@pytest.mark.parametrize("causal", [False, True])
def test_each_row_has_naive_attentions_roofline_from_the_probe(tmp_path, causal):
    """naive_intensity: naive attention's FLOPs over the model's naive bytes in the row's
    dtype, its FLOPs those of every score whatever the mask (it computes all T² scores and
    masks after: not prefill's halved causal count); machine_balance: the probe's matmul
    ceiling over its copy ceiling in that dtype."""
    T, d = 2048, 64
    rows = _prefill_point(random.Random(3), T, causal, None)
    for row in rows:  # prefill's count, for its batch and heads: a causal kernel's work
        row["flops"] = row["batch"] * row["heads"] * 4 * T * T * d // (2 if causal else 1)
    out = _traffic(tmp_path, rows, device="cuda",
                   ceilings={"copy_gbs": 50.0, "matmul_gflops": {"float32": 1000.0}})
    intensity = 4 * T * T * d / (naive_hbm_elements(T, d, causal) * 4)  # one head, float32
    assert out["naive_intensity"].tolist() == pytest.approx([intensity] * len(out))
    assert out["machine_balance"].tolist() == pytest.approx([20.0] * len(out))
    # without the probe, or without a ceiling in this dtype, no balance
    for ceilings in (None, {"copy_gbs": 50.0, "matmul_gflops": {"float16": 1000.0}}):
        assert _traffic(tmp_path, rows, "cuda", ceilings)["machine_balance"].isna().all()


@pytest.mark.parametrize("causal", [False, True])
def test_naive_attention_computes_every_score_whatever_the_mask(causal):
    """The FLOPs the roofline gives naive attention (traffic.naive_flops) are the ones the
    profiler counts for naive_attention under either mask: it masks after the product."""

    B, H, T, d = 1, 2, 192, 32
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        naive_attention(q, k, v, causal=causal)
    counted = sum(e.flops or 0 for e in prof.events())
    assert counted == B * H * naive_flops(T, d)
