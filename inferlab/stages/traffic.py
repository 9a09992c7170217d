"""traffic -> traffic.csv: the traffic model's naive/fused ratio beside the measured
naive/fused time ratio from the prefill series, and the query tile the measured ratio
implies (the chapter's exercise 3). At the configured ``model_lengths`` prefill did not
measure, a model-only row, so the model's predictions are checkable everywhere.

The measured ratio is the paired one (naive and fused timed in the same rounds). A row is
at the chapter's assumed tile (``block_q_model``, B_k = B_q) or, where the kernel that
ran reports it, at its known tile: PyTorch's CPU flash kernel (its split sizes, read from
PyTorch's source) and our Triton kernel; PyTorch's CUDA kernels do not report their
tiles, so there B_q stays an assumption. Each measured row also carries naive
attention's roofline. The columns are described in schemas/traffic.schema.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from inferlab.algorithms.traffic import implied_block_q, naive_hbm_elements, traffic_ratio
from inferlab.judging.series_view import view
from inferlab.measurement.backends import cpu_flash_split_sizes
from inferlab.stages.common import tuples


@dataclass(frozen=True)
class Params:
    block_q_model: int
    model_lengths: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(**{k: tuples(v) for k, v in cfg["traffic"].items()})


CPU_FLASH_OP = "aten::_scaled_dot_product_flash_attention_for_cpu"
CPU_FLASH_SOURCE = ("known: PyTorch's CPU flash kernel ran (the profiler saw {op}); its "
                    "qSplitSize x kvSplitSize at this length, from PyTorch's "
                    "aten/src/ATen/native/cpu/FlashAttentionKernel.cpp")
BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
TRITON_SOURCE = ("known: our Triton kernel, launched with BLOCK_M = {q}, BLOCK_N = {k} "
                 "(inferlab/algorithms/kernels.py)")


@dataclass(frozen=True)
class Tile:
    """The (B_q, B_k) the model is evaluated at, whether it is assumed or known, and where
    it comes from (in words, for the row's note)."""

    block_q: int
    block_k: int
    kind: str      # assumed | known
    source: str
    cpu_kernel: bool = False  # PyTorch's CPU flash kernel's own split sizes


def _fastest(rows: pd.DataFrame) -> pd.Series | None:
    ok = rows[rows["status"] == "ok"]
    return None if ok.empty else ok.loc[ok["median_ms"].idxmin()]


def _naive_over(fused: pd.Series | None) -> tuple[float | None, float | None, float | None]:
    """naive / fused, paired round by round: the inverse of the fused row's ratio to naive
    (its interval inverted too); None when the two were not paired."""
    if fused is None or pd.isna(fused["ratio"]) or fused["ratio_to"] != "naive":
        return None, None, None
    return 1 / fused["ratio"], 1 / fused["ratio_ci_high"], 1 / fused["ratio_ci_low"]


def known_tiles(rows: pd.DataFrame, T: int) -> list[tuple[Tile, pd.Series]]:
    """(tile, its fastest ok row) for each kernel of one point that ran with a known tile:
    PyTorch's CPU flash kernel (by the op the profiler saw) and our Triton kernel per tile."""
    ok = rows[rows["status"] == "ok"]
    out = []
    ran_cpu_flash = ok["kernel"].fillna("").str.contains(CPU_FLASH_OP, regex=False)
    cpu_flash = ok[ok["fused_sdpa"].fillna(False) & ran_cpu_flash]
    if not cpu_flash.empty:
        q_split, kv_split = cpu_flash_split_sizes(T, T)
        tile = Tile(q_split, kv_split, "known", CPU_FLASH_SOURCE.format(op=CPU_FLASH_OP),
                    cpu_kernel=True)
        out.append((tile, _fastest(cpu_flash)))
    for block_q, group in ok[ok["impl"] == "triton_flash"].groupby("block_q"):
        row = _fastest(group)
        block_k = int(block_q) if pd.isna(row["block_k"]) else int(row["block_k"])
        out.append((Tile(int(block_q), block_k, "known",
                         TRITON_SOURCE.format(q=int(block_q), k=block_k)), row))
    return out


def fused_kernels(rows: pd.DataFrame) -> tuple[list[pd.Series], str | None]:
    """(the fastest ok row of each fused SDPA kernel that ran at one point, in name order;
    the name of the fastest of them, None when none ran)."""
    fused = rows[rows["fused_sdpa"].fillna(False).astype(bool) & (rows["status"] == "ok")]
    kernels = [_fastest(group) for _, group in fused.groupby("impl", sort=True)]
    fastest = _fastest(fused)
    return kernels, None if fastest is None else str(fastest["impl"])


def naive_flops(T: int, d: int) -> int:
    """FLOPs naive attention computes per head and sequence, whatever the mask: both
    products over every one of the T x T scores (2·T²·d each), as ``naive_attention``
    computes them all and then masks (prefill's ``flops`` column halves a causal row's:
    the work a causal kernel needs, not what naive attention does)."""
    return 4 * T * T * d


def roofline(naive: pd.Series | None, T: int, d: int, causal: bool, dtype: str,
             ceilings: dict | None) -> tuple[float | None, float | None]:
    """(naive attention's FLOPs per byte of the model's traffic, per head and sequence,
    where it ran; the machine's balance: matmul ceiling over copy ceiling in this dtype,
    FLOP/B); None where unknown."""
    size = BYTES_PER_ELEMENT.get(dtype)
    intensity = None if size is None or naive is None else (
        naive_flops(T, d) / (naive_hbm_elements(T, d, causal) * size))
    ceilings = ceilings or {}
    matmul, copy = (ceilings.get("matmul_gflops") or {}).get(dtype), ceilings.get("copy_gbs")
    balance = matmul / copy if matmul and copy else None
    return intensity, balance


def point_rows(rows: pd.DataFrame, T: int, d: int, causal: bool, dtype: str,
               params: Params, device: str, ceilings: dict | None = None) -> list[dict]:
    """The traffic rows of one (T, d, causal, dtype) point: each fused kernel that ran at
    the assumed tile (one row without a kernel where none ran), the fastest marked, then
    each kernel of known tile at its own."""
    naive = _fastest(rows[rows["impl"] == "naive"])
    b = params.block_q_model
    assumed = Tile(b, b, "assumed", f"assumed: B_q = B_k = {b} (traffic.block_q_model)")
    kernels, fastest = fused_kernels(rows)
    point = (T, d, causal, dtype, device, fastest,
             roofline(naive, T, d, causal, dtype, ceilings))
    out = [point_row(naive, fused, assumed, *point) for fused in kernels or [None]]
    for tile, fused in known_tiles(rows, T):
        out.append(point_row(naive, fused, tile, *point))
    return out


def point_row(naive: pd.Series | None, fused: pd.Series | None, tile: Tile, T: int, d: int,
              causal: bool, dtype: str, device: str, fastest: str | None = None,
              roof: tuple[float | None, float | None] = (None, None)) -> dict:
    """One traffic row: the model at ``tile`` beside the measured naive/fused ratio;
    ``fastest`` names the point's fastest fused kernel (None: none ran, and this row,
    without one, stands for the point)."""
    naive_ms = None if naive is None else float(naive["median_ms"])
    fused_ms = None if fused is None else float(fused["median_ms"])
    measured, low, high = _naive_over(fused)
    if tile.kind == "assumed":  # the CPU kernel's splits beside the assumed tile
        q_split, kv_split, why = (*cpu_flash_split_sizes(T, T), None) if device == "cpu" \
            else (None, None, "PyTorch's CUDA kernels do not report their tile sizes")
    else:
        q_split, kv_split, why = (tile.block_q, tile.block_k, None) if tile.cpu_kernel \
            else (None, None, None)
    implied = None if measured is None else implied_block_q(measured, T, d, causal=causal)
    limit = None if measured is None else implied_block_q(measured, None, d, causal=causal)
    problem = None
    if measured is None:
        problem = "no measured ratio: " + ("naive did not run" if naive_ms is None
                                           else "no fused SDPA backend ran")
    elif not math.isfinite(implied):
        implied, problem = None, ("the measured ratio is at or above the model's limit at "
                                  "this T for any tile: no finite B_q implies it")
    return {"T": T, "d": d, "causal": causal, "dtype": dtype, "tile": tile.kind,
            "block_q_model": tile.block_q,
            "model_ratio": traffic_ratio(T, d, tile.block_q, tile.block_k, causal=causal),
            "naive_ms": naive_ms, "fused_ms": fused_ms,
            "fused_impl": None if fused is None else str(fused["impl"]),
            "fastest_fused": fused is None if fastest is None
            else fused is not None and str(fused["impl"]) == fastest,
            "measured_ratio": measured, "measured_ratio_ci_low": low,
            "measured_ratio_ci_high": high, "implied_block_q": implied,
            "implied_block_q_limit": limit,
            "cpu_kernel_q_split": q_split, "cpu_kernel_kv_split": kv_split,
            "naive_intensity": roof[0], "machine_balance": roof[1],
            "note": "; ".join(filter(None, (tile.source, why, problem)))}


def model_row(T: int, d: int, causal: bool, params: Params) -> dict:
    """The model's prediction at a length prefill did not measure: nothing measured beside it."""
    return {"T": T, "d": d, "causal": causal, "dtype": None, "tile": "assumed",
            "block_q_model": params.block_q_model,
            "model_ratio": traffic_ratio(T, d, params.block_q_model, causal=causal),
            "fastest_fused": True,  # the point's one row, as where no fused kernel ran
            "note": "model only: prefill did not measure this length here"}


TIMES = ("median_ms", "ratio", "ratio_ci_low", "ratio_ci_high")


def run(params: Params, ctx) -> list[dict]:
    table = view(ctx.inputs["series"], "prefill")  # the series' pooled points
    bad = [c for c in TIMES if c in table.nonfinite and table.nonfinite[c].any()]
    if bad:  # a time is never computed infinite: the input is damaged, not a result
        raise ValueError(f"prefill has NaN or infinite {', '.join(bad)}; a time or a paired "
                         "ratio cannot be, so no traffic ratio is computed from it")
    prefill = table.frame
    ceilings = (ctx.inputs.get("probe") or {}).get("ceilings")  # for the roofline columns
    rows = [row for (T, d, causal, dtype), group in prefill.groupby(["T", "d", "causal", "dtype"])
            for row in point_rows(group, int(T), int(d), bool(causal), str(dtype), params,
                                  ctx.device, ceilings)]
    measured = {(row["T"], row["d"]) for row in rows}
    rows += [model_row(T, d, causal, params)
             for T in params.model_lengths for d in sorted({int(x) for x in prefill["d"]})
             for causal in (False, True) if (T, d) not in measured]
    return rows
