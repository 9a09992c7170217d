"""The figures' style and plumbing: one colour and label per implementation (declared in
``algorithms.implementations``), a line style and marker per dtype, log axes whose ticks are
real numbers (1,024, never 2¹⁰), the legend below the data, and inline SVG whose text stays
text and whose ids are prefixed with the figure's name (several figures share one page).
The figures themselves are drawn by each stage's view (``presentation.views``).
"""

from __future__ import annotations

import io
import math
import re

import matplotlib

matplotlib.use("Agg")  # no display: figures are rendered to SVG text
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_hex, to_rgb  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

from inferlab.algorithms.implementations import IMPLEMENTATIONS  # noqa: E402

RC = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9,
      "axes.titlesize": 10, "legend.fontsize": 8.5, "axes.spines.top": False,
      "axes.spines.right": False, "axes.grid": True, "grid.color": "#e4e4e4",
      "lines.linewidth": 1.6, "lines.markersize": 5}
DTYPE_STYLE = {"float32": ("-", "o"), "bfloat16": ("--", "s"), "float16": (":", "^")}
PANEL_IN = (4.6, 3.0)   # one axes, inches


# ---------------------------------------------------------------- style


def rc():
    """The figures' matplotlib settings, for a ``with`` block that draws one figure."""
    return plt.rc_context(RC)


def impl_label(row: dict) -> str:
    """'tiled B=128', 'splitkv, 4 splits', 'sdpa_flash': an implementation as drawn."""
    impl, block, splits = row["impl"], row.get("block_q"), row.get("splits")
    sized_by = IMPLEMENTATIONS[impl].sized_by if impl in IMPLEMENTATIONS else None
    if sized_by == "block" and pd.notna(block):
        return f"{impl} B={int(block)}"
    if sized_by == "splits" and pd.notna(splits):
        return f"{impl}, {int(splits)} split{'s' if int(splits) != 1 else ''}"
    return impl


def colour(label: str) -> str:
    """One colour per implementation label, the same in every figure: the base colour
    of the implementation, lighter for a larger tile or more splits, darker for fewer."""
    impl = label.split(" ")[0].rstrip(",")
    base = IMPLEMENTATIONS[impl].colour if impl in IMPLEMENTATIONS else "#7f7f7f"
    size = re.search(r"(\d+)", label[len(impl):])
    if size is None:
        return base
    pivot, scale = (8, 8) if "split" in label else (128, 4)  # 1..64 splits; tiles 64..512
    t = max(-0.5, min(0.6, math.log2(int(size.group(1)) / pivot) / scale))
    target = (1.0, 1.0, 1.0) if t > 0 else (0.0, 0.0, 0.0)
    return to_hex([c + abs(t) * (w - c) for c, w in zip(to_rgb(base), target, strict=True)])


def style(dtype) -> tuple[str, str]:
    return DTYPE_STYLE.get(str(dtype), ("-.", "D"))


# ---------------------------------------------------------------- axes


def number(x: float) -> str:
    """Tick text: 1,024 and 0.5, never 3×10²."""
    if x >= 100 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:.3g}"


def length_axis(ax, lengths) -> None:
    """Log-2 x axis whose ticks are exactly the lengths measured."""
    lengths = sorted({int(t) for t in lengths})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: number(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(lengths) > 5:
        ax.tick_params(axis="x", labelrotation=30)
    ax.set_xlim(lengths[0] / 1.25, lengths[-1] * 1.25)


def log_x(ax) -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1, 3)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: number(x)))
    ax.xaxis.set_minor_locator(NullLocator())


def log_y(ax) -> None:
    """Log y axis with ticks at 1, 2 and 5 of each decade, or at each decade alone where the
    data span more than three (1, 2, 5 over five decades collide)."""
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5) if high / low < 1e3 else (1,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: number(y)))
    ax.yaxis.set_minor_locator(NullLocator())


