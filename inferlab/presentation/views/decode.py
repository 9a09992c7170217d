"""Decode on the page: time and achieved bandwidth against the cache length beside the
model's floor and the copy ceiling, the raw rows of the latest run (the series section
pools the runs)."""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup
from matplotlib.lines import Line2D

from inferlab.presentation import plotting, sections
from inferlab.presentation.plotting import colour, impl_label

SECTION = {"id": "decode", "title": "Decode", "caption": None}
COLUMNS = {
    "impl": "implementation", "splits": "splits", "cache_len": "cache (keys)", "batch": "batch",
    "dtype": "dtype", "median_ms": "median (ms)", "rounds": "rounds", "converged": "converged",
    "noisy": "noisy", "ratio": "÷ fused", "ratio_ci_low": "95% low", "ratio_ci_high": "95% high",
    "ratio_run_sd": "run-level sd (log)",
    "cache_bytes": "cache (MiB)", "achieved_gbs": "achieved (GB/s)",
    "frac_copy_ceiling": "of copy ceiling", "floor_ms": "floor (ms)", "kernel": "kernel",
    "status": "status"}


def figures(page: sections.Page) -> list[dict]:
    copy = {k.key: ((k.evidence["probe"].data or {}).get("ceilings") or {}).get("copy_gbs")
            for k in page.keys}
    caption = Markup(
        "One decode step against the cache length, one column per batch: time (top)\n"
        "beside the model's floor (the cache read at the copy bandwidth measured on the "
        "machine), and\nthe bandwidth achieved (bottom) beside that copy ceiling. Colour: "
        "split-KV by its number of\nsplits (lighter: more) and each fused backend. {}"
    ).format(sections.NOISY_NOTE)
    return [sections.figure([decode_figure(f, key, copy.get(key))
                          for key, f in page.frames("decode").items()], caption)]


def tables(page: sections.Page) -> list[dict]:
    return [page.raw("decode", COLUMNS)]


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
        fig, axes = plotting.figure(len(batches), 2, legend_rows=4)
        for j, batch in enumerate(batches):
            part = frame[frame["batch"] == batch]
            top, bottom = axes[0][j], axes[1][j]
            for (label, dtype), rows in part.groupby(["label", "dtype"]):
                colours[label] = colour(label)
                for ax, column in ((top, "median_ms"), (bottom, "achieved_gbs")):
                    plotting.series(ax, rows, "cache_len", column, colours[label], dtype,
                                    plotting.noisy(rows))
            floor = part.groupby("cache_len")["floor_ms"].min().dropna()
            top.plot(floor.index, floor.to_numpy(), "k--", lw=1.2, marker="_", markersize=14)
            if copy_gbs:
                bottom.axhline(copy_gbs, color="k", ls="--", lw=1.2)
            for ax in (top, bottom):
                plotting.length_axis(ax, frame["cache_len"])
                plotting.log_y(ax)
            top.set(title=f"batch {int(batch)}", ylabel="time per step (ms)" if j == 0
                    else None)
            bottom.set(xlabel="cache (keys)", ylabel="achieved GB/s" if j == 0 else None)
        fig.suptitle(name)
        extra = [Line2D([], [], color="k", ls="--", label="floor / copy ceiling")]
        plotting.legend(fig, colours, sorted(frame["dtype"].unique()), noisy, extra, ncols=3)
        return plotting.svg(fig, f"decode-{name}")
