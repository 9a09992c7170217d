"""What the config schema cannot say: a config's values checked against one another and
against what a stage does with them, each refused by name before any stage runs
(``config.validate_config`` calls ``check_values`` after the schema)."""

from __future__ import annotations

import math
from typing import Any

DEVICE_BLOCKS = ("cpu", "cuda")


def check_values(raw: dict) -> None:
    """Every check of this module on a config the schema accepted."""
    _check_finite(raw, "")
    _check_sizes(raw)
    _check_orders(raw)


def _check_orders(raw: dict) -> None:
    """Keys that bound one another, each refused by name before any stage runs (R8-21: a
    matmul_min_n above matmul_max_n timed min_n, whatever memory max_n bounds; min_rounds
    above max_rounds and a gqa_groups that does not divide the map's heads failed mid-run)."""
    timing = raw.get("timing") or {}
    pairs = [("timing", timing, "min_rounds", "max_rounds")]
    probe = raw.get("probe") or {}
    pairs += [(f"probe.{d}", probe[d], "matmul_min_n", "matmul_max_n")
              for d in DEVICE_BLOCKS if isinstance(probe.get(d), dict)]
    for where, block, low, high in pairs:
        if isinstance(block.get(low), int) and isinstance(block.get(high), int) \
                and block[low] > block[high]:
            raise ValueError(f"invalid config: {where}.{low}={block[low]} is above "
                             f"{where}.{high}={block[high]}; {low} must be at most {high}")
    grid = probe.get("map") or {}
    groups, heads = grid.get("gqa_groups"), grid.get("heads")
    if isinstance(groups, int) and isinstance(heads, int) and groups and heads % groups:
        raise ValueError(f"invalid config: probe.map.gqa_groups={groups} does not divide "
                         f"probe.map.heads={heads} (grouped key/value heads)")


def _check_finite(value: Any, where: str) -> None:
    """A NaN passes every bound of JSON Schema (each comparison is false), so ``.nan`` ran a
    whole timing stage and failed at its provenance (R8-14): refused here, naming the key."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"invalid config: {where or 'the config'} is {value!r}; give a "
                         "finite number")
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for k, v in items:
        _check_finite(v, f"{where}.{k}" if where and isinstance(k, str) else
                      f"{where}[{k}]" if where else str(k))


def _check_sizes(raw: dict) -> None:
    """One entry per dtype and length in a prefill ``sizes`` list: the stage keys its
    results by them, so a second entry of the same point (another causal list, a duplicate)
    replaced the first's rows, causal ones lost and full ones written twice (R8-15)."""
    prefill = raw.get("prefill") or {}
    for name, block in [("prefill", prefill)] + [(f"prefill.{d}", prefill.get(d) or {})
                                                 for d in DEVICE_BLOCKS]:
        seen: dict = {}
        for i, entry in enumerate(block.get("sizes") or []):
            for T in entry.get("T") or []:
                point = (entry.get("dtype"), T)
                if point in seen:
                    raise ValueError(
                        f"invalid config: {name}.sizes[{seen[point]}] and [{i}] both hold "
                        f"{point[0]} T={T}: one entry per dtype and length (list both masks "
                        "in its causal:)")
                seen[point] = i
