"""Prefill on the page: the chapter's own comparison (the page's first figure, as its
caption describes) and the raw rows of the latest run.
"""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from inferlab.evidence.loading import device_of
from inferlab.presentation import plotting, sections
from inferlab.presentation.manuscript_check import figures as printed_figures
from inferlab.presentation.plotting import colour, impl_label

SECTION = {"id": "prefill", "title": "The chapter's comparison", "caption": None}
COLUMNS = {
    "impl": "implementation", "block_q": "B", "dtype": "dtype", "causal": "mask", "T": "tokens",
    "median_ms": "median (ms)", "ci_low_ms": "95% low (ms)", "ci_high_ms": "95% high (ms)",
    "rounds": "rounds", "converged": "converged", "noisy": "noisy",
    "ratio": "÷ naive", "ratio_ci_low": "95% low", "ratio_ci_high": "95% high",
    "ratio_run_sd": "run-level sd (log)",
    "causal_over_full": "causal ÷ full",
    "peak_extra_bytes": "peak extra (MiB)", "achieved_gflops": "GFLOP/s",
    "frac_matmul_ceiling": "of matmul peak", "kernel": "kernel", "status": "status"}
FIGURE = "comparison"
LENGTHS = (1024, 8192)  # the chapter's table: "three implementations at 1,024 to 8,192 tokens"
TILE = 128              # the chapter's blocks of 128
# The claims that print the chapter's figures at 8,192 tokens (its GPU, fp16): claim ->
# (panel, family, factor to the panel's unit: ms, MiB; C13-38 prints seconds).
STARS = {"C13-57": ("time", "fused", 1.0), "C13-38": ("time", "tiled", 1000.0),
         "C13-03": ("memory", "naive", 1.0), "C13-02": ("memory", "tiled", 1.0),
         "C13-04": ("memory", "fused", 1.0)}
# The chapter's ranges of the ratios, from the claims that judge them, in the figure's
# orientation (time ÷ naive's): C13-07 is tiled ÷ naive, C13-05 naive ÷ fused (inverted).
RATIO_CLAIMS = {"tiled": ("C13-07", False), "fused": ("C13-05", True)}
PANELS = (("median_ms", "time per call (ms)"), ("ratio", "time ÷ naive's (paired)"),
          ("peak_extra_bytes", "peak extra memory (MiB)"))


def family(row: dict) -> str | None:
    """'naive', 'tiled' or 'fused': which of the chapter's three a prefill row is (None:
    another, such as our faster tiling or PyTorch's unfused math backend)."""
    if row["impl"] == "naive":
        return "naive"
    if row["impl"] == "tiled" and pd.notna(row.get("block_q")) and int(row["block_q"]) == TILE:
        return "tiled"
    return "fused" if row.get("fused_sdpa") is True else None


def chapter_rows(frame: pd.DataFrame, dtype: str) -> pd.DataFrame:
    """The rows the comparison draws: ok, causal, ``dtype``, 1,024-8,192 tokens, one of
    the three families (``family``)."""
    frame = plotting.ok_rows(frame)
    frame = frame[plotting.flag(frame, "causal") & (frame["dtype"] == dtype)
                  & frame["T"].between(*LENGTHS)]
    families = [family(r) for r in frame.to_dict("records")]
    return frame.assign(family=families)[[f is not None for f in families]]


def ratio_bands(claims) -> dict[str, tuple[float, float]]:
    """The chapter's range of tiled's and fused's time over naive's (``RATIO_CLAIMS``),
    from the bounds claims.yaml gives them."""
    by_id = {claim.id: claim for claim in claims}
    bands = {}
    for name, (claim_id, inverted) in RATIO_CLAIMS.items():
        check = by_id[claim_id].check if claim_id in by_id else None
        if check is not None and check.expect.bounds is not None:
            lo, hi = check.expect.bounds
            bands[name] = (1 / hi, 1 / lo) if inverted else (lo, hi)
    return bands


def stars(claims) -> list[tuple[str, str, float]]:
    """The chapter's figures of ``STARS`` as (panel, family, value in the panel's unit)."""
    by_id = {claim.id: claim for claim in claims}
    return [(panel, family, figure.value * factor)
            for claim_id, (panel, family, factor) in STARS.items() if claim_id in by_id
            for figure in printed_figures(by_id[claim_id])]


def comparison_figure(rows: pd.DataFrame, name: str, bands: dict, marks=()) -> str | None:
    """Per machine: time, time ÷ naive's and peak extra memory against tokens, one line per
    implementation of the three families with its 95 % interval, the chapter's figures
    marked (``stars``, ``ratio_bands``)."""
    if rows.empty:
        return None
    rows = rows.assign(label=[impl_label(r) for r in rows.to_dict("records")],
                       mib=rows["peak_extra_bytes"] / 2**20)
    with plotting.rc():
        fig, axes = plotting.figure(1, 3, legend_rows=4, row_in=2.0)
        colours = {}
        for ax, (column, ylabel) in zip(axes[:, 0], PANELS, strict=True):
            for label, part in rows.groupby("label"):
                colours[label] = colour(label)
                if column != "ratio" or label != "naive":  # naive ÷ naive: the line at 1
                    _line(ax, part, column, colours[label])
            ax.set_ylabel(ylabel)
            plotting.length_axis(ax, rows["T"])
            plotting.log_y(ax)
        axes[0][0].set_title(f"{name}, {rows['dtype'].iloc[0]}, causal")
        axes[-1][0].set_xlabel("tokens")
        extra = _chapter_marks(axes[:, 0], rows, bands, marks)
        _slopes(axes[2][0], rows)
        plotting.fit_legend(fig, [Line2D([], [], color=colours[label], label=label)
                                  for label in sorted(colours, key=plotting.natural)] + extra, 2)
        return plotting.svg(fig, f"comparison-{name}")