def series(ax, frame: pd.DataFrame, x: str, y: str, colour_: str, dtype,
            noisy: pd.Series | None = None, yerr=None) -> None:
    """One line; filled markers, hollow where the timing was noisy; optional error bars."""
    line, marker = style(dtype)
    order = frame[x].argsort().to_numpy()
    xs, ys = frame[x].to_numpy(float)[order], frame[y].to_numpy(float)[order]
    ax.plot(xs, ys, linestyle=line, marker=marker, color=colour_, zorder=3)
    if yerr is not None:
        ax.errorbar(xs, ys, yerr=[yerr[0][order], yerr[1][order]], fmt="none", ecolor=colour_,
                    elinewidth=1, capsize=2.5, zorder=3)
    hollow = noisy.to_numpy(bool)[order] if noisy is not None else None
    if hollow is not None and hollow.any():
        ax.plot(xs[hollow], ys[hollow], linestyle="none", marker=marker, color=colour_,
                markerfacecolor="white", markersize=7, zorder=4)


def legend(fig, colours: dict[str, str], dtypes, noisy: bool, extra=(), ncols=2) -> None:
    handles = [Line2D([], [], color=colours[label], label=label)
               for label in sorted(colours, key=natural)]
    handles += [Line2D([], [], color="#555555", linestyle=style(d)[0],
                       marker=style(d)[1], label=str(d)) for d in dtypes]
    if noisy:
        handles.append(Line2D([], [], color="#555555", marker="o", linestyle="none",
                              markerfacecolor="white", markersize=7, label="noisy timing"))
    fit_legend(fig, handles + list(extra), ncols)


def fit_legend(fig, handles: list, ncols: int) -> None:
    """The legend below the data in as many of ``ncols`` columns as fit the figure's width
    (the SVG's edge would clip a wider one)."""
    for n in range(min(ncols, len(handles)), 0, -1):
        found = fig.legend(handles=handles, loc="outside lower center", ncols=n,
                           frameon=False)
        fig.draw_without_rendering()
        if n == 1 or found.get_window_extent().width <= fig.bbox.width:
            return
        found.remove()


def natural(label: str) -> list:
    """Sort key that puts 'splitkv, 4 splits' before 'splitkv, 16 splits'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label)]


def figure(columns: int = 1, rows: int = 1, legend_rows: int = 2, row_in: float | None = None):
    """Axes ``rows`` x ``columns`` in a figure one panel wide whatever ``columns``: the page
    shows every figure at a panel's width, so a wider figure would shrink its text."""
    height = (row_in or PANEL_IN[1]) * rows + 0.25 * legend_rows
    return plt.subplots(rows, columns, figsize=(PANEL_IN[0], height), squeeze=False,
                        layout="constrained")


def interval(rows: pd.DataFrame, low: str = "ci_low", high: str = "ci_high"):
    """Error bar lengths (below, above) of ``value`` from the rows' ``low``/``high``; None
    without them; no bar on a side whose end is missing."""
    if not {low, high} <= set(rows.columns):
        return None
    value = rows["value"].to_numpy(float)
    below = value - pd.to_numeric(rows[low], errors="coerce").to_numpy(float)
    above = pd.to_numeric(rows[high], errors="coerce").to_numpy(float) - value
    below[~(below >= 0)], above[~(above >= 0)] = 0, 0
    return below, above


def svg(fig, name: str) -> str:
    """The figure as inline SVG (no prolog, comments or metadata), closed; every id
    prefixed with ``name`` and the ids nothing refers to dropped."""
    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": name}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    name = re.sub(r"[^A-Za-z0-9_-]", "-", name)
    text = re.sub(r"<!--.*?-->|<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'(<svg[^>]*?) width="[^"]*" height="[^"]*"', r"\1", text, count=1)
    ids = set(re.findall(r' id="([^"]+)"', text))
    used = {i for i in ids if f'#{i}"' in text or f"#{i})" in text}
    text = re.sub(r' id="([^"]+)"',
                  lambda m: f' id="{name}-{m.group(1)}"' if m.group(1) in used else "", text)
    return re.sub(r'#([\w.-]+)([")])',
                  lambda m: f"#{name}-{m.group(1)}{m.group(2)}" if m.group(1) in used
                  else m.group(0), text)


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"] if "status" in frame.columns else frame


def flag(frame: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column with missing cells (and a missing column) as False."""
    if column not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame[column].fillna(False).astype(bool)


def noisy(frame: pd.DataFrame) -> pd.Series:
    return flag(frame, "noisy")

