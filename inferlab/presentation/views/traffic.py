"""The traffic model on the page: the model's byte ratio beside the measured time ratios,
a roofline per machine (its captions say how each is drawn; Williams, Waterman and
Patterson, "Roofline", CACM 2009), the raw rows.
"""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup
from matplotlib.lines import Line2D

from inferlab.algorithms.traffic import naive_hbm_elements
from inferlab.presentation import plotting, sections
from inferlab.presentation.plotting import colour, impl_label

SECTION = {"id": "traffic", "title": "Traffic model", "caption": None}
COLUMNS = {
    "T": "tokens", "d": "d", "causal": "mask", "dtype": "dtype", "tile": "tile",
    "block_q_model": "model B_q",
    "model_ratio": "model ratio", "naive_ms": "naive (ms)", "fused_ms": "fused (ms)",
    "fused_impl": "fused kernel", "fastest_fused": "fastest fused",
    "measured_ratio": "measured ratio",
    "measured_ratio_ci_low": "95% low", "measured_ratio_ci_high": "95% high",
    "implied_block_q": "implied B_q (at T)",
    "implied_block_q_limit": "implied B_q (6B_q/d)", "note": "note"}
ROOFLINE = "traffic-roofline"
MASK_COLOURS = {"full": "#1f77b4", "causal": "#d62728"}
TRAFFIC_CAPTION = Markup(
    "Lines: the traffic model's naive ÷ tiled ratio of bytes moved, at the query tile it\n"
    "assumes (solid, one per mask; the rows' model B_q) and, dashed, at the tile of each "
    "kernel whose tile is known (PyTorch's CPU flash kernel, our Triton kernel; the rows' "
    "note says where each comes from). Markers: the measured naive ÷ fused time ratio per "
    "dtype, of the fastest fused kernel and of each kernel of known tile. The chapter's "
    "claim is that the second follows the first in direction and order of magnitude.")
ROOFLINE_CAPTION = (
    "Each implementation's attained rate (its FLOPs over its median time, causal rows)\n"
    "against its arithmetic intensity (those FLOPs over the bytes the traffic model says it "
    "moves, at the tile of the kernel that ran where it is known, else at the assumed B_q), "
    "under the machine's own roof: its measured copy bandwidth up to its matmul ceiling per "
    "dtype (the tick is the ridge). Left of the ridge the byte ratio predicts the speed-up; "
    "right of it the matmul ceiling bounds the time and the byte model does not predict it. "
    "Plain tiling and sdpa_math are not drawn: the model does not count their traffic. {}")


def figures(page: sections.Page) -> list[dict]:
    traffic = page.frames("traffic")
    ceilings = {k.key: (k.evidence["probe"].data or {}).get("ceilings") or {}
                for k in page.keys}
    rooflines = [roofline_figure(frame, traffic.get(key), ceilings[key], key)
                 for key, frame in page.frames("prefill").items()]
    return [sections.figure([traffic_figure(f, key) for key, f in traffic.items()],
                            TRAFFIC_CAPTION),
            sections.figure(rooflines, Markup(ROOFLINE_CAPTION).format(sections.NOISY_NOTE),
                            ROOFLINE, "A roofline per machine")]


def tables(page: sections.Page) -> list[dict]:
    return [page.raw("traffic", COLUMNS)]


