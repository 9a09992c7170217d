"""manuscript -> manuscript.json: the values of the chapter's four tables and every number
it cites, with their references, from this key's artifacts.

Values, enums and references only (schemas/manuscript.schema.json); the runner writes the
files rendered from it (``derived_files``) into results/{key}/manuscript/ after registering
the artifact.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from inferlab.algorithms.traffic import naive_hbm_elements, tiled_hbm_elements
from inferlab.core import layout
from inferlab.core.pipeline import STAGES
from inferlab.evidence.loading import device_of
from inferlab.evidence.register import Register
from inferlab.judging.causes import primary
from inferlab.judging.claims import load
from inferlab.judging.rule import plain
from inferlab.judging.selection import failed_statuses
from inferlab.judging.series_view import judged
from inferlab.presentation.manuscript import derived_files, file_hashes
from inferlab.presentation.manuscript_check import figures as printed_figures

__all__ = ["Params", "run", "derived_files"]


@dataclass(frozen=True)
class Params:
    """The traffic section: the model's query tile and the chapter's lengths."""

    block_q: int
    lengths: tuple[int, ...]

    @classmethod
    def from_config(cls, cfg: dict) -> Params:
        return cls(int(cfg["traffic"]["block_q_model"]),
                   tuple(int(t) for t in cfg["traffic"]["model_lengths"]))


def inputs(ctx) -> dict:
    """The tables the stage reads: traffic, prefill and decode as the series pools them, the
    probe's lists and claims.json."""
    data = {name: e.data for name, e in judged(ctx.evidence).items()}
    return {"traffic": data["traffic"].frame, "prefill": data["prefill"].frame,
            "decode": data["decode"].frame, "probe": data["probe"], "claims": data["claims"]}


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["status"] == "ok").fillna(False)]


def missing(rows: pd.DataFrame) -> dict:
    """Why rows give no value: the cause of those that are not ok, else not in the grid."""
    failed = rows[(rows["status"] != "ok").fillna(False)] if "status" in rows else rows.iloc[:0]
    if failed.empty:
        return {"kind": "not_in_grid"}
    statuses = failed_statuses(failed)
    return {"kind": primary(s["kind"] for s in statuses), "statuses": statuses}


def traffic_values(traffic: pd.DataFrame, prefill: pd.DataFrame, dtype: str, block_q: int,
                   lengths) -> list[dict]:
    """(a) Per length: elements moved, direct and block-wise (causal, the assumed B_q),
    their ratio, and the measured naive / fused time ratio in ``dtype``."""
    rows = traffic[(traffic["causal"] == True) & (traffic["tile"] == "assumed")  # noqa: E712
                   & (traffic["block_q_model"] == block_q) & traffic["T"].isin(lengths)]
    if "fastest_fused" in rows:  # one assumed row per fused kernel: the fastest's
        rows = rows[rows["fastest_fused"].fillna(True).astype(bool)]
    out = []
    for T, group in rows.groupby("T", sort=True):
        T, d = int(T), int(group.iloc[0]["d"])
        here = group[(group["dtype"] == dtype) & group["measured_ratio"].notna()]
        row = {"T": T, "d": d, "naive_elements": naive_hbm_elements(T, d, causal=True),
               "tiled_elements": tiled_hbm_elements(T, d, block_q, causal=True),
               "model_ratio": float(group.iloc[0]["model_ratio"])}
        if len(here):
            m = here.iloc[0]
            row["measured"] = {k: plain(m[c]) for k, c in (
                ("value", "measured_ratio"), ("ci_low", "measured_ratio_ci_low"),
                ("ci_high", "measured_ratio_ci_high"))}
        else:
            at = prefill[(prefill["T"] == T) & (prefill["dtype"] == dtype)
                         & (prefill["causal"] == True)]  # noqa: E712
            row["missing"] = missing(at)
        out.append(row)
    return out


def _time_memory(rows: pd.DataFrame, at: pd.DataFrame) -> dict:
    ok = _ok(rows)
    if ok.empty:
        return {"missing": missing(rows if len(rows) else at)}
    best = ok.loc[ok["median_ms"].idxmin()]
    return {"impl": str(best["impl"]), "median_ms": float(best["median_ms"]),
            "peak_extra_bytes": plain(best["peak_extra_bytes"])}


