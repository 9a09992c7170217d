"""traffic -> traffic.csv: the traffic model's naive/fused ratio beside the measured
naive/fused time ratio from prefill.csv, and the query tile the measured ratio implies
(the chapter's exercise 3). At the configured ``model_lengths`` that prefill did not
measure (the chapter's 1,024-8,192 tokens on a small CPU run) a model-only row is written,
its measured columns empty, so the model's predictions are checkable everywhere.

"Fused" is the fastest SDPA backend that ran with a fused kernel (flash, efficient or
cudnn; ``sdpa_math`` is the unfused composite and never counts); ``fused_impl`` names
it. On a CPU the tile PyTorch's CPU flash kernel really uses is set beside the implied
one (backends.cpu_flash_split_sizes); CUDA kernels do not report theirs.
"""

from __future__ import annotations

import math

import pandas as pd

from inferlab.backends import cpu_flash_split_sizes
from inferlab.config import TrafficParams
from inferlab.stages import ratio_or_none, table
from inferlab.traffic import implied_block_q, traffic_ratio

FUSED_IMPLS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn")


def _best(rows: pd.DataFrame, impls) -> tuple[str | None, float | None]:
    ok = rows[rows["impl"].isin(impls) & (rows["status"] == "ok")]
    if ok.empty:
        return None, None
    best = ok.loc[ok["median_ms"].idxmin()]
    return best["impl"], float(best["median_ms"])


def _cpu_kernel_tile(T: int, device: str) -> tuple[int | None, int | None, str | None]:
    if device != "cpu":
        return None, None, "the CUDA kernels' tile sizes are not reported by PyTorch"
    try:
        q_split, kv_split = cpu_flash_split_sizes(T, T)
    except NotImplementedError as exc:
        return None, None, f"CPU flash kernel tile unknown: {exc}"
    return q_split, kv_split, None


def point_row(rows: pd.DataFrame, T: int, d: int, causal: bool, dtype: str,
              params: TrafficParams, device: str) -> dict:
    """One traffic row from the prefill rows of one (T, d, causal, dtype) point."""
    _, naive_ms = _best(rows, ("naive",))
    fused_impl, fused_ms = _best(rows, FUSED_IMPLS)
    measured = ratio_or_none(naive_ms, fused_ms)
    q_split, kv_split, note = _cpu_kernel_tile(T, device)
    implied = None if measured is None else implied_block_q(measured, T, d, causal=causal)
    if measured is None:
        note = "no measured ratio: " + ("naive did not run" if naive_ms is None
                                        else "no fused SDPA backend ran")
    elif not math.isfinite(implied):
        implied, note = None, ("the measured ratio is at or above the model's limit at this "
                               "T for any tile: no finite B_q implies it")
    return {"T": T, "d": d, "causal": causal, "dtype": dtype,
            "block_q_model": params.block_q_model,
            "model_ratio": traffic_ratio(T, d, params.block_q_model, causal=causal),
            "naive_ms": naive_ms, "fused_ms": fused_ms, "fused_impl": fused_impl,
            "measured_ratio": measured,
            "implied_block_q": implied,
            "cpu_kernel_q_split": q_split, "cpu_kernel_kv_split": kv_split, "note": note}


def model_row(T: int, d: int, causal: bool, params: TrafficParams) -> dict:
    """The model's prediction at a length prefill did not measure: nothing measured beside it."""
    return {"T": T, "d": d, "causal": causal, "dtype": None,
            "block_q_model": params.block_q_model,
            "model_ratio": traffic_ratio(T, d, params.block_q_model, causal=causal),
            "note": "model only: prefill did not measure this length here"}


def run(params: TrafficParams, ctx):
    prefill = pd.read_csv(ctx.inputs["prefill"])
    rows = [point_row(group, int(T), int(d), bool(causal), dtype, params, ctx.device)
            for (T, d, causal, dtype), group in prefill.groupby(["T", "d", "causal", "dtype"])]
    measured = {(row["T"], row["d"]) for row in rows}
    rows += [model_row(T, int(d), bool(causal), params)
             for T in params.model_lengths for d in sorted(set(prefill["d"]))
             for causal in (False, True) if (T, int(d)) not in measured]
    return table("traffic", rows)