def traffic_figure(frame: pd.DataFrame, name: str) -> str | None:
    """The model's naive/tiled byte ratio per mask at the assumed tile and, dashed, per kernel
    at its known tile; over them the measured naive/fused time ratios (marker by dtype)."""
    if frame.empty:
        return None
    with plotting.rc():
        fig, axes = plotting.figure(legend_rows=3)
        ax = axes[0][0]
        handles = []
        for causal, part in frame.groupby(plotting.flag(frame, "causal")):
            mask = "causal" if causal else "full"
            known = part[part["tile"] == "known"]
            model = part[part["tile"] != "known"].groupby("T")["model_ratio"].mean().dropna()
            ax.plot(model.index, model.to_numpy(), color=MASK_COLOURS[mask], zorder=2)
            handles.append(Line2D([], [], color=MASK_COLOURS[mask], label=f"model, {mask}"))
            known = known.assign(label=[impl_label(
                {"impl": r["fused_impl"], "block_q": r["block_q_model"]
                 if r["fused_impl"] == "triton_flash" else None})
                for r in known.to_dict("records")])
            for label, rows in known.groupby("label"):
                line = rows.groupby("T")["model_ratio"].mean().dropna()
                ax.plot(line.index, line.to_numpy(), color=MASK_COLOURS[mask], ls="--",
                        zorder=2)
                handles.append(Line2D([], [], color=MASK_COLOURS[mask], ls="--",
                                      label=f"model, {label} tile, {mask}"))
            # the fastest fused kernel at the assumed tile (one per point; traffic.csv has
            # an assumed row per fused kernel) and the kernels of known tile
            fastest = part["fastest_fused"] if "fastest_fused" in part else True
            shown = (part["tile"] == "known") | pd.Series(fastest, index=part.index).fillna(
                True).astype(bool)
            measured = part[shown].dropna(subset=["measured_ratio"]).drop_duplicates(
                ["T", "dtype", "fused_impl", "measured_ratio"])
            for dtype, rows in measured.groupby("dtype"):
                ax.plot(rows["T"], rows["measured_ratio"], linestyle="none",
                        marker=plotting.style(dtype)[1], color=MASK_COLOURS[mask], zorder=3)
        for dtype in sorted(frame["dtype"].dropna().unique()):
            handles.append(Line2D([], [], color="#555555", marker=plotting.style(dtype)[1],
                                  linestyle="none", label=f"measured, {dtype}"))
        plotting.length_axis(ax, frame["T"])
        ax.set_ylim(bottom=0)
        ax.set(xlabel="tokens", ylabel="naive ÷ fused", title=name)
        plotting.fit_legend(fig, handles, 2)
        return plotting.svg(fig, f"traffic-{name}")


# ---------------------------------------------------------------- roofline

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}


def _model_ratio(traffic: pd.DataFrame | None, row: dict) -> tuple[float, str] | None:
    """The traffic model's naive/fused byte ratio for one fused prefill row and whether its
    tile is known or assumed: the traffic row of this kernel at its known tile, else the
    point's assumed-tile row; None when traffic.csv has neither."""
    if traffic is None or traffic.empty:
        return None
    same = ((traffic["T"] == row["T"]) & (traffic["d"] == row["d"])
            & (traffic["causal"] == row["causal"]) & (traffic["dtype"] == row["dtype"]))
    point = traffic[same.fillna(False).astype(bool)]  # model-only rows have no dtype
    known = point[(point["tile"] == "known") & (point["fused_impl"] == row["impl"])]
    if row["impl"] == "triton_flash":
        known = known[known["block_q_model"] == row.get("block_q")]
    for tile, rows in (("known", known), ("assumed", point[point["tile"] == "assumed"])):
        ratios = rows["model_ratio"].dropna()
        if not ratios.empty:
            return float(ratios.iloc[0]), tile
    return None