def prefill_values(prefill: pd.DataFrame, dtype: str, block_q: int, lengths) -> list[dict]:
    """(b) Naive, block-wise (plain PyTorch) and the fused kernel at the chapter's lengths,
    causal, in ``dtype``: the fastest row's time and peak extra memory, or why none."""
    here = prefill[(prefill["dtype"] == dtype) & (prefill["causal"] == True)]  # noqa: E712
    out = []
    for T in lengths:
        at = here[here["T"] == T]
        out.append({"T": T, "naive": _time_memory(at[at["impl"] == "naive"], at),
                    "tiled": _time_memory(at[(at["impl"] == "tiled")
                                             & (at["block_q"] == block_q)], at),
                    "fused": _time_memory(at[at["fused_sdpa"] == True], at)})  # noqa: E712
    return out


def backends_values(probe: dict, dtype: str) -> dict:
    """(c) Each SDPA backend at the probe's shape, per mask: ran or not, and PyTorch's own
    reason (external text, kept as it came), its source and the kind of limit."""
    found = [a for a in probe.get("availability", []) if a["dtype"] == dtype]
    shape = found[0] if found else {}
    return {"shape": {k: shape.get(k) for k in ("T", "heads", "d")},
            "rows": [{k: a.get(k) for k in ("backend", "causal", "ran", "reason",
                                            "reason_source", "limit_kind")} for a in found]}


def decode_values(decode: pd.DataFrame, dtype: str) -> list[dict]:
    """(d) Per cache length and batch: the fastest fused SDPA backend's time, split-KV's
    over its split counts, and fused / split-KV (above 1: split-KV is faster)."""
    here = decode[decode["dtype"] == dtype]
    out = []
    for (cache, batch), at in here.groupby(["cache_len", "batch"], sort=True):
        fused = _ok(at[at["fused_sdpa"] == True])  # noqa: E712
        split = _ok(at[at["impl"] == "splitkv"])
        row = {"cache_len": int(cache), "batch": int(batch)}
        if fused.empty or split.empty:
            out.append(row | {"missing": missing(at)})
            continue
        best = fused.loc[fused["median_ms"].idxmin()]
        speed = [1 / r for r in split["ratio"].dropna() if r > 0]
        out.append(row | {
            "fused": {"impl": str(best["impl"]), "median_ms": float(best["median_ms"])},
            "split_ms": [float(split["median_ms"].min()), float(split["median_ms"].max())],
            "splits": [int(v) for v in (split["splits"].min(), split["splits"].max())],
            "fused_over_split": [min(speed), max(speed)] if speed else None})
    return out


def named_numbers(claims_json: dict, figures: dict[str, list], commits: dict) -> list[dict]:
    """One entry per claim of claims.json: its value, interval, unit, verdict, the
    chapter's figures for it and the artifact version and commit it comes from."""
    out = []
    for result in claims_json["claims"]:
        artifact = result.get("artifact") or None
        version = (artifact or {}).get("version")
        out.append({"claim": result["id"], "kind": result["kind"],
                    "verdict": result["verdict"], "value": result.get("value"),
                    "interval": result.get("interval"), "unit": result.get("unit") or "",
                    "figures": figures.get(result["id"], []), "artifact": artifact,
                    "commit": commits.get(((artifact or {}).get("stage"), version))})
    return out


def run(params: Params, ctx) -> dict:
    claims_file = load()
    dtype = claims_file.fp16_stand_in.get(device_of(ctx.evidence["probe"], ctx.key),
                                          "float32")
    data = inputs(ctx)
    # a measured artifact's commit is its register version's, a derived one's its sidecar's
    commits = {(e["stage"], e["version"]): e["provenance"].get("git_commit")
               for e in Register(ctx.root, ctx.key).history()}
    commits |= {(name, None): found.provenance.get("git_commit")
                for name, found in ctx.evidence.items() if not STAGES[name].measured}
    figures = {c.id: [n.token for n in printed_figures(c)] for c in claims_file.claims}
    machine, grid = layout.split_key(ctx.key)
    manuscript = {
        "schema_version": 2, "key": ctx.key, "machine": machine, "grid": grid,
        "dtype": dtype, "block_q": params.block_q, "lengths": list(params.lengths),
        "claims": ctx.evidence["claims"].describe(ctx.root),
        "tables": {"traffic": traffic_values(data["traffic"], data["prefill"], dtype,
                                             params.block_q, params.lengths),
                   "prefill": prefill_values(data["prefill"], dtype, params.block_q,
                                             params.lengths),
                   "backends": backends_values(data["probe"], dtype),
                   "decode": decode_values(data["decode"], dtype)},
        "numbers": named_numbers(data["claims"], figures, commits)}
    return {**manuscript, "files": file_hashes(manuscript)}

