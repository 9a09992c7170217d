"""The report's figures: matplotlib drawn to inline SVG, one figure per results key.

Each figure answers one of the chapter's questions, in the style of the FlashAttention
papers and Triton's ``perf_report``: the real lengths as ticks on a log-2 axis, colour by
implementation (the same colour in every figure), line style and marker by dtype,
legends below the data, a hollow marker for a timing flagged noisy. The SVG keeps text as
text (``svg.fonttype: none``) and every id is prefixed with the figure's own name, so
several figures share one page without sharing ids.

* ``speedup_figure``: naive ÷ fused and tiled ÷ naive against tokens, with the chapter's
  claimed ranges (read from claims.yaml: ``speedup_bands``) as bands;
* ``memory_figure``: peak extra memory against tokens, log-log, with S and S² slopes;
* ``decode_figure``: time and achieved bandwidth against cache length, one column per
  batch, beside the model's floor and the copy ceiling;
* ``traffic_figure``: the traffic model, one line per mask, with the measured ratios.

A figure with nothing to draw is ``None``; ``report_figures`` draws the page's figures.
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
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

RC = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9,
      "axes.titlesize": 10, "legend.fontsize": 8.5, "axes.spines.top": False,
      "axes.spines.right": False, "axes.grid": True, "grid.color": "#e4e4e4",
      "lines.linewidth": 1.6, "lines.markersize": 5}
BASE_COLOURS = {"naive": "#222222", "tiled": "#d62728", "tiled_fast": "#9467bd",
                "sdpa_flash": "#1f77b4", "sdpa_efficient": "#2ca02c",
                "sdpa_cudnn": "#17becf", "sdpa_math": "#8c564b", "splitkv": "#ff7f0e"}
DTYPE_STYLE = {"float32": ("-", "o"), "bfloat16": ("--", "s"), "float16": (":", "^")}
MASK_COLOURS = {"full": "#1f77b4", "causal": "#d62728"}
SPEEDUPS = {"naive ÷ fused": ("naive", "fused"), "tiled ÷ naive": ("tiled", "naive")}
PANEL_IN = (4.6, 3.0)   # one axes, inches


# ---------------------------------------------------------------- style


def impl_label(row: dict) -> str:
    """'tiled B=128', 'splitkv, 4 splits', 'sdpa_flash': an implementation as drawn."""
    impl, block, splits = row["impl"], row.get("block_q"), row.get("splits")
    if impl.startswith("tiled") and _present(block):
        return f"{impl} B={int(block)}"
    if impl == "splitkv" and _present(splits):
        return f"splitkv, {int(splits)} split{'s' if int(splits) != 1 else ''}"
    return impl


def colour(label: str) -> str:
    """One colour per implementation label, the same in every figure: the base colour
    of the implementation, lighter for a larger tile or more splits, darker for fewer."""
    impl = label.split(" ")[0].rstrip(",")
    base = BASE_COLOURS.get(impl, "#7f7f7f")
    size = re.search(r"(\d+)", label[len(impl):])
    if size is None:
        return base
    pivot, scale = (8, 8) if impl == "splitkv" else (128, 4)  # 1..64 splits; tiles 64..512
    t = max(-0.5, min(0.6, math.log2(int(size.group(1)) / pivot) / scale))
    target = (1.0, 1.0, 1.0) if t > 0 else (0.0, 0.0, 0.0)
    return to_hex([c + abs(t) * (w - c) for c, w in zip(to_rgb(base), target, strict=True)])


def _present(value) -> bool:
    return value is not None and not pd.isna(value)


def _style(dtype) -> tuple[str, str]:
    return DTYPE_STYLE.get(str(dtype), ("-.", "D"))


# ---------------------------------------------------------------- axes


def _number(x: float) -> str:
    """Tick text: 1,024 and 0.5, never 3×10²."""
    if x >= 100 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _length_axis(ax, lengths) -> None:
    """Log-2 x axis whose ticks are exactly the lengths measured."""
    lengths = sorted({int(t) for t in lengths})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _number(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(lengths) > 5:
        ax.tick_params(axis="x", labelrotation=30)
    ax.set_xlim(lengths[0] / 1.25, lengths[-1] * 1.25)


def _log_y(ax) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _number(y)))
    ax.yaxis.set_minor_locator(NullLocator())


def _series(ax, frame: pd.DataFrame, x: str, y: str, colour_: str, dtype,
            noisy: pd.Series | None = None, yerr=None) -> None:
    """One line; filled markers, hollow where the timing was noisy; optional error bars."""
    line, marker = _style(dtype)
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


def _legend(fig, colours: dict[str, str], dtypes, noisy: bool, extra=(), ncols=2) -> None:
    handles = [Line2D([], [], color=colours[label], label=label)
               for label in sorted(colours, key=_natural)]
    handles += [Line2D([], [], color="#555555", linestyle=_style(d)[0],
                       marker=_style(d)[1], label=str(d)) for d in dtypes]
    if noisy:
        handles.append(Line2D([], [], color="#555555", marker="o", linestyle="none",
                              markerfacecolor="white", markersize=7, label="noisy timing"))
    handles += list(extra)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(ncols, len(handles)),
               frameon=False)


def _natural(label: str) -> list:
    """Sort key that puts 'splitkv, 4 splits' before 'splitkv, 16 splits'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label)]


