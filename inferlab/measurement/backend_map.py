"""The backend map: which SDPA backend runs, and which refuses and why, across head
dimensions, grouped key/value heads, an explicit mask, dropout and each dtype.

The chapter warns that "other head dimensions, grouped key/value heads and masks can
disable the fast paths" without showing which. The map shows it for the machine at hand:
one case per head dimension, then at the probe's head dimension one per feature (causal,
grouped-query attention, a boolean mask, dropout), each in every dtype, every backend
checked and run (``backends.availability``). Inputs are small: the dispatch rules depend
on shapes, dtypes and flags, not on the length past a few tiles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from inferlab.measurement.backends import availability

MAP_COLUMNS = ("case", "dtype", "causal", "T", "heads", "kv_heads", "d", "mask", "dropout_p",
               "backend", "can_run", "ran", "reason", "reason_source", "limit_kind", "op",
               "error")


@dataclass(frozen=True)
class MapCase:
    """One column of inputs of the map: ``name`` as the report prints it."""

    name: str
    d: int
    kv_heads: int
    causal: bool = False
    mask: bool = False
    dropout_p: float = 0.0


def map_cases(head_dims: tuple[int, ...], d: int, heads: int, gqa_groups: int,
              dropout_p: float) -> list[MapCase]:
    """A case per head dim, then at head dim ``d``: causal, grouped-query attention
    (``heads / gqa_groups`` key/value heads: the config's checks ask that it divides), a
    boolean mask, dropout ``dropout_p``."""
    return [*(MapCase(f"d={hd}", hd, heads) for hd in head_dims),
            MapCase("causal", d, heads, causal=True),
            MapCase(f"gqa {heads}:{heads // gqa_groups}", d, heads // gqa_groups),
            MapCase("bool mask", d, heads, mask=True),
            MapCase(f"dropout {dropout_p:g}", d, heads, dropout_p=dropout_p)]


def _inputs(case: MapCase, heads: int, tokens: int, dtype: torch.dtype, device: str,
            seed: int):
    """Seeded q (1, heads, T, d), k and v (1, kv_heads, T, d), and the SDPA options."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn((1, heads, tokens, case.d), generator=gen)
    k, v = (torch.randn((1, case.kv_heads, tokens, case.d), generator=gen) for _ in "kv")
    q, k, v = (t.to(device=device, dtype=dtype) for t in (q, k, v))
    options = {"dropout_p": case.dropout_p, "enable_gqa": case.kv_heads != heads}
    if case.mask:  # lower-triangular: every query sees at least one key, so no NaN rows
        options["attn_mask"] = torch.ones(tokens, tokens, dtype=torch.bool,
                                          device=device).tril()
    return q, k, v, options


def map_rows(cases: list[MapCase], dtypes: tuple[torch.dtype, ...], heads: int, tokens: int,
             device: str, seed: int,
             progress: Callable[[int, int, str], object] | None = None) -> list[dict]:
    """One row per case x dtype x backend (``MAP_COLUMNS``), the probe.json map."""
    points = [(case, dtype) for case in cases for dtype in dtypes]
    rows = []
    for i, (case, dtype) in enumerate(points, start=1):
        if progress:
            progress(i, len(points), f"backend map {case.name} {str(dtype)[6:]}")
        q, k, v, options = _inputs(case, heads, tokens, dtype, device, seed)
        for status in availability(q, k, v, causal=case.causal, **options):
            row = {**status.as_dict(), "case": case.name, "kv_heads": case.kv_heads,
                   "mask": status.mask, "dropout_p": status.dropout_p}
            rows.append({column: row[column] for column in MAP_COLUMNS})
    return rows


def cell(row: dict) -> str:
    """A map cell: 'ran', 'refused (<limit kind>)', or 'ran (check said no)' where the
    check and the run disagree."""
    if row["ran"]:
        return "ran" if row["can_run"] is not False else "ran (check said no)"
    return f"refused ({row['limit_kind'] or 'unclassified'})"
