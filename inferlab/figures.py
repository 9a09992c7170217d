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

from inferlab.traffic import naive_hbm_elements  # noqa: E402

RC = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9,
      "axes.titlesize": 10, "legend.fontsize": 8.5, "axes.spines.top": False,
      "axes.spines.right": False, "axes.grid": True, "grid.color": "#e4e4e4",
      "lines.linewidth": 1.6, "lines.markersize": 5}
BASE_COLOURS = {"naive": "#222222", "tiled": "#d62728", "tiled_fast": "#9467bd",
                "sdpa_flash": "#1f77b4", "sdpa_efficient": "#2ca02c",
                "sdpa_cudnn": "#17becf", "sdpa_math": "#8c564b", "splitkv": "#ff7f0e",
                "triton_flash": "#e377c2", "triton_decode": "#bcbd22"}
DTYPE_STYLE = {"float32": ("-", "o"), "bfloat16": ("--", "s"), "float16": (":", "^")}
MASK_COLOURS = {"full": "#1f77b4", "causal": "#d62728"}
# The claims whose quantity the speed-up figure draws: the claim computes it (its rows'
# value, ci_low, ci_high, in the claim's orientation); the figure only names it.
SPEEDUP_CLAIMS = {"naive ÷ fused": "C13-05", "tiled ÷ naive": "C13-07"}
BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
PANEL_IN = (4.6, 3.0)   # one axes, inches


# ---------------------------------------------------------------- style


def impl_label(row: dict) -> str:
    """'tiled B=128', 'splitkv, 4 splits', 'sdpa_flash': an implementation as drawn."""
    impl, block, splits = row["impl"], row.get("block_q"), row.get("splits")
    if (impl.startswith("tiled") or impl == "triton_flash") and _present(block):
        return f"{impl} B={int(block)}"
    if impl in ("splitkv", "triton_decode") and _present(splits):
        return f"{impl}, {int(splits)} split{'s' if int(splits) != 1 else ''}"
    return impl


def colour(label: str) -> str:
    """One colour per implementation label, the same in every figure: the base colour
    of the implementation, lighter for a larger tile or more splits, darker for fewer."""
    impl = label.split(" ")[0].rstrip(",")
    base = BASE_COLOURS.get(impl, "#7f7f7f")
    size = re.search(r"(\d+)", label[len(impl):])
    if size is None:
        return base
    pivot, scale = (8, 8) if "split" in label else (128, 4)  # 1..64 splits; tiles 64..512
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
    with plt.rc_context(RC):
        fig, axes = _figure()
        ax = axes[0][0]
        extra, colours, noisy, lengths, dtypes = [], {}, False, set(), set()
        for label, colour_, rows in series:
            colours[label] = colour_
            for dtype, part in rows.groupby("dtype"):
                _series(ax, part, "T", "value", colour_, dtype, _noisy(part), _interval(part))
                noisy |= bool(_noisy(part).any())
            lengths |= set(rows["T"])
            dtypes |= set(rows["dtype"])
        for band, (lo, hi) in bands.items():
            c = next((c for label, c, _ in series if label.startswith(band)), "#888888")
            ax.axhspan(lo, hi, color=c, alpha=0.12, lw=0)
            extra.append(Patch(color=c, alpha=0.25, label=f"chapter: {band}, "
                                                          f"{_number(lo)}–{_number(hi)}×"))
        ax.axhline(1, color="#888888", lw=0.8)
        _log_y(ax)
        _length_axis(ax, lengths)
        ax.set(xlabel="tokens (causal mask)", ylabel="ratio of median times (×)", title=name)
        _legend(fig, colours, sorted(dtypes), noisy, extra)
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
    """The model's naive/tiled traffic ratio, one line per mask over every length at the
    assumed tile and, dashed, one per kernel at its known tile; the measured naive/fused
    time ratios over them (marker by dtype)."""
    if frame.empty:
        return None
    with plt.rc_context(RC):
        fig, axes = _figure(legend_rows=3)
        ax = axes[0][0]
        handles = []
        for causal, part in frame.groupby(_flag(frame, "causal")):
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
            measured = part.dropna(subset=["measured_ratio"]).drop_duplicates(
                ["T", "dtype", "fused_impl", "measured_ratio"])
            for dtype, rows in measured.groupby("dtype"):
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


# ---------------------------------------------------------------- roofline


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
    """Per ok prefill row whose bytes the traffic model counts (naive; the fused SDPA
    kernels and our Triton kernel at their known tile, else the assumed one): arithmetic
    intensity (the row's FLOPs over the model's bytes, FLOP/B), the attained GFLOP/s and
    the series label. Plain tiling and sdpa_math are left out: the model does not count
    the traffic of tiles or scores that go through main memory."""
    points = []
    for row in _ok(prefill).dropna(subset=["median_ms", "flops"]).to_dict("records"):
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


