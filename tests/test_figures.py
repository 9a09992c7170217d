"""The report's figures on small hand-made inputs: the chapter's comparison draws the
series' values of the chapter's three implementations (never a ratio of its own) with the
chapter's printed figures taken from the claims, the roofline's intensities are the row's
FLOPs over the traffic model's bytes at the tile that ran, every implementation has a
colour, and a legend fits its figure. The page as a whole is tested in tests/test_report.py
and, in a browser, test_browser.py."""

from __future__ import annotations

import random

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.lines import Line2D

from inferlab.algorithms.traffic import naive_hbm_elements, traffic_ratio
from inferlab.judging import claims
from inferlab.presentation import plotting
from inferlab.presentation.views import prefill, series
from inferlab.presentation.views import traffic as roofline

SEED = 20240611
CEILINGS = {"copy_gbs": 40.0, "matmul_gflops": {"float32": 120.0, "bfloat16": 500.0}}


# ---------------------------------------------------------------- colours, layout


@pytest.mark.parametrize("row, label", [
    ({"impl": "triton_flash", "block_q": 64}, "triton_flash B=64"),
    ({"impl": "triton_decode", "splits": 4}, "triton_decode, 4 splits"),
    ({"impl": "triton_decode", "splits": 1}, "triton_decode, 1 split"),
    ({"impl": "splitkv", "splits": 16}, "splitkv, 16 splits"),
    ({"impl": "tiled", "block_q": 256}, "tiled B=256")])
def test_implementation_labels(row, label):
    assert plotting.impl_label(row) == label


def test_each_implementation_and_dtype_has_its_own_style():
    grey = "#7f7f7f"  # what an implementation without a colour gets
    labels = ["triton_flash B=64", "triton_flash B=128", "triton_decode, 4 splits",
              "triton_decode, 16 splits", "sdpa_flash", "sdpa_efficient", "sdpa_math",
              "sdpa_cudnn", "tiled_fast B=128", "tiled B=64", "tiled B=128", "tiled B=512",
              "splitkv, 4 splits", "splitkv, 16 splits", "naive"]
    colours = [plotting.colour(label) for label in labels]
    assert grey not in colours
    assert len(set(colours)) == len(labels)
    assert len({plotting.style(d) for d in ("float32", "bfloat16", "float16")}) == 3


@pytest.mark.parametrize("columns", [1, 2, 3])
def test_every_figure_is_one_panel_wide_so_its_text_keeps_its_size(columns):
    with plotting.rc():
        fig, _ = plotting.figure(columns, 2)
    assert fig.get_figwidth() == plotting.PANEL_IN[0]
    plt.close(fig)


def test_a_legend_too_wide_for_its_figure_takes_fewer_columns():
    """The H200's traffic legend in two columns was wider than its figure: the SVG cut
    its swatches and the ends of its labels."""
    rng = random.Random(SEED)
    labels = [f"model, triton_flash B={rng.choice((64, 128))} tile, causal {i}"
              for i in range(6)]
    with plotting.rc():
        fig, axes = plotting.figure()
        axes[0][0].plot([1, 2], [1, 2])
        plotting.fit_legend(fig, [Line2D([], [], label=label) for label in labels], 3)
        fig.draw_without_rendering()
        legend = fig.legends[-1]
        assert len(fig.legends) == 1 and legend._ncols < 3
        assert legend.get_window_extent().width <= fig.bbox.width
    plt.close(fig)


# ---------------------------------------------------------------- the chapter's comparison


def _points(rng: random.Random, lengths=(512, 1024, 2048, 4096, 8192, 16384)) -> pd.DataFrame:
    """Pooled series rows of one machine: the chapter's three implementations and others."""
    rows = []
    for T in lengths:
        naive_ms = rng.uniform(50, 100) * (T / 1024) ** 2
        for impl, block, fused in (("naive", None, False), ("tiled", 128, False),
                                   ("tiled", 64, False), ("tiled_fast", 128, False),
                                   ("sdpa_flash", None, True), ("sdpa_math", None, False)):
            ratio = 1.0 if impl == "naive" else rng.uniform(0.2, 3)
            rows.append({"impl": impl, "block_q": block, "fused_sdpa": fused, "T": T,
                         "dtype": "float32", "causal": True, "status": "ok", "noisy": False,
                         "median_ms": naive_ms * ratio, "ci_low_ms": naive_ms * ratio * 0.9,
                         "ci_high_ms": naive_ms * ratio * 1.1, "ratio": ratio,
                         "ratio_ci_low": ratio * 0.95, "ratio_ci_high": ratio * 1.05,
                         "peak_extra_bytes": rng.uniform(1, 4) * T * T})
    frame = pd.DataFrame(rows)
    return pd.concat([frame, frame.assign(causal=False), frame.assign(dtype="bfloat16")])


