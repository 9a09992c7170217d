"""correctness -> correctness.csv: the chapter's exactness sweep, every row against float64.

* ``equivalence``: tiled_attention and tiled_attention_fast for each block shape, dtype,
  causal and score scale, against naive attention in float64 on the *same rounded
  inputs* (so the error is the algorithm's, not the input cast's), beside the error of
  naive attention in the same dtype: the yardstick for "within rounding".
* ``fused``: each fused SDPA kernel that runs here, against the same float64 answer.
* ``no_running_max``: a softmax without the running max, on the same inputs: the
  fraction of outputs that overflow (large scores: queries scaled by 30 or 40).
* ``causal_pairs``: block pairs the causal loop computed (TileStats), and the analytic
  count (traffic.block_pairs, impl "model") at the measured lengths and at a length too
  long to run here.
* ``splitkv``: splitkv_decode for each split count (one query against a cache).
* ``merge_assoc``: |((a.b).c) - (a.(b.c))| for three partials over disjoint key chunks.

A length whose float64 reference does not fit in memory is a row with status ``oom``
(``memory.is_oom``), as prefill writes one, not a crashed stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from inferlab.algorithms.attention import TILED, naive_attention
from inferlab.algorithms.partials import finalize, merge_partials, partial_attention, splitkv_decode
from inferlab.algorithms.traffic import block_pairs
from inferlab.measurement.backends import FUSED_SDPA, sdpa_cases
from inferlab.measurement.memory import is_oom
from inferlab.stages.common import DTYPES, random_qkv, tuples


def max_abs_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out - ref|, computed in float64 (NaN if any element of ``out`` is NaN)."""
    diff = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    return math.nan if diff.isnan().any() else diff.max().item()


@dataclass(frozen=True)
class Params:
    heads: int
    d: int
    lengths: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]   # (block_q, block_k)
    dtypes: tuple[str, ...]
    causal: tuple[bool, ...]
    score_scales: tuple[float, ...]
    splits: tuple[int, ...]
    splitkv_cache_len: int
    pair_model_T: int
    pair_model_blocks: tuple[int, ...]

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        section = {k: tuples(v) for k, v in cfg["correctness"].items()}
        model = section.pop("pair_model")
        return cls(**section, pair_model_T=model["T"], pair_model_blocks=tuple(model["blocks"]))


def _inputs(shape, dtype: str, scale: float, ctx, keys: int | None = None):
    """q, k, v in ``dtype`` (queries scaled) and their exact float64 copies."""
    q, k, v = random_qkv(shape, "float32", ctx.device, ctx.seed, keys=keys)
    low = tuple(t.to(DTYPES[dtype]) for t in (q * scale, k, v))
    return low, tuple(t.to(torch.float64) for t in low)


def equivalence_rows(params: Params, ctx) -> list[dict]:
    points = [(T, dtype, causal, scale) for T in params.lengths for dtype in params.dtypes
              for causal in params.causal for scale in params.score_scales]
    rows = []
    for i, (T, dtype, causal, scale) in enumerate(points, start=1):
        ctx.progress(i, len(points), f"equivalence T={T} {dtype} causal={causal} scale={scale}")
        base = {"check": "equivalence", "T": T, "heads": params.heads, "d": params.d,
                "dtype": dtype, "causal": causal, "score_scale": scale, "status": "ok"}
        try:
            rows += _equivalence_point(params, ctx, base)
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
            rows += [{**base, "impl": impl, "block_q": block_q, "block_k": block_k,
                      "status": "oom"} for impl in TILED for block_q, block_k in params.blocks]
    return rows


def _equivalence_point(params: Params, ctx, base: dict) -> list[dict]:
    """The rows of one (T, dtype, causal, scale) point of ``equivalence_rows``."""
    T, dtype, causal, scale = base["T"], base["dtype"], base["causal"], base["score_scale"]
    (q, k, v), exact = _inputs((1, params.heads, T, params.d), dtype, scale, ctx)
    ref = naive_attention(*exact, causal=causal)
    base = {**base, "naive_same_dtype_err": max_abs_err(naive_attention(q, k, v, causal), ref)}
    rows = []
    for impl, fn in TILED.items():
        for block_q, block_k in params.blocks:
            out, stats = fn(q, k, v, causal, block_q, block_k)
            rows.append({**base, "impl": impl, "block_q": block_q, "block_k": block_k,
                         "max_abs_err": max_abs_err(out, ref),
                         "computed_pairs": stats.computed_pairs,
                         "total_pairs": stats.total_pairs, "pair_fraction": stats.fraction})
    rows += fused_rows(q, k, v, causal, ref, base)
    rows.append(no_running_max_row(q, k, v, causal, ref, base))
    return rows


