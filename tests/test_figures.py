"""The report's figures on small hand-made inputs: the speed-up figure draws what the claims
computed (never a ratio of its own), the roofline's intensities are the row's FLOPs over
the traffic model's bytes at the tile that ran, and every implementation has a colour.
The page as a whole is tested in tests/test_report.py and, in a browser, test_browser.py."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from inferlab.algorithms.traffic import naive_hbm_elements, traffic_ratio
from inferlab.judging import claims
from inferlab.presentation import figures, plotting, roofline

SEED = 20240611
CEILINGS = {"copy_gbs": 40.0, "matmul_gflops": {"float32": 120.0, "bfloat16": 500.0}}


# ---------------------------------------------------------------- colours


@pytest.mark.parametrize("row, label", [
    ({"impl": "triton_flash", "block_q": 64}, "triton_flash B=64"),
    ({"impl": "triton_decode", "splits": 4}, "triton_decode, 4 splits"),
    ({"impl": "triton_decode", "splits": 1}, "triton_decode, 1 split"),
    ({"impl": "splitkv", "splits": 16}, "splitkv, 16 splits"),
    ({"impl": "tiled", "block_q": 256}, "tiled B=256")])
def test_implementation_labels(row, label):
    assert plotting.impl_label(row) == label


def test_our_triton_kernels_have_colours_of_their_own():
    grey = "#7f7f7f"  # what an implementation without a colour gets
    labels = ["triton_flash B=64", "triton_flash B=128", "triton_decode, 4 splits",
              "triton_decode, 16 splits", "sdpa_flash", "tiled B=64", "tiled B=128",
              "splitkv, 4 splits", "splitkv, 16 splits", "naive"]
    colours = [plotting.colour(label) for label in labels]
    assert grey not in colours
    assert len(set(colours)) == len(labels)


# ---------------------------------------------------------------- speed-up from the claims


def _claim_rows(rng: random.Random, impl: str, lengths=(1024, 2048, 4096), ci=True,
                **extra) -> list[dict]:
    """Rows as a claim hands them over: its point columns, ``value`` in its orientation and
    (under the contract with the claims) ``ci_low``/``ci_high``; a stale ``ratio`` that
    the figure must not read."""
    rows = []
    for T in lengths:
        value = rng.uniform(1.5, 12)
        row = {"impl": impl, "T": T, "dtype": "float32", "causal": True, "value": value,
               "ratio": 1000.0, "noisy": False, **extra}
        if ci:
            row |= {"ci_low": value * 0.9, "ci_high": value * 1.2}
        rows.append(row)
    return rows


def test_speedup_series_are_the_claims_rows_not_a_ratio_recomputed():
    rng = random.Random(SEED)
    fused = _claim_rows(rng, "sdpa_flash")
    tiled = _claim_rows(rng, "tiled", block_q=128, ci=False)
    results = [{"id": "C13-05", "rows": fused}, {"id": "C13-07", "rows": tiled},
               {"id": "C13-99", "rows": _claim_rows(rng, "naive")}]
    series = {label: rows for label, _, rows in figures.claim_series(results)}
    assert set(series) == {"naive ÷ fused (sdpa_flash)", "tiled ÷ naive (tiled B=128)"}
    assert list(series["naive ÷ fused (sdpa_flash)"]["value"]) == [r["value"] for r in fused]
    below, above = figures._interval(series["naive ÷ fused (sdpa_flash)"])
    values = np.array([r["value"] for r in fused])
    np.testing.assert_allclose(below, values * 0.1)
    np.testing.assert_allclose(above, values * 0.2)
    assert figures._interval(series["tiled ÷ naive (tiled B=128)"]) is None  # no bar


def test_a_non_finite_value_or_missing_claim_draws_nothing_for_it():
    rng = random.Random(SEED + 1)
    rows = _claim_rows(rng, "sdpa_flash")
    rows[1]["value"] = float("inf")
    series = figures.claim_series([{"id": "C13-05", "rows": rows}])
    assert [len(r) for _, _, r in series] == [2]
    assert figures.claim_series([{"id": "C13-05", "rows": []}]) == []
    assert figures.speedup_figure([], "key", {}) is None


def test_speedup_figure_draws_the_claims_and_the_chapters_bands():
    rng = random.Random(SEED + 2)
    results = [{"id": "C13-05", "rows": _claim_rows(rng, "sdpa_flash")}]
    bands = figures.speedup_bands(claims.load().claims)
    drawn = figures.speedup_figure(results, "cpu-key", bands)
    assert ">naive ÷ fused (sdpa_flash)</text>" in drawn
    assert ">chapter: naive ÷ fused, 5.5–13.5×</text>" in drawn
    assert ">1,024</text>" in drawn and ">4,096</text>" in drawn


def test_bands_are_the_bounds_of_the_named_claims_only():
    loaded = claims.load().claims
    by_id = {c.id: c for c in loaded}
    bands = figures.speedup_bands(loaded)
    assert bands == {name: tuple(by_id[cid].check.expect.bounds)
                     for name, cid in figures.SPEEDUP_CLAIMS.items()}
    assert figures.speedup_bands([c for c in loaded if c.id != "C13-07"]).keys() == {
        "naive ÷ fused"}


# ---------------------------------------------------------------- roofline


def _prefill(rng: random.Random, T: int, dtype: str = "float32") -> pd.DataFrame:
    rows = []
    for impl, fused, block in (("naive", False, None), ("sdpa_flash", True, None),
                               ("tiled", False, 128), ("sdpa_math", False, None),
                               ("triton_flash", False, 64), ("sdpa_efficient", True, None)):
        rows.append({"impl": impl, "fused_sdpa": fused, "T": T, "batch": 2, "heads": 3,
                     "d": 64, "dtype": dtype, "causal": True, "block_q": block,
                     "median_ms": rng.uniform(1, 10), "flops": 2 * 2 * 3 * T * T * 64,
                     "noisy": False, "status": "ok"})
    rows[-1]["status"] = "unavailable: not built"
    return pd.DataFrame(rows)


def _traffic(T: int, dtype: str = "float32", known: bool = True) -> pd.DataFrame:
    rows = [{"T": T, "d": 64, "causal": True, "dtype": dtype, "tile": "assumed",
             "block_q_model": 128, "fused_impl": "sdpa_flash",
             "model_ratio": traffic_ratio(T, 64, 128, causal=True)},
            {"T": T, "d": 64, "causal": True, "dtype": None, "tile": "assumed",
             "block_q_model": 128, "fused_impl": None, "model_ratio": 99.0}]
    if known:
        rows += [{"T": T, "d": 64, "causal": True, "dtype": dtype, "tile": "known",
                  "block_q_model": 256, "fused_impl": "sdpa_flash",
                  "model_ratio": traffic_ratio(T, 64, 256, 512, causal=True)},
                 {"T": T, "d": 64, "causal": True, "dtype": dtype, "tile": "known",
                  "block_q_model": 64, "fused_impl": "triton_flash",
                  "model_ratio": traffic_ratio(T, 64, 64, 64, causal=True)}]
    frame = pd.DataFrame(rows)
    frame["dtype"] = frame["dtype"].astype("string")  # as the artifact reader types it
    return frame


@pytest.mark.parametrize("T", [512, 1024, 4096])
@pytest.mark.parametrize("dtype, size", [("float32", 4), ("bfloat16", 2)])
def test_intensity_is_flops_over_the_models_bytes_at_the_tile_that_ran(T, dtype, size):
    prefill = _prefill(random.Random(T), T, dtype)
    points = roofline.roofline_points(prefill, _traffic(T, dtype)).set_index("label")
    flops = 2 * 2 * 3 * T * T * 64
    naive_bytes = naive_hbm_elements(T, 64, causal=True) * 2 * 3 * size
    assert points.loc["naive", "intensity"] == pytest.approx(flops / naive_bytes)
    flash = points.loc["sdpa_flash, tile known", "intensity"]
    assert flash == pytest.approx(flops / naive_bytes * traffic_ratio(T, 64, 256, 512, True))
    triton = points.loc["triton_flash B=64, tile known", "intensity"]
    assert triton == pytest.approx(flops / naive_bytes * traffic_ratio(T, 64, 64, 64, True))
    ms = prefill.set_index("impl")["median_ms"]
    assert points.loc["naive", "gflops"] == pytest.approx(flops / ms["naive"] / 1e6)
    # plain tiling and sdpa_math: their traffic is not modelled; a refused row: no time
    assert set(points.index) == {"naive", "sdpa_flash, tile known",
                                 "triton_flash B=64, tile known"}


def test_without_a_known_tile_the_assumed_one_is_used_and_said():
    """traffic.csv made by older code has only assumed-tile rows."""
    points = roofline.roofline_points(_prefill(random.Random(3), 2048),
                                     _traffic(2048, known=False)).set_index("label")
    assert "sdpa_flash, tile assumed" in points.index
    flops = 2 * 2 * 3 * 2048 * 2048 * 64
    bytes_ = naive_hbm_elements(2048, 64, True) * 2 * 3 * 4 / traffic_ratio(2048, 64, 128)
    assert points.loc["sdpa_flash, tile assumed", "intensity"] == pytest.approx(flops / bytes_)
    assert "triton_flash B=64, tile assumed" in points.index


def test_without_traffic_rows_only_naive_is_placed():
    points = roofline.roofline_points(_prefill(random.Random(4), 1024), None)
    assert list(points["label"]) == ["naive"]


def test_roofline_draws_the_machines_roof_per_dtype():
    prefill = pd.concat([_prefill(random.Random(5), 1024), _prefill(random.Random(6), 1024,
                                                                     "bfloat16")])
    traffic = pd.concat([_traffic(1024), _traffic(1024, "bfloat16")])
    drawn = roofline.roofline_figure(prefill, traffic, CEILINGS, "cpu-key")
    assert ">roof: copy 40 GB/s</text>" in drawn
    assert ">float32: 120 GFLOP/s, ridge 3 FLOP/B</text>" in drawn
    assert ">bfloat16: 500 GFLOP/s, ridge 12.5 FLOP/B</text>" in drawn
    assert ">sdpa_flash, tile known</text>" in drawn


def test_roofline_without_ceilings_still_places_the_points():
    drawn = roofline.roofline_figure(_prefill(random.Random(7), 1024), _traffic(1024), {}, "k")
    assert "roof: copy" not in drawn and ">naive</text>" in drawn


def test_roofline_of_rows_that_did_not_run_is_none():
    prefill = _prefill(random.Random(8), 1024).assign(status="oom")
    assert roofline.roofline_figure(prefill, _traffic(1024), CEILINGS, "k") is None
    assert roofline.roofline_figures({"prefill": {"k": prefill}}, {"k": CEILINGS}) == []


def _series_frame(loads) -> pd.DataFrame:
    """A prefill point's series: a pooled row and one run row per entry of ``loads``
    (each run's ``under_load``: True, False or pd.NA, as series.csv reads it back)."""
    base = {"stage": "prefill", "impl": "tiled", "T": 1024, "causal": True, "status": "ok",
            "ratio_to": "naive", "dtype": "float32", "block_q": 128, "batch": 1,
            "splits": None, "cache_len": None}
    pooled = {**base, "kind": "pooled", "ratio": 2.0, "ratio_ci_low": 1.9,
              "ratio_ci_high": 2.1, "ratio_pi_low": 1.8, "ratio_pi_high": 2.2,
              "under_load": pd.NA, "outside_pi": pd.NA}
    runs = [{**base, "kind": "run", "ratio": 2.0 + i / 100, "under_load": load,
             "outside_pi": False} for i, load in enumerate(loads)]
    frame = pd.DataFrame([pooled, *runs])
    frame["under_load"] = frame["under_load"].astype("boolean")
    return frame


def test_a_run_whose_load_was_not_recorded_is_not_drawn_as_a_quiet_one():
    """Runs made before the load was recorded (the AVX2 machine's, at 98ee466) are drawn
    with a marker of their own and named in the legend, not as quiet runs' dots."""
    quiet = figures.series_figure(_series_frame([False, False]), "quiet")
    unknown = figures.series_figure(_series_frame([False, pd.NA]), "unknown")
    busy = figures.series_figure(_series_frame([True, False]), "busy")
    assert "load was not recorded" not in quiet and "load was not recorded" not in busy
    assert "load was not recorded" in unknown
    assert "under load" in busy