def test_the_comparison_keeps_the_chapters_three_implementations_at_its_lengths():
    rows = prefill.chapter_rows(_points(random.Random(SEED)), "float32")
    assert sorted(rows["T"].unique()) == [1024, 2048, 4096, 8192]
    assert set(rows["dtype"]) == {"float32"} and rows["causal"].all()
    assert {plotting.impl_label(r) for r in rows.to_dict("records")} == {
        "naive", "tiled B=128", "sdpa_flash"}
    assert set(rows["family"]) == {"naive", "tiled", "fused"}


@pytest.mark.parametrize("column", ["median_ms", "ratio"])
def test_the_comparison_draws_the_series_values_not_a_ratio_of_its_own(column):
    """The fused kernel's time over naive's is drawn as the series pooled it, not only
    where a claim's rows hold it (C13-05 has none on a CPU)."""
    rows = prefill.chapter_rows(_points(random.Random(SEED + 1)), "float32")
    fused = rows[rows["impl"] == "sdpa_flash"].assign(ratio=lambda f: f["ratio"] * 1.5)
    with plotting.rc():
        fig, axes = plotting.figure()
        prefill._line(axes[0][0], fused, column, "#000000")
        drawn = list(axes[0][0].lines[0].get_ydata())
    plt.close(fig)
    assert drawn == list(fused.sort_values("T")[column])


def test_the_stars_are_the_figures_the_claims_print_in_the_panels_unit():
    marks = prefill.stars(claims.load().claims)
    assert {(panel, family) for panel, family, _ in marks} == {
        ("time", "fused"), ("time", "tiled"), ("memory", "naive"), ("memory", "tiled"),
        ("memory", "fused")}
    assert ("time", "tiled", 1200.0) in marks  # C13-38's "about 1.2 s", drawn in ms


def test_ratio_bands_are_the_claims_bounds_in_the_figures_orientation():
    loaded = claims.load().claims
    by_id = {c.id: c for c in loaded}
    bands = prefill.ratio_bands(loaded)
    assert bands["tiled"] == tuple(by_id["C13-07"].check.expect.bounds)
    lo, hi = by_id["C13-05"].check.expect.bounds  # naive ÷ fused
    assert bands["fused"] == pytest.approx((1 / hi, 1 / lo))
    assert prefill.ratio_bands([c for c in loaded if c.id != "C13-07"]).keys() == {"fused"}


def test_the_comparison_figure_marks_the_chapter():
    rows = prefill.chapter_rows(_points(random.Random(SEED + 2)), "float32")
    loaded = claims.load().claims
    drawn = prefill.comparison_figure(rows, "cpu-key", prefill.ratio_bands(loaded),
                                      prefill.stars(loaded))
    for label in ("naive", "tiled B=128", "sdpa_flash", "chapter's figure (its GPU, fp16)",
                  "chapter: fused 5.5–13.5× faster", "chapter: tiled 13–23× slower"):
        assert f">{label}</text>" in drawn, label
    assert "tiled_fast" not in drawn and "sdpa_math" not in drawn
    assert ">1,024</text>" in drawn and ">8,192</text>" in drawn and ">512</text>" not in drawn


def test_rows_that_did_not_run_draw_no_comparison():
    rows = prefill.chapter_rows(_points(random.Random(SEED + 3)).assign(status="oom"),
                                "float32")
    assert prefill.comparison_figure(rows, "k", {}) is None


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
    """Runs made before the load was recorded are drawn with a marker of their own and
    named in the legend, not as quiet runs' dots."""
    quiet = series.series_figure(_series_frame([False, False]), "quiet")
    unknown = series.series_figure(_series_frame([False, pd.NA]), "unknown")
    busy = series.series_figure(_series_frame([True, False]), "busy")
    assert "load was not recorded" not in quiet and "load was not recorded" not in busy
    assert "load was not recorded" in unknown
    assert "under load" in busy