def _line(ax, part: pd.DataFrame, column: str, colour_: str) -> None:
    """One implementation's values of ``column`` (bytes as MiB) with their 95 % interval."""
    if column == "peak_extra_bytes":
        part = part.assign(value=part["mib"])
    else:
        part = part.assign(value=part[column])
    part = part[part["value"] > 0]  # NaN too: a point not measured is not drawn
    if part.empty:
        return
    bars = None if column == "peak_extra_bytes" else plotting.interval(
        part, *(("ci_low_ms", "ci_high_ms") if column == "median_ms"
                else ("ratio_ci_low", "ratio_ci_high")))
    plotting.series(ax, part, "T", "value", colour_, part["dtype"].iloc[0],
                    plotting.noisy(part), bars)


def _chapter_marks(axes, rows: pd.DataFrame, bands: dict, marks) -> list:
    """The chapter's figures: stars at 8,192 tokens in the colour of the family's line
    (fused: the chapter's own kernel, memory-efficient SDPA, where it ran), bands of its
    ratio ranges; the legend's entries for them."""
    labels = set(rows["label"])
    shade = {fam: colour("sdpa_efficient" if fam == "fused" and "sdpa_efficient" in labels
                         else min(group)) for fam, group in rows.groupby("family")["label"]}
    for panel, fam, value in marks:
        if fam in shade:
            (axes[0] if panel == "time" else axes[2]).plot(
                [LENGTHS[1]], [value], "*", color=shade[fam], mec="black", mew=0.6, ms=10,
                zorder=5)
    extra = [Line2D([], [], marker="*", color="#888888", mec="black", mew=0.6, ms=10,
                    linestyle="none", label="chapter's figure (its GPU, fp16)")]
    axes[1].axhline(1, color="#222222", lw=0.8)
    for fam, (lo, hi) in bands.items():
        c = shade.get(fam, "#888888")
        axes[1].axhspan(lo, hi, color=c, alpha=0.12, lw=0)
        span = (f"{plotting.number(1 / hi)}–{plotting.number(1 / lo)}× faster" if hi < 1
                else f"{plotting.number(lo)}–{plotting.number(hi)}× slower")
        extra.append(Patch(color=c, alpha=0.25, label=f"chapter: {fam} {span}"))
    return extra


def _slopes(ax, rows: pd.DataFrame) -> None:
    """Dotted S and S² slopes from the smallest length's median memory, for reference."""
    mib = rows.dropna(subset=["mib"])
    mib = mib[mib["mib"] > 0]
    if mib.empty:
        return
    lo, hi = mib["T"].min(), mib["T"].max()
    anchor = mib.loc[mib["T"] == lo, "mib"].median()
    for power, text in ((1, "∝ S"), (2, "∝ S²")):
        ys = [anchor, anchor * (hi / lo) ** power]
        ax.plot([lo, hi], ys, color="#999999", lw=1, ls=(0, (1, 2)), zorder=2)
        ax.annotate(text, (hi, ys[1]), xytext=(4, 0), textcoords="offset points",
                    color="#666666", va="center")


def _frame(k: sections.KeyData) -> pd.DataFrame | None:
    """A key's prefill points: the series' pooled rows, else the latest run's."""
    series = k.frame("series")
    if series is not None:
        frame = series.frame
        return frame[(frame["stage"] == "prefill") & (frame["kind"] == "pooled")]
    prefill = k.frame("prefill")
    return None if prefill is None else prefill.frame


def _dtype(frame: pd.DataFrame, wanted: str | None) -> str | None:
    """The fp16 stand-in where it has ok rows, else the dtype with most of them."""
    ok = plotting.ok_rows(frame)["dtype"].dropna()
    if ok.empty:
        return None
    return wanted if wanted in set(ok) else str(ok.value_counts().index[0])


def figures(page: sections.Page) -> list[dict]:
    bands, marks, drawn = ratio_bands(page.claims), stars(page.claims), []
    for k in page.keys:
        frame = _frame(k)
        device = device_of(k.evidence["probe"], k.key)  # as the manuscript stage reads it
        dtype = None if frame is None else _dtype(frame, page.stand_in.get(device))
        if dtype is not None:
            drawn.append(comparison_figure(chapter_rows(frame, dtype), k.key, bands, marks))
    ranges = "; ".join(f"{fam} ÷ naive {plotting.number(lo)}–{plotting.number(hi)}"
                       for fam, (lo, hi) in bands.items())
    caption = Markup(
        "The chapter's table, per machine, with the causal mask in the dtype that stands for "
        "its fp16 there: naive attention (it materialises the score matrix), block-wise "
        "attention in plain PyTorch (“tiled”, blocks of 128) and PyTorch's fused SDPA "
        "kernels. Top: time per call; middle: time over naive's, paired round by round "
        "(below 1: faster than naive); bottom: peak memory allocated beyond the inputs and "
        "output, with dotted S and S² slopes. Values: the series' pooled value over every run "
        "of the machine; bars: its 95 % interval (time and ratio). Stars: the chapter's printed "
        "figures at 8,192 tokens, on its GPU in fp16 (so half a float32 machine's bytes); "
        "bands: its ranges ({}). {}").format(ranges, sections.NOISY_NOTE)
    return [sections.figure(drawn, caption, FIGURE,
                            "Naive, block-wise and fused attention: time and peak memory at "
                            "1,024–8,192 tokens")]


def tables(page: sections.Page) -> list[dict]:
    return [page.raw("prefill", COLUMNS)]
