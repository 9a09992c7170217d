"""traffic -> traffic.csv: the traffic model's naive/fused ratio beside the measured
naive/fused time ratio from prefill.csv, and the query tile the measured ratio implies
(the chapter's exercise 3). At the configured ``model_lengths`` that prefill did not
measure (the chapter's 1,024-8,192 tokens on a small CPU run) a model-only row is written,
its measured columns empty, so the model's predictions are checkable everywhere.

The measured ratio is the paired one: the prefill stage timed naive and fused in the same
rounds, and ``measured_ratio`` is the median over rounds of naive / fused with its 95%
interval. "Fused" is the fastest prefill row marked ``fused_sdpa``: PyTorch's fused kernel, an SDPA
backend that never writes the score matrix (``backends.FUSED_SDPA``); ``fused_impl``
names it. On a CPU the tile PyTorch's CPU
flash kernel really uses is set beside the implied one (backends.cpu_flash_split_sizes);
CUDA kernels do not report theirs: the model's B_q there is an assumption (``tile``
"assumed"). Our Triton kernel (inferlab.kernels, CUDA only) runs at tiles we choose, so
beside each of its prefill rows the model is evaluated at that kernel's own B_q (``tile``
"known"): the model tested without assuming a tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from inferlab.backends import cpu_flash_split_sizes
from inferlab.stages.common import tuples
from inferlab.traffic import implied_block_q, traffic_ratio


@dataclass(frozen=True)
class Params:
    block_q_model: int
    model_lengths: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(**{k: tuples(v) for k, v in cfg["traffic"].items()})


def _fastest(rows: pd.DataFrame) -> pd.Series | None:
    ok = rows[rows["status"] == "ok"]
    return None if ok.empty else ok.loc[ok["median_ms"].idxmin()]


def _naive_over(fused: pd.Series | None) -> tuple[float | None, float | None, float | None]:
    """naive / fused, paired round by round: the inverse of the fused row's ratio to naive
    (its interval inverted too); None when the two were not paired."""
    if fused is None or pd.isna(fused["ratio"]) or fused["ratio_to"] != "naive":
        return None, None, None
    return 1 / fused["ratio"], 1 / fused["ratio_ci_high"], 1 / fused["ratio_ci_low"]


def _cpu_kernel_tile(T: int, device: str) -> tuple[int | None, int | None, str | None]:
    if device != "cpu":
        return None, None, "the CUDA kernels' tile sizes are not reported by PyTorch"
    try:
        q_split, kv_split = cpu_flash_split_sizes(T, T)
    except NotImplementedError as exc:
        return None, None, f"CPU flash kernel tile unknown: {exc}"
    return q_split, kv_split, None


def point_rows(rows: pd.DataFrame, T: int, d: int, causal: bool, dtype: str,
               params: Params, device: str) -> list[dict]:
    """The traffic rows of one (T, d, causal, dtype) point: PyTorch's fused kernel at the
    assumed tile, and our Triton kernel at each tile it really used."""
    naive = _fastest(rows[rows["impl"] == "naive"])
    out = [point_row(naive, _fastest(rows[rows["fused_sdpa"].fillna(False)]), T, d, causal,
                     dtype, params.block_q_model, "assumed", device)]
    ours = rows[(rows["impl"] == "triton_flash") & (rows["status"] == "ok")]
    for block_q, group in ours.groupby("block_q"):
        out.append(point_row(naive, _fastest(group), T, d, causal, dtype, int(block_q),
                             "known", device))
    return out


def point_row(naive: pd.Series | None, fused: pd.Series | None, T: int, d: int, causal: bool,
              dtype: str, block_q: int, tile: str, device: str) -> dict:
    """One traffic row: the model at ``block_q`` beside the measured naive/fused ratio."""
    naive_ms = None if naive is None else float(naive["median_ms"])
    fused_ms = None if fused is None else float(fused["median_ms"])
    measured, low, high = _naive_over(fused)
    q_split, kv_split, note = _cpu_kernel_tile(T, device) if tile == "assumed" \
        else (None, None, f"our Triton kernel's own tile: B_q = {block_q}")
    implied = None if measured is None else implied_block_q(measured, T, d, causal=causal)
    if measured is None:
        note = "no measured ratio: " + ("naive did not run" if naive_ms is None
                                        else "no fused SDPA backend ran")
    elif not math.isfinite(implied):
        implied, note = None, ("the measured ratio is at or above the model's limit at this "
                               "T for any tile: no finite B_q implies it")
    return {"T": T, "d": d, "causal": causal, "dtype": dtype, "tile": tile,
            "block_q_model": block_q, "model_ratio": traffic_ratio(T, d, block_q, causal=causal),
            "naive_ms": naive_ms, "fused_ms": fused_ms,
            "fused_impl": None if fused is None else str(fused["impl"]),
            "measured_ratio": measured, "measured_ratio_ci_low": low,
            "measured_ratio_ci_high": high, "implied_block_q": implied,
            "cpu_kernel_q_split": q_split, "cpu_kernel_kv_split": kv_split, "note": note}


def model_row(T: int, d: int, causal: bool, params: Params) -> dict:
    """The model's prediction at a length prefill did not measure: nothing measured beside it."""
    return {"T": T, "d": d, "causal": causal, "dtype": None, "tile": "assumed",
            "block_q_model": params.block_q_model,
            "model_ratio": traffic_ratio(T, d, params.block_q_model, causal=causal),
            "note": "model only: prefill did not measure this length here"}


TIMES = ("median_ms", "ratio", "ratio_ci_low", "ratio_ci_high")


def run(params: Params, ctx) -> list[dict]:
    table = ctx.inputs["prefill"]
    bad = [c for c in TIMES if c in table.nonfinite and table.nonfinite[c].any()]
    if bad:  # a time is never computed infinite: the input is damaged, not a result
        raise ValueError(f"prefill has NaN or infinite {', '.join(bad)}; a time or a paired "
                         "ratio cannot be, so no traffic ratio is computed from it")
    prefill = table.frame
    rows = [row for (T, d, causal, dtype), group in prefill.groupby(["T", "d", "causal", "dtype"])
            for row in point_rows(group, int(T), int(d), bool(causal), str(dtype), params,
                                  ctx.device)]
    measured = {(row["T"], row["d"]) for row in rows}
    rows += [model_row(T, d, causal, params)
             for T in params.model_lengths for d in sorted({int(x) for x in prefill["d"]})
             for causal in (False, True) if (T, d) not in measured]
    return rows
