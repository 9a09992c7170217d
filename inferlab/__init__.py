"""Inference Lab: exact block-wise attention, its traffic model and the evidence pipeline
behind the chapter "FlashAttention and Optimized Kernels".

The public API is importable from the top level (``inferlab.tiled_attention``);
submodules load on first use so that ``import inferlab`` (and the CLI) stay light.
"""

from __future__ import annotations

import importlib

_EXPORTS: dict[str, str] = {
    # the algorithms (the oracle every fused kernel is checked against)
    "naive_attention": "attention",
    "tiled_attention": "attention",
    "tiled_attention_fast": "attention",
    "TileStats": "attention",
    "Partial": "partials",
    "partial_attention": "partials",
    "merge_partials": "partials",
    "finalize": "partials",
    "splitkv_decode": "partials",
    # the traffic and decode models
    "block_pairs": "traffic",
    "naive_hbm_elements": "traffic",
    "tiled_hbm_elements": "traffic",
    "traffic_ratio": "traffic",
    "implied_block_q": "traffic",
    "decode_cache_bytes": "traffic",
    "decode_floor_time_us": "traffic",
    # which SDPA backend runs here, and why the others do not
    "availability": "backends",
    "BackendStatus": "backends",
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
