"""Inference Lab: exact block-wise attention, its traffic model and the evidence pipeline
behind the chapter "FlashAttention and Optimized Kernels".

The public API loads from the top level on first use (``inferlab.tiled_attention``), so
that ``import inferlab`` and the CLI stay light.
"""

from __future__ import annotations

import importlib

_EXPORTS: dict[str, str] = {
    # the algorithms (the oracle every fused kernel is checked against)
    "naive_attention": "algorithms.attention",
    "tiled_attention": "algorithms.attention",
    "tiled_attention_fast": "algorithms.attention",
    "TileStats": "algorithms.attention",
    "Partial": "algorithms.partials",
    "partial_attention": "algorithms.partials",
    "merge_partials": "algorithms.partials",
    "finalize": "algorithms.partials",
    "splitkv_decode": "algorithms.partials",
    # the traffic and decode models
    "block_pairs": "algorithms.traffic",
    "naive_hbm_elements": "algorithms.traffic",
    "tiled_hbm_elements": "algorithms.traffic",
    "traffic_ratio": "algorithms.traffic",
    "implied_block_q": "algorithms.traffic",
    "decode_cache_bytes": "algorithms.traffic",
    "decode_floor_time_us": "algorithms.traffic",
    # which SDPA backend runs here, and why the others do not
    "availability": "measurement.backends",
    "BackendStatus": "measurement.backends",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'inferlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"inferlab.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
