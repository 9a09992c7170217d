"""The series on the page: per machine, every run's paired ratio beside the pooled value
and its two intervals (the figure), and the pooled points (a collapsed table)."""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup
from matplotlib.lines import Line2D

from inferlab.evidence.artifacts import Table
from inferlab.presentation import plotting, sections
from inferlab.presentation.plotting import colour, impl_label

SECTION = {"id": "series", "title": "Series of runs",
           "caption": Markup(
               "A machine's evidence is its <em>series</em>: the runs of prefill and decode "
               "made with the same code, config, hardware and threads, each point pooled over "
               "them (random effects on the log scale; for a first run, a prior from the "
               "committed series of machines of the same kind). A whole run slower or faster "
               "at every point (another tenant) is told apart: that common part rests on the "
               "runs, not the points, so with few runs it widens the intervals (its sd in the "
               "table). Claims, traffic comparison and manuscript are judged on the pooled "
               "values.")}
COLUMNS = {
    "stage": "stage", "impl": "implementation", "T": "tokens", "cache_len": "cache (keys)",
    "batch": "batch", "splits": "splits", "causal": "mask", "dtype": "dtype", "runs": "runs",
    "processes": "processes", "median_ms": "median (ms)", "ci_low_ms": "95% CI low",
    "ci_high_ms": "95% CI high", "pi_low_ms": "next run low", "pi_high_ms": "next run high",
    "ratio": "ratio", "ratio_runs": "runs with a ratio", "ratio_ci_low": "95% CI low",
    "ratio_ci_high": "95% CI high",
    "ratio_pi_low": "next run low", "ratio_pi_high": "next run high",
    "run_sd_origin": "run-level sd from", "ratio_run_common_sd": "ratio's run-common sd (log)",
    "outlying": "runs spread beyond the stage's",
    "in_latest": "in the latest run",
    "status": "status"}


def figures(page: sections.Page) -> list[dict]:
    caption = Markup(
        "Each point's paired ratio in every run of the series (dots; a triangle: a run made "
        "beside a busy process; a hollow square: a run whose load was not recorded; a red "
        "ring: a run outside the 95 % prediction interval the "
        "other runs give), the pooled value (black), its 95 % confidence interval (thick "
        "bar: the machine's value, what a claim is judged on) and the 95 % prediction "
        "interval of one more run (thin bar).")
    return [sections.figure([series_figure(f, key) for key, f in
                             page.frames("series").items()], caption)]


def tables(page: sections.Page) -> list[dict]:
    blocks = []
    for k in page.present("series"):
        frame = k.frame("series")
        pooled = frame.frame["kind"] == "pooled"
        table = Table(frame.frame[pooled].reset_index(drop=True),
                      frame.nonfinite[pooled].reset_index(drop=True))
        blocks.append(sections.raw_block(k.key, "series", table, COLUMNS))
    return [sections.raw(blocks)]


SERIES_PANELS = (("prefill", "T", "÷ naive, paired (prefill, causal)"),
                 ("decode", "cache_len", "÷ fused, paired (decode)"))


def series_figure(frame: pd.DataFrame, name: str) -> str | None:
    """One panel per timed stage, its points grouped by length (decode: and batch), colour
    by implementation, as the figure's caption says."""
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
        fig, axes = plotting.figure(1, len(panels), legend_rows=4, row_in=2.2)
        for ax, (stage, length, title, rows) in zip(axes[:, 0], panels, strict=True):
            colours |= _series_panel(ax, stage, length, rows)
            ax.set_title(title)
        fig.suptitle(name)
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
    """A triangle: made under load; a hollow square: its load not recorded; a dot: quiet."""
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
    plotting.log_y(ax)
    ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks])
    ax.set_xlabel("tokens" if stage == "prefill" else "cache (keys), batch")
    ax.axhline(1.0, color="grey", lw=0.5, ls=":")
    ax.grid(False, axis="x")
    return drawn
