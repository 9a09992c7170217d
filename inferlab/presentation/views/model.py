"""The model stage on the page ("The chapter's arithmetic"): its rows per key."""

from __future__ import annotations

from markupsafe import Markup

from inferlab.presentation import sections

SECTION = {"id": "model", "title": "The chapter's arithmetic", "caption": Markup(
    "The chapter's counts and estimates, recomputed by the model stage: from the chapter's own\n"
    "premises (its GPU's numbers), from operations counted here, or from what this machine's\n"
    "probe measured; the source column says which. Claims of kind “model” and “arithmetic” are\n"
    "judged on these rows.")}
COLUMNS = {
    "quantity": "quantity", "dtype": "dtype", "value": "value", "unit": "unit",
    "source": "source", "inputs": "computed from", "status": "status"}
FIGURE = "traffic"  # the model's quantities are drawn in the traffic model's figure
# A quantity's value in words, its unit first (a claim's value has no unit of its own)
MODEL_WORDS = {
    "ops_per_block_pair": "operations per block pair", "launches": "launches",
    "launch_time_s": "s of launches",
    "kv_traffic_ratio_half_tile": "× as much K and V traffic at half the query tile",
    "decode_cache_mib": "MiB of cache", "decode_floor_us": "µs to read the cache (the decode "
    "floor)", "decode_intensity": "FLOP per byte of cache read (a decode step)",
    "decode_intensity_over_balance": "× the machine's balance (a decode step's FLOP per "
    "byte over matmul rate ÷ copy bandwidth)",
    "flops_tiled_over_naive": "× naive attention's FLOPs (tiled's count)",
    "naive_score_round_trips_full": "round trips over the score matrix (full mask)",
    "naive_score_round_trips_causal": "round trips over the score matrix (causal mask)",
    "splitkv_ops_per_call": "operations per split-KV call",
    "fma_two_kernels_over_fused": "× the fused multiply-add's time (two kernels ÷ one)"}


def quantity_words(result: dict) -> str:
    """What a model claim's value is: its row's quantity in words."""
    quantity = next((r.get("quantity") for r in result.get("rows") or []), None)
    return MODEL_WORDS.get(quantity, (quantity or "").replace("_", " "))


def tables(page: sections.Page) -> list[dict]:
    """Each key's rows, collapsed (the claims matrix gives the values its claims judge)."""
    return [page.raw("model", COLUMNS)]
