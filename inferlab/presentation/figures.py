"""The report's figures: matplotlib drawn to inline SVG, one figure per results key.

Each figure answers one of the chapter's questions, in the style of the FlashAttention
papers and Triton's ``perf_report``: the real lengths as ticks on a log-2 axis, colour by
implementation (the same colour in every figure), line style and marker by dtype,
legends below the data, a hollow marker for a timing flagged noisy (``plotting``).

* ``speedup_figure``: naive ÷ fused and tiled ÷ naive against tokens, with the chapter's
  claimed ranges (read from claims.yaml: ``speedup_bands``) as bands;
* ``memory_figure``: peak extra memory against tokens, log-log, with S and S² slopes;
* ``decode_figure``: time and achieved bandwidth against cache length, one column per
  batch, beside the model's floor and the copy ceiling;
* ``traffic_figure``: the traffic model, one line per mask at the assumed tile and one at
  each known tile, with the measured ratios.

A figure with nothing to draw is ``None``; the stages' views (``inferlab.presentation.views``) draw
these for the page, and ``roofline.roofline_figures`` the roofline per machine.
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from inferlab.presentation import plotting
from inferlab.presentation.plotting import colour, impl_label

MASK_COLOURS = {"full": "#1f77b4", "causal": "#d62728"}
# The claims whose quantity the speed-up figure draws: the claim computes it (its rows'
# value, ci_low, ci_high, in the claim's orientation); the figure only names it.
SPEEDUP_CLAIMS = {"naive ÷ fused": "C13-05", "tiled ÷ naive": "C13-07"}


# ---------------------------------------------------------------- prefill


def speedup_bands(claims) -> dict[str, tuple[float, float]]:
    """The chapter's claimed range of each quantity the speed-up figure draws: the bounds
    of its claim (``SPEEDUP_CLAIMS``) as claims.yaml states them."""
    by_id = {claim.id: claim for claim in claims}
    bands = {}
    for name, claim_id in SPEEDUP_CLAIMS.items():
        check = by_id[claim_id].check if claim_id in by_id else None
        if check is not None and check.expect.bounds is not None:
            bands[name] = tuple(check.expect.bounds)
    return bands


def claim_series(results: list[dict]) -> list[tuple[str, str, pd.DataFrame]]:
    """(series label, colour, rows) per quantity of ``SPEEDUP_CLAIMS``: the rows its claim
    judged on this key (claims.json), each with ``value`` in the claim's orientation and,
    where the claim gives them, ``ci_low``/``ci_high``; non-finite values left out."""
    out = []
    by_id = {result["id"]: result for result in results}
    for name, claim_id in SPEEDUP_CLAIMS.items():
        rows = pd.DataFrame((by_id.get(claim_id) or {}).get("rows") or [])
        if rows.empty or not {"value", "T", "dtype"} <= set(rows.columns):
            continue
        rows["value"] = pd.to_numeric(rows["value"], errors="coerce")
        rows = rows[rows["value"].map(math.isfinite) & (rows["value"] > 0)]
        if rows.empty:
            continue
        labels = sorted({impl_label(r) for r in rows.to_dict("records")})
        shown = f"{name} ({labels[0]})" if len(labels) == 1 else name
        out.append((shown, colour(labels[0]), rows.reset_index(drop=True)))
    return out


def _interval(rows: pd.DataFrame):
    """Error bar lengths (below, above) from the rows' ci_low/ci_high; None without them."""
    if not {"ci_low", "ci_high"} <= set(rows.columns):
        return None
    value = rows["value"].to_numpy(float)
    low = pd.to_numeric(rows["ci_low"], errors="coerce").to_numpy(float)
    high = pd.to_numeric(rows["ci_high"], errors="coerce").to_numpy(float)
    below, above = value - low, high - value
    below[~(below >= 0)], above[~(above >= 0)] = 0, 0  # a missing end: no bar that side
    return below, above


def speedup_figure(results: list[dict], name: str, bands: dict) -> str | None:
    """The chapter's speed-up quantities against tokens, as their claims computed them on
    this key (naive ÷ fastest fused, tiled ÷ naive), with the chapter's ranges as bands."""
    series = claim_series(results)
    if not series:
        return None
    with plotting.rc():
        fig, axes = plotting.figure()
        ax = axes[0][0]
        extra, colours, noisy, lengths, dtypes = [], {}, False, set(), set()
        for label, colour_, rows in series:
            colours[label] = colour_
            for dtype, part in rows.groupby("dtype"):
                plotting.series(ax, part, "T", "value", colour_, dtype, plotting.noisy(part),
                                _interval(part))
                noisy |= bool(plotting.noisy(part).any())
            lengths |= set(rows["T"])
            dtypes |= set(rows["dtype"])
        for band, (lo, hi) in bands.items():
            c = next((c for label, c, _ in series if label.startswith(band)), "#888888")
            ax.axhspan(lo, hi, color=c, alpha=0.12, lw=0)
            span = f"{plotting.number(lo)}–{plotting.number(hi)}×"
            extra.append(Patch(color=c, alpha=0.25, label=f"chapter: {band}, {span}"))
        ax.axhline(1, color="#888888", lw=0.8)
        plotting.log_y(ax)
        plotting.length_axis(ax, lengths)
        ax.set(xlabel="tokens (causal mask)", ylabel="ratio of median times (×)", title=name)
        plotting.legend(fig, colours, sorted(dtypes), noisy, extra)
        return plotting.svg(fig, f"speedup-{name}")