def roofline_points(prefill: pd.DataFrame, traffic: pd.DataFrame | None) -> pd.DataFrame:
    """Per ok prefill row whose bytes the traffic model counts (naive, the fused kernels):
    its label, intensity (FLOP/B) and attained GFLOP/s. Plain tiling and sdpa_math are left
    out: the model does not count tiles or scores that go through main memory."""
    points = []
    for row in plotting.ok_rows(prefill).dropna(subset=["median_ms", "flops"]).to_dict("records"):
        size = BYTES_PER_ELEMENT.get(str(row["dtype"]))
        if size is None or not row["median_ms"] > 0:
            continue
        naive_bytes = (naive_hbm_elements(int(row["T"]), int(row["d"]), bool(row["causal"]))
                       * int(row["batch"]) * int(row["heads"]) * size)
        label = impl_label(row)
        if row["impl"] == "naive":
            bytes_ = naive_bytes
        elif row.get("fused_sdpa") is True or row["impl"] == "triton_flash":
            model = _model_ratio(traffic, row)
            if model is None:
                continue
            bytes_ = naive_bytes / model[0]
            label += ", tile known" if model[1] == "known" else ", tile assumed"
        else:
            continue
        points.append({"label": label, "dtype": row["dtype"], "T": row["T"],
                       "intensity": row["flops"] / bytes_,
                       "gflops": row["flops"] / (row["median_ms"] * 1e6),
                       "noisy": row.get("noisy") is True})
    return pd.DataFrame(points, columns=["label", "dtype", "T", "intensity", "gflops", "noisy"])


def _roof(ax, copy_gbs: float, peak_gflops: float, dtype, xs: tuple[float, float]) -> None:
    """min(peak, copy bandwidth × intensity), the ridge marked, over the intensities ``xs``."""
    ridge = peak_gflops / copy_gbs
    lo, hi = min(xs[0], ridge) / 2, max(xs[1], ridge) * 2
    ax.plot([lo, ridge, hi], [copy_gbs * lo, peak_gflops, peak_gflops], color="#444444",
            linestyle=plotting.style(dtype)[0], lw=1.3, zorder=2)
    ax.annotate(f"{dtype}: {plotting.number(peak_gflops)} GFLOP/s, "
                f"ridge {plotting.number(float(f'{ridge:.3g}'))} FLOP/B",
                (hi, peak_gflops), xytext=(0, 3),
                textcoords="offset points", ha="right", va="bottom", color="#444444")
    ax.plot([ridge], [peak_gflops], marker="|", color="#444444", markersize=9, zorder=2)


def roofline_figure(prefill: pd.DataFrame, traffic: pd.DataFrame | None, ceilings: dict,
                    name: str) -> str | None:
    """The roofline of one machine's causal rows (every row where none is causal) under its
    roof per dtype (``ceilings``: probe.json's copy_gbs and matmul_gflops)."""
    causal = plotting.flag(prefill, "causal")
    points = roofline_points(prefill[causal] if causal.any() else prefill, traffic)
    if points.empty:
        return None
    copy_gbs, peaks = ceilings.get("copy_gbs"), ceilings.get("matmul_gflops") or {}
    with plotting.rc():
        fig, axes = plotting.figure(legend_rows=3)
        ax = axes[0][0]
        colours = {}
        for (label, dtype), part in points.groupby(["label", "dtype"]):
            colours[label] = colour(label)
            plotting.series(ax, part, "intensity", "gflops", colours[label], dtype, part["noisy"])
        dtypes = sorted(points["dtype"].unique())
        span = (points["intensity"].min(), points["intensity"].max())
        extra = []
        for dtype in dtypes:
            if copy_gbs and peaks.get(dtype):
                _roof(ax, copy_gbs, peaks[dtype], dtype, span)
        if copy_gbs and any(peaks.get(d) for d in dtypes):
            extra.append(Line2D([], [], color="#444444",
                                label=f"roof: copy {plotting.number(copy_gbs)} GB/s"))
        plotting.log_x(ax)
        plotting.log_y(ax)
        top = max([peaks.get(d) or 0 for d in dtypes] + [points["gflops"].max()])
        ax.set_ylim(top=top * 1.6)  # room for the ceilings' labels under the title
        ax.set(xlabel="arithmetic intensity (FLOP per byte of the model's traffic)",
               ylabel="attained GFLOP/s", title=name)
        plotting.legend(fig, colours, dtypes, bool(points["noisy"].any()), extra, ncols=2)
        return plotting.svg(fig, f"roofline-{name}")
