"""traffic -> traffic.csv: the traffic model's naive/fused ratio beside the measured
naive/fused time ratio from prefill.csv, and the query tile the measured ratio implies
(the chapter's exercise 3). At the configured ``model_lengths`` that prefill did not
measure (the chapter's 1,024-8,192 tokens on a small CPU run) a model-only row is written,
its measured columns empty, so the model's predictions are checkable everywhere.

"Fused" is the fastest prefill row marked ``fused_sdpa``: PyTorch's fused kernel, an SDPA
backend that never writes the score matrix (``backends.FUSED_SDPA``); ``fused_impl``
names it. On a CPU the tile PyTorch's CPU
flash kernel really uses is set beside the implied one (backends.cpu_flash_split_sizes);
CUDA kernels do not report theirs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from inferlab.backends import cpu_flash_split_sizes
from inferlab.stages.common import ratio, tuples
from inferlab.traffic import implied_block_q, traffic_ratio


@dataclass(frozen=True)
class Params:
    block_q_model: int
    model_lengths: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(**{k: tuples(v) for k, v in cfg["traffic"].items()})


def _fastest(rows: pd.DataFrame) -> tuple[str | None, float | None]:
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return None, None
    best = ok.loc[ok["median_ms"].idxmin()]
    return str(best["impl"]), float(best["median_ms"])


def _cpu_kernel_tile(T: int, device: str) -> tuple[int | None, int | None, str | None]:
    if device != "cpu":
        return None, None, "the CUDA kernels' tile sizes are not reported by PyTorch"
    try:
        q_split, kv_split = cpu_flash_split_sizes(T, T)
    except NotImplementedError as exc:
        return None, None, f"CPU flash kernel tile unknown: {exc}"
    return q_split, kv_split, None


def point_row(rows: pd.DataFrame, T: int, d: int, causal: bool, dtype: str,
              params: Params, device: str) -> dict:
    """One traffic row from the prefill rows of one (T, d, causal, dtype) point."""
    _, naive_ms = _fastest(rows[rows["impl"] == "naive"])
    fused_impl, fused_ms = _fastest(rows[rows["fused_sdpa"].fillna(False)])
    measured = ratio(naive_ms, fused_ms)
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
            "measured_ratio": measured, "implied_block_q": implied,
            "cpu_kernel_q_split": q_split, "cpu_kernel_kv_split": kv_split, "note": note}


def model_row(T: int, d: int, causal: bool, params: Params) -> dict:
    """The model's prediction at a length prefill did not measure: nothing measured beside it."""
    return {"T": T, "d": d, "causal": causal, "dtype": None,
            "block_q_model": params.block_q_model,
            "model_ratio": traffic_ratio(T, d, params.block_q_model, causal=causal),
            "note": "model only: prefill did not measure this length here"}


def run(params: Params, ctx) -> list[dict]:
    prefill = ctx.inputs["prefill"].frame
    rows = [point_row(group, int(T), int(d), bool(causal), str(dtype), params, ctx.device)
            for (T, d, causal, dtype), group in prefill.groupby(["T", "d", "causal", "dtype"])]
    measured = {(row["T"], row["d"]) for row in rows}
    rows += [model_row(T, d, causal, params)
             for T in params.model_lengths for d in sorted({int(x) for x in prefill["d"]})
             for causal in (False, True) if (T, d) not in measured]
    return rows
