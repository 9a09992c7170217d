"""The report's figures: matplotlib drawn to inline SVG, one panel per results key."""

from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")  # no display: figures are rendered to SVG text
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"] if "status" in frame.columns else frame


def svg(fig) -> str:
    """The figure as inline SVG (no XML prolog, comments or metadata), then closed."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return "<figure>" + re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S) + "</figure>"


def _line_plot(ax, frame: pd.DataFrame, x: str, y: str, label: str, scale: float = 1.0):
    frame = frame.dropna(subset=[y]).sort_values(x)
    if frame.empty:
        return
    (line,) = ax.plot(frame[x], frame[y] * scale, marker="o", label=label)
    noisy = frame[frame["noisy"].fillna(False).astype(bool)] if "noisy" in frame.columns \
        else frame.iloc[:0]
    if not noisy.empty:  # noisy rows: a hollow ring around the point
        ax.plot(noisy[x], noisy[y] * scale, "o", ms=12, mfc="none", color=line.get_color())


def _grid(machines: list[str], rows: int, height: float = 3.2):
    fig, axes = plt.subplots(rows, len(machines), figsize=(5 * len(machines), height * rows),
                             squeeze=False, layout="constrained")
    return fig, axes


def prefill_figure(frames: dict[str, pd.DataFrame], column: str, label: str,
                   scale: float = 1.0) -> str:
    """``column`` against T, log-log, one line per implementation/dtype/block; a row of
    panels per causal value, a column per machine; noisy points ringed."""
    machines = list(frames)
    fig, axes = _grid(machines, 2)
    for j, machine in enumerate(machines):
        frame = _ok(frames[machine])
        for i, causal in enumerate((False, True)):
            ax = axes[i][j]
            part = frame[frame["causal"].fillna(False).astype(bool) == causal]
            for key, group in part.groupby(["impl", "dtype", "block_q"], dropna=False):
                impl, dtype, block = key
                name = f"{impl} {dtype}" + (f" B={block:g}" if impl.startswith("tiled")
                                            and not pd.isna(block) else "")
                _line_plot(ax, group, "T", column, name, scale)
            ax.set(xscale="log", yscale="log", xlabel="tokens T", ylabel=label,
                   title=f"{machine}, {'causal' if causal else 'full'}")
            if ax.has_data():
                ax.legend(fontsize=6)
    return svg(fig)


def decode_figure(frames: dict[str, pd.DataFrame], ceilings: dict[str, float | None]) -> str:
    """Per machine at batch 1: time and achieved bandwidth against cache length, one line
    per split count and fused backend; the model's floor and the copy ceiling dashed."""
    machines = list(frames)
    fig, axes = _grid(machines, 2)
    for j, machine in enumerate(machines):
        frame = _ok(frames[machine])
        frame = frame[frame["batch"] == frame["batch"].min()]
        for key, group in frame.groupby(["impl", "splits", "dtype"], dropna=False):
            impl, splits, dtype = key
            name = f"{impl} {dtype}" + ("" if pd.isna(splits) or impl != "splitkv"
                                        else f" splits={splits:g}")
            _line_plot(axes[0][j], group, "cache_len", "median_ms", name)
            _line_plot(axes[1][j], group, "cache_len", "achieved_gbs", name)
        floor = frame.groupby("cache_len")["floor_ms"].min().dropna()
        if not floor.empty:
            axes[0][j].plot(floor.index, floor.values, "k--", label="model floor")
        if ceilings.get(machine):
            axes[1][j].axhline(ceilings[machine], color="k", ls="--", label="copy ceiling")
        batch = frame["batch"].min() if not frame.empty else "—"
        axes[0][j].set(xscale="log", yscale="log", ylabel="median time (ms)",
                       title=f"{machine}, batch {batch}")
        axes[1][j].set(xscale="log", xlabel="cache length (keys)", ylabel="achieved GB/s")
        for ax in axes[:, j]:
            if ax.has_data():
                ax.legend(fontsize=6)
    return svg(fig)


def traffic_figure(frames: dict[str, pd.DataFrame]) -> str:
    machines = list(frames)
    fig, axes = _grid(machines, 1)
    for j, machine in enumerate(machines):
        ax = axes[0][j]
        for key, group in frames[machine].groupby(["causal", "dtype"], dropna=False):
            mask = "causal" if bool(key[0]) else "full"
            _line_plot(ax, group, "T", "model_ratio", f"model, {mask}")
            _line_plot(ax, group, "T", "measured_ratio", f"measured {key[1]}, {mask}")
        ax.set(xscale="log", xlabel="tokens T", ylabel="naive / fused", title=machine)
        if ax.has_data():
            ax.legend(fontsize=6)
    return svg(fig)