def _figure(columns: int = 1, rows: int = 1, legend_rows: int = 2):
    width = PANEL_IN[0] if columns == 1 else 3.2 * columns
    height = PANEL_IN[1] * rows + 0.25 * legend_rows
    return plt.subplots(rows, columns, figsize=(width, height), squeeze=False,
                        layout="constrained")


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


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"] if "status" in frame.columns else frame


def _flag(frame: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column with missing cells (and a missing column) as False."""
    if column not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame[column].fillna(False).astype(bool)


def _noisy(frame: pd.DataFrame) -> pd.Series:
    return _flag(frame, "noisy")


# ---------------------------------------------------------------- prefill


def speedup_bands(claims) -> dict[str, tuple[float, float]]:
    """The chapter's claimed ranges for naive ÷ fused and tiled ÷ naive: the union of the
    bounds of every prefill claim on a paired ratio between those two row sets."""
    bands: dict[str, tuple[float, float]] = {}
    for claim in claims:
        check = claim.check
        if check is None or check.stage != "prefill" or check.measure.column != "ratio" \
                or check.expect.kind != "between":
            continue
        name = _band_name(check)
        if name is not None:
            lo, hi = check.expect.bounds
            old = bands.get(name, (lo, hi))
            bands[name] = (min(lo, old[0]), max(hi, old[1]))
    return bands


def _band_name(check) -> str | None:
    """'naive ÷ fused' for the fused rows' inverted ratio, 'tiled ÷ naive' for tiled rows."""
    where = {c.column: c.values for c in check.rows.where if c.values is not None}
    if where.get("fused_sdpa") == (True,) and check.measure.invert:
        return "naive ÷ fused"
    if where.get("impl") == ("tiled",) and not check.measure.invert:
        return "tiled ÷ naive"
    return None


def _ratios(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(series label, colour, rows of T, dtype, ratio, low, high, noisy) per series: the
    paired ratios the prefill stage measured (each row against naive of its mask, round
    by round, with its 95% interval); naive ÷ fused is the fastest fused row's, inverted."""
    out = []
    if "ratio" not in frame.columns:
        return out
    paired = frame[frame["ratio_to"] == "naive"] if "ratio_to" in frame else frame.iloc[:0]
    fused = paired[_flag(paired, "fused_sdpa")].sort_values("median_ms")
    fused = fused.groupby(["T", "dtype"]).head(1)
    if not fused.empty:
        out.append(("naive ÷ fused", colour("sdpa_flash"), pd.DataFrame({
            "T": fused["T"], "dtype": fused["dtype"], "ratio": 1 / fused["ratio"],
            "low": 1 / fused["ratio_ci_high"], "high": 1 / fused["ratio_ci_low"],
            "noisy": _noisy(fused)}).reset_index(drop=True)))
    for block, tiled in paired[paired["impl"] == "tiled"].groupby("block_q"):
        label = impl_label({"impl": "tiled", "block_q": block})
        out.append((f"{label} ÷ naive", colour(label), pd.DataFrame({
            "T": tiled["T"], "dtype": tiled["dtype"], "ratio": tiled["ratio"],
            "low": tiled["ratio_ci_low"], "high": tiled["ratio_ci_high"],
            "noisy": _noisy(tiled)}).reset_index(drop=True)))
    return out


def speedup_figure(frame: pd.DataFrame, name: str, bands: dict) -> str | None:
    """Causal rows: naive ÷ (fastest fused) and tiled ÷ naive against tokens."""
    frame = _ok(frame)
    frame = frame[_flag(frame, "causal")]
    series = _ratios(frame) if not frame.empty else []
    if not series:
        return None
    with plt.rc_context(RC):
        fig, axes = _figure()
        ax = axes[0][0]
        extra, colours, noisy = [], {}, False
        for band, (lo, hi) in bands.items():
            c = colour("sdpa_flash") if band.startswith("naive") else colour("tiled B=128")
            ax.axhspan(lo, hi, color=c, alpha=0.12, lw=0)
            extra.append(Patch(color=c, alpha=0.25, label=f"chapter: {band}, "
                                                          f"{_number(lo)}–{_number(hi)}×"))
        for label, colour_, rows in series:
            colours[label] = colour_
            for dtype, part in rows.groupby("dtype"):
                err = (part["ratio"] - part["low"]).to_numpy(), \
                      (part["high"] - part["ratio"]).to_numpy()
                _series(ax, part, "T", "ratio", colour_, dtype, part["noisy"], err)
                noisy |= bool(part["noisy"].any())
        ax.axhline(1, color="#888888", lw=0.8)
        _log_y(ax)
        _length_axis(ax, frame["T"])
        ax.set(xlabel="tokens (causal mask)", ylabel="ratio of median times (×)", title=name)
        dtypes = sorted(frame["dtype"].dropna().unique())
        _legend(fig, colours, dtypes, noisy, extra)
        return svg(fig, f"speedup-{name}")


def memory_figure(frame: pd.DataFrame, name: str) -> str | None:
    """Peak extra memory against tokens, log-log, with S and S² slopes for reference."""
    frame = _ok(frame).dropna(subset=["peak_extra_bytes"])
    causal = frame[_flag(frame, "causal")]
    frame = causal if not causal.empty else frame
    frame = frame[frame["peak_extra_bytes"] > 0]
    if frame.empty:
        return None
    frame = frame.assign(mib=frame["peak_extra_bytes"] / 2**20,
                         label=[impl_label(r) for r in frame.to_dict("records")])
    with plt.rc_context(RC):
        fig, axes = _figure()
        ax = axes[0][0]
        colours = {}
        for (label, dtype), part in frame.groupby(["label", "dtype"]):
            colours[label] = colour(label)
            _series(ax, part, "T", "mib", colours[label], dtype)
        lo, hi = frame["T"].min(), frame["T"].max()
        anchor = frame.loc[frame["T"] == lo, "mib"].median()
        extra = []
        for power, text in ((1, "∝ S"), (2, "∝ S²")):
            ys = [anchor, anchor * (hi / lo) ** power]
            ax.plot([lo, hi], ys, color="#999999", lw=1, ls=(0, (1, 2)), zorder=2)
            ax.annotate(text, (hi, ys[1]), xytext=(4, 0), textcoords="offset points",
                        color="#666666", va="center")
        _log_y(ax)
        _length_axis(ax, frame["T"])
        ax.set(xlabel="tokens" + (" (causal mask)" if not causal.empty else ""),
               ylabel="peak extra memory (MiB)", title=name)
        _legend(fig, colours, sorted(frame["dtype"].unique()), False,
                extra)
        return svg(fig, f"memory-{name}")


# ---------------------------------------------------------------- decode, traffic


def decode_figure(frame: pd.DataFrame, name: str, copy_gbs: float | None) -> str | None:
    """Per batch: time against cache length with the model's floor, and the achieved
    bandwidth with the copy ceiling."""
    frame = _ok(frame).dropna(subset=["median_ms"])
    if frame.empty:
        return None
    frame = frame.assign(label=[impl_label(r) for r in frame.to_dict("records")])
    batches = sorted(frame["batch"].unique())
    colours, noisy = {}, bool(_noisy(frame).any())
    with plt.rc_context(RC):
        fig, axes = _figure(len(batches), 2, legend_rows=3)
        for j, batch in enumerate(batches):
            part = frame[frame["batch"] == batch]
            top, bottom = axes[0][j], axes[1][j]
            for (label, dtype), rows in part.groupby(["label", "dtype"]):
                colours[label] = colour(label)
                _series(top, rows, "cache_len", "median_ms", colours[label], dtype,
                        _noisy(rows))
                _series(bottom, rows, "cache_len", "achieved_gbs", colours[label], dtype,
                        _noisy(rows))
            floor = part.groupby("cache_len")["floor_ms"].min().dropna()
            top.plot(floor.index, floor.to_numpy(), "k--", lw=1.2, marker="_", markersize=14)
            if copy_gbs:
                bottom.axhline(copy_gbs, color="k", ls="--", lw=1.2)
            for ax in (top, bottom):
                _length_axis(ax, frame["cache_len"])
                _log_y(ax)
            top.set(title=f"{name}, batch {int(batch)}", ylabel="time per step (ms)" if j == 0
                    else None)
            bottom.set(xlabel="cache length (keys)", ylabel="achieved GB/s" if j == 0 else None)
        extra = [Line2D([], [], color="k", ls="--", label="floor / copy ceiling")]
        _legend(fig, colours, sorted(frame["dtype"].unique()), noisy,
                extra, ncols=min(4, len(batches) + 1))
        return svg(fig, f"decode-{name}")


def traffic_figure(frame: pd.DataFrame, name: str) -> str | None:
    """The model's naive/tiled traffic ratio, one line per mask over every length, and
    the measured naive/fused time ratios over it (marker by dtype)."""
    if frame.empty:
        return None
    with plt.rc_context(RC):
        fig, axes = _figure()
        ax = axes[0][0]
        handles = []
        for causal, part in frame.groupby(_flag(frame, "causal")):
            mask = "causal" if causal else "full"
            model = part.groupby("T")["model_ratio"].mean().dropna()
            ax.plot(model.index, model.to_numpy(), color=MASK_COLOURS[mask], zorder=2)
            handles.append(Line2D([], [], color=MASK_COLOURS[mask], label=f"model, {mask}"))
            for dtype, rows in part.dropna(subset=["measured_ratio"]).groupby("dtype"):
                ax.plot(rows["T"], rows["measured_ratio"], linestyle="none",
                        marker=_style(dtype)[1], color=MASK_COLOURS[mask], zorder=3)
        for dtype in sorted(frame["dtype"].dropna().unique()):
            handles.append(Line2D([], [], color="#555555", marker=_style(dtype)[1],
                                  linestyle="none", label=f"measured, {dtype}"))
        _length_axis(ax, frame["T"])
        ax.set_ylim(bottom=0)
        ax.set(xlabel="tokens", ylabel="naive ÷ fused", title=name)
        fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
        return svg(fig, f"traffic-{name}")


def report_figures(frames: dict[str, dict[str, pd.DataFrame]], copy_gbs: dict[str, float | None],
                   bands: dict) -> dict[str, list[str]]:
    """The page's figures, one per results key that has rows: ``frames`` maps a stage
    (prefill, decode, traffic) to {key: its rows}; ``copy_gbs`` each key's copy ceiling."""
    drawn = {
        "speedup": [speedup_figure(f, k, bands) for k, f in frames["prefill"].items()],
        "memory": [memory_figure(f, k) for k, f in frames["prefill"].items()],
        "decode": [decode_figure(f, k, copy_gbs.get(k)) for k, f in frames["decode"].items()],
        "traffic": [traffic_figure(f, k) for k, f in frames["traffic"].items()]}
    return {name: [svg for svg in svgs if svg] for name, svgs in drawn.items()}