def memory_figure(frame: pd.DataFrame, name: str) -> str | None:
    """Peak extra memory against tokens, log-log, with S and S² slopes for reference."""
    frame = plotting.ok_rows(frame).dropna(subset=["peak_extra_bytes"])
    causal = frame[plotting.flag(frame, "causal")]
    frame = causal if not causal.empty else frame
    frame = frame[frame["peak_extra_bytes"] > 0]
    if frame.empty:
        return None
    frame = frame.assign(mib=frame["peak_extra_bytes"] / 2**20,
                         label=[impl_label(r) for r in frame.to_dict("records")])
    with plotting.rc():
        fig, axes = plotting.figure()
        ax = axes[0][0]
        colours = {}
        for (label, dtype), part in frame.groupby(["label", "dtype"]):
            colours[label] = colour(label)
            plotting.series(ax, part, "T", "mib", colours[label], dtype)
        lo, hi = frame["T"].min(), frame["T"].max()
        anchor = frame.loc[frame["T"] == lo, "mib"].median()
        extra = []
        for power, text in ((1, "∝ S"), (2, "∝ S²")):
            ys = [anchor, anchor * (hi / lo) ** power]
            ax.plot([lo, hi], ys, color="#999999", lw=1, ls=(0, (1, 2)), zorder=2)
            ax.annotate(text, (hi, ys[1]), xytext=(4, 0), textcoords="offset points",
                        color="#666666", va="center")
        plotting.log_y(ax)
        plotting.length_axis(ax, frame["T"])
        ax.set(xlabel="tokens" + (" (causal mask)" if not causal.empty else ""),
               ylabel="peak extra memory (MiB)", title=name)
        plotting.legend(fig, colours, sorted(frame["dtype"].unique()), False,
                extra)
        return plotting.svg(fig, f"memory-{name}")


# ---------------------------------------------------------------- decode, traffic


def decode_figure(frame: pd.DataFrame, name: str, copy_gbs: float | None) -> str | None:
    """Per batch: time against cache length with the model's floor, and the achieved
    bandwidth with the copy ceiling."""
    frame = plotting.ok_rows(frame).dropna(subset=["median_ms"])
    if frame.empty:
        return None
    frame = frame.assign(label=[impl_label(r) for r in frame.to_dict("records")])
    batches = sorted(frame["batch"].unique())
    colours, noisy = {}, bool(plotting.noisy(frame).any())
    with plotting.rc():
        fig, axes = plotting.figure(len(batches), 2, legend_rows=3)
        for j, batch in enumerate(batches):
            part = frame[frame["batch"] == batch]
            top, bottom = axes[0][j], axes[1][j]
            for (label, dtype), rows in part.groupby(["label", "dtype"]):
                colours[label] = colour(label)
                plotting.series(top, rows, "cache_len", "median_ms", colours[label], dtype,
                        plotting.noisy(rows))
                plotting.series(bottom, rows, "cache_len", "achieved_gbs", colours[label], dtype,
                        plotting.noisy(rows))
            floor = part.groupby("cache_len")["floor_ms"].min().dropna()
            top.plot(floor.index, floor.to_numpy(), "k--", lw=1.2, marker="_", markersize=14)
            if copy_gbs:
                bottom.axhline(copy_gbs, color="k", ls="--", lw=1.2)
            for ax in (top, bottom):
                plotting.length_axis(ax, frame["cache_len"])
                plotting.log_y(ax)
            top.set(title=f"{name}, batch {int(batch)}", ylabel="time per step (ms)" if j == 0
                    else None)
            bottom.set(xlabel="cache length (keys)", ylabel="achieved GB/s" if j == 0 else None)
        extra = [Line2D([], [], color="k", ls="--", label="floor / copy ceiling")]
        plotting.legend(fig, colours, sorted(frame["dtype"].unique()), noisy,
                extra, ncols=min(4, len(batches) + 1))
        return plotting.svg(fig, f"decode-{name}")


def traffic_figure(frame: pd.DataFrame, name: str) -> str | None:
    """The model's naive/tiled traffic ratio, one line per mask over every length at the
    assumed tile and, dashed, one per kernel at its known tile; the measured naive/fused
    time ratios over them (marker by dtype): the fastest fused kernel's and each known
    tile's kernel's."""
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
        fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
        return plotting.svg(fig, f"traffic-{name}")