def _log_x(ax) -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1, 3)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _number(x)))
    ax.xaxis.set_minor_locator(NullLocator())


def _roof(ax, copy_gbs: float, peak_gflops: float, dtype, xs: tuple[float, float]) -> None:
    """min(peak, copy bandwidth × intensity), the ridge marked, over the intensities ``xs``."""
    ridge = peak_gflops / copy_gbs
    lo, hi = min(xs[0], ridge) / 2, max(xs[1], ridge) * 2
    ax.plot([lo, ridge, hi], [copy_gbs * lo, peak_gflops, peak_gflops], color="#444444",
            linestyle=_style(dtype)[0], lw=1.3, zorder=2)
    ax.annotate(f"{dtype}: {_number(peak_gflops)} GFLOP/s, "
                f"ridge {_number(float(f'{ridge:.3g}'))} FLOP/B",
                (hi, peak_gflops), xytext=(0, 3),
                textcoords="offset points", ha="right", va="bottom", color="#444444")
    ax.plot([ridge], [peak_gflops], marker="|", color="#444444", markersize=9, zorder=2)


def roofline_figure(prefill: pd.DataFrame, traffic: pd.DataFrame | None, ceilings: dict,
                    name: str) -> str | None:
    """Attained GFLOP/s against arithmetic intensity (FLOPs over the model's bytes), causal
    rows (every row where none is causal), under the roof of this machine's measured copy
    bandwidth and matmul ceiling per dtype: left of the ridge a kernel can at best move
    bytes at the copy rate (the byte model predicts its time), right of it the matmul
    ceiling bounds it (the byte model does not)."""
    causal = _flag(prefill, "causal")
    points = roofline_points(prefill[causal] if causal.any() else prefill, traffic)
    if points.empty:
        return None
    copy_gbs = (ceilings or {}).get("copy_gbs")
    peaks = (ceilings or {}).get("matmul_gflops") or {}
    with plt.rc_context(RC):
        fig, axes = _figure(legend_rows=3)
        ax = axes[0][0]
        colours = {}
        for (label, dtype), part in points.groupby(["label", "dtype"]):
            colours[label] = colour(label)
            _series(ax, part, "intensity", "gflops", colours[label], dtype, part["noisy"])
        dtypes = sorted(points["dtype"].unique())
        span = (points["intensity"].min(), points["intensity"].max())
        extra = []
        for dtype in dtypes:
            if copy_gbs and peaks.get(dtype):
                _roof(ax, copy_gbs, peaks[dtype], dtype, span)
        if copy_gbs and any(peaks.get(d) for d in dtypes):
            extra.append(Line2D([], [], color="#444444",
                                label=f"roof: copy {_number(copy_gbs)} GB/s"))
        _log_x(ax)
        _log_y(ax)
        top = max([peaks.get(d) or 0 for d in dtypes] + [points["gflops"].max()])
        ax.set_ylim(top=top * 1.6)  # room for the ceilings' labels under the title
        ax.set(xlabel="arithmetic intensity (FLOP per byte of the model's traffic)",
               ylabel="attained GFLOP/s", title=name)
        _legend(fig, colours, dtypes, bool(points["noisy"].any()), extra, ncols=2)
        return svg(fig, f"roofline-{name}")


def roofline_figures(frames: dict[str, dict[str, pd.DataFrame]],
                     ceilings: dict[str, dict]) -> list[str]:
    """One roofline per key with prefill rows: ``frames`` as for ``report_figures``,
    ``ceilings`` each key's probe.json ceilings (copy_gbs, matmul_gflops per dtype)."""
    traffic = frames.get("traffic", {})
    drawn = [roofline_figure(frame, traffic.get(key), ceilings.get(key) or {}, key)
             for key, frame in frames["prefill"].items()]
    return [figure for figure in drawn if figure]


def report_figures(frames: dict[str, dict[str, pd.DataFrame]], copy_gbs: dict[str, float | None],
                   bands: dict, results: dict[str, list[dict]] | None = None
                   ) -> dict[str, list[str]]:
    """The page's figures, one per results key that has rows: ``frames`` maps a stage
    (prefill, decode, traffic) to {key: its rows}; ``copy_gbs`` each key's copy ceiling;
    ``results`` each key's claims (claims.json), which the speed-up figure draws."""
    drawn = {
        "speedup": [speedup_figure(r, k, bands) for k, r in (results or {}).items()],
        "memory": [memory_figure(f, k) for k, f in frames["prefill"].items()],
        "decode": [decode_figure(f, k, copy_gbs.get(k)) for k, f in frames["decode"].items()],
        "traffic": [traffic_figure(f, k) for k, f in frames["traffic"].items()]}
    return {name: [svg for svg in svgs if svg] for name, svgs in drawn.items()}