def fused_rows(q, k, v, causal: bool, ref, base: dict) -> list[dict]:
    """Each fused SDPA kernel that runs here, checked against the block-wise reference's
    float64 answer like the tiled loop is (the chapter: any fused kernel the Lab runs can
    be checked against it)."""
    cases, meta, _ = sdpa_cases(q, k, v, causal, FUSED_SDPA)
    return [{**base, "check": "fused", "impl": label,
             "max_abs_err": max_abs_err(fn(), ref)} for label, fn in cases.items()]


def no_running_max_row(q, k, v, causal: bool, ref, base: dict) -> dict:
    """Attention whose softmax exponentiates the scores without subtracting their maximum
    (exp(s) / sum exp(s)): the fraction of outputs that overflow to inf or NaN, and the
    error. The running max is what keeps the tiled loop clear of this."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        future = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    e = torch.exp(s)
    out = (e / e.sum(dim=-1, keepdim=True)) @ v
    return {**base, "check": "no_running_max", "impl": "naive_without_max",
            "max_abs_err": max_abs_err(out, ref),
            "nonfinite_fraction": (~torch.isfinite(out)).float().mean().item()}


def causal_pair_rows(params: Params, equivalence: list[dict]) -> list[dict]:
    """Counted pairs (one row per length and block shape) and the model's counts."""
    keys = ("T", "heads", "d", "block_q", "block_k", "causal", "computed_pairs",
            "total_pairs", "pair_fraction")
    counted = {(r["T"], r["block_q"], r["block_k"]): {k: r[k] for k in keys}
               for r in equivalence if r["causal"] and r["impl"] == "tiled"
               and r["status"] == "ok"}
    rows = [{"check": "causal_pairs", "impl": "tiled", "status": "ok", **r}
            for r in counted.values()]
    for T in sorted({*params.lengths, params.pair_model_T}):
        for block in params.pair_model_blocks:
            computed, total = block_pairs(T, T, block, block, True)
            rows.append({"check": "causal_pairs", "impl": "model", "T": T, "block_q": block,
                         "block_k": block, "causal": True, "computed_pairs": computed,
                         "total_pairs": total, "pair_fraction": computed / total,
                         "status": "ok"})
    return rows


def splitkv_rows(params: Params, ctx) -> list[dict]:
    rows = []
    cache_len = params.splitkv_cache_len
    for i, dtype in enumerate(params.dtypes, start=1):
        ctx.progress(i, len(params.dtypes), f"split-KV and merge, {cache_len} keys, {dtype}")
        base = {"T": cache_len, "heads": params.heads, "d": params.d, "dtype": dtype,
                "causal": False, "score_scale": 1.0, "status": "ok"}
        try:
            rows += _splitkv_point(params, ctx, base)
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
            rows += [{**base, "check": "splitkv", "impl": "splitkv", "splits": splits,
                      "status": "oom"} for splits in params.splits if splits <= cache_len]
            rows.append({**base, "check": "merge_assoc", "impl": "merge_partials",
                         "splits": 3, "status": "oom"})
    return rows


def _splitkv_point(params: Params, ctx, base: dict) -> list[dict]:
    """The split-KV and merge rows of one dtype of ``splitkv_rows``."""
    (q, k, v), exact = _inputs((1, params.heads, 1, params.d), base["dtype"], 1.0, ctx,
                               keys=base["T"])
    ref = naive_attention(*exact)
    base = {**base, "naive_same_dtype_err": max_abs_err(naive_attention(q, k, v), ref)}
    rows = [{**base, "check": "splitkv", "impl": "splitkv", "splits": splits,
             "max_abs_err": max_abs_err(splitkv_decode(q, k, v, splits), ref)}
            for splits in params.splits if splits <= base["T"]]
    rows.append({**base, "check": "merge_assoc", "impl": "merge_partials", "splits": 3,
                 "max_abs_err": merge_associativity_err(q, k, v)})
    return rows


def merge_associativity_err(q, k, v) -> float:
    """max |finalize((a.b).c) - finalize(a.(b.c))| over three disjoint key chunks."""
    a, b, c = (partial_attention(q, kc, vc) for kc, vc in
               zip(k.tensor_split(3, dim=2), v.tensor_split(3, dim=2), strict=True))
    left = finalize(merge_partials(merge_partials(a, b), c))
    right = finalize(merge_partials(a, merge_partials(b, c)))
    return max_abs_err(left, right)


def run(params: Params, ctx) -> list[dict]:
    equivalence = equivalence_rows(params, ctx)
    return equivalence + causal_pair_rows(params, equivalence) + splitkv_rows(params, ctx)