# ---------------------------------------------------------------- series

SERIES_PANELS = (("prefill", "T", "÷ naive, paired (prefill, causal)"),
                 ("decode", "cache_len", "÷ fused, paired (decode)"))


def series_figure(frame: pd.DataFrame, name: str) -> str | None:
    """The series per point, one panel per timed stage, the points grouped by length
    (decode: cache length and batch), colour by implementation: each run's paired ratio (a
    dot; a triangle for a run made under load, a hollow square where its load was not
    recorded; a red ring where it lies outside the
    prediction interval the other runs give), the pooled value with its 95 % confidence
    interval (thick bar) and the 95 % prediction interval of one more run (thin bar)."""
    panels = []
    for stage, length, title in SERIES_PANELS:
        rows = frame[(frame["stage"] == stage) & (frame["status"] == "ok")
                     & (frame["ratio_to"] != frame["impl"])]
        if stage == "prefill":
            rows = rows[plotting.flag(rows, "causal")]
        if len(rows):
            panels.append((stage, length, title, rows))
    if not panels:
        return None
    colours: dict[str, str] = {}
    unrecorded = any(_load_marker(r) == "s" for _, r in frame[frame["kind"] == "run"].iterrows())
    with plotting.rc():
        fig, axes = plotting.plt.subplots(len(panels), 1, squeeze=False, layout="constrained",
                                          figsize=(plotting.PANEL_IN[0],
                                                   2.2 * len(panels) + 0.6))
        for ax, (stage, length, title, rows) in zip(axes[:, 0], panels, strict=True):
            colours |= _series_panel(ax, stage, length, rows)
            ax.set_title(title)
        extra = [Line2D([], [], color="#555555", marker="o", linestyle="none", label="a run"),
                 Line2D([], [], color="#555555", marker="^", linestyle="none",
                        label="a run under load"),
                 Line2D([], [], marker="o", mfc="none", mec="red", linestyle="none",
                        label="outside the others' 95 %")]
        if unrecorded:
            extra.append(Line2D([], [], color="#555555", marker="s", mfc="none",
                                linestyle="none", label="a run whose load was not recorded"))
        plotting.legend(fig, colours, (), False, extra, ncols=3)
        return plotting.svg(fig, f"{name}-series")


def _load_marker(run) -> str:
    """A run's marker: a triangle made under load, a hollow square where its load was not
    recorded (runs made before the load was), a dot made quiet."""
    load = run.get("under_load")
    if load is None or pd.isna(load):
        return "s"
    return "^" if bool(load) else "o"


def _series_panel(ax, stage: str, length: str, rows: pd.DataFrame) -> dict[str, str]:
    """One stage's points, grouped by length (and batch): {label: colour} drawn."""
    group = [length, "batch"] if stage == "decode" else [length]
    pooled = rows[rows["kind"] == "pooled"].sort_values([*group, "impl", "splits"]
                                                        if stage == "decode" else
                                                        [*group, "impl"])
    keys = [c for c in ("impl", "splits", "batch", length, "dtype", "block_q") if c in rows]
    drawn, ticks, x = {}, [], 0
    for values, points in pooled.groupby(group, sort=False):
        values = values if isinstance(values, tuple) else (values,)
        start = x
        for _, p in points.iterrows():
            mine = rows[(rows["kind"] == "run")
                        & (rows[keys].astype(str) == p[keys].astype(str)).all(axis=1)]
            label = impl_label(p.to_dict())
            drawn[label] = c = colour(label)
            ax.vlines(x, p["ratio_pi_low"], p["ratio_pi_high"], colors=c, lw=1, alpha=0.5)
            ax.vlines(x, p["ratio_ci_low"], p["ratio_ci_high"], colors=c, lw=3.5)
            ax.plot([x], [p["ratio"]], "_", color="black", ms=7)
            offsets = [0.15 * (i - (len(mine) - 1) / 2) for i in range(len(mine))]
            for dx, (_, r) in zip(offsets, mine.iterrows(), strict=True):
                marker = _load_marker(r)
                ax.plot([x + dx], [r["ratio"]], marker, color=c, ms=2.5,
                        **({"mfc": "none"} if marker == "s" else {}))
                if r.get("outside_pi") is True:
                    ax.plot([x + dx], [r["ratio"]], "o", mfc="none", mec="red", ms=6)
            x += 1
        ticks.append(((start + x - 1) / 2, "\n".join(
            f"b{int(v)}" if i else plotting.number(v) for i, v in enumerate(values))))
        ax.axvline(x - 0.5, color="#cccccc", lw=0.5)
        x += 0.5
    ax.set_yscale("log")
    ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks])
    ax.set_xlabel("tokens" if stage == "prefill" else "cache (keys), batch")
    ax.axhline(1.0, color="grey", lw=0.5, ls=":")
    ax.grid(False, axis="x")
    return drawn
