"""The model stage's arithmetic rows (inferlab.stages.model), on the traffic model alone:
the rows whose value follows from counting, checked against the counting itself."""

from __future__ import annotations

import pytest

from inferlab.algorithms.traffic import naive_hbm_elements, tiled_hbm_elements
from inferlab.evidence import artifacts
from inferlab.measurement.measure import Ratio
from inferlab.stages import model

PARAMS = model.Params(T=8192, block=128, d=64, heads=12, cache_len=16384,
                      cache_dtype="float16", launch_us=40, decode_gbs=50,
                      sustainable_factor=6, dtypes=("float32",))


class Ctx:
    """As much of a stage's context as the model stage reads."""
    device, seed, threads = "cpu", 0, 1
    inputs = {"probe": {"ceilings": {}}}


def _kv_elements(T: int, d: int, block_q: int, block_k: int, causal: bool) -> int:
    """K and V elements a tiled kernel reads (its traffic less Q read and O written)."""
    return tiled_hbm_elements(T, d, block_q, block_k, causal=causal) - 2 * T * d


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("T", "block_q", "block_k"), [(8192, 64, 128), (2048, 32, 64),
                                                       (4096, 32, 256), (1024, 16, 128)])
def test_doubling_the_query_tile_alone_halves_the_kv_traffic(T, block_q, block_k, causal):
    """"Doubling B_q halves the K and V traffic", exactly, with the key tile (a multiple of
    the doubled query tile) held, both masks."""
    assert _kv_elements(T, 64, block_q, block_k, causal) == \
        2 * _kv_elements(T, 64, 2 * block_q, block_k, causal)


def test_the_model_row_doubles_the_query_tile_alone(monkeypatch):
    """C13-45 reads this row: B_q = 64 against B_q = 128 with the key tile of 128 in both
    (halving the key tile too gave 1.98, not 2)."""
    for slow in ("ops_per_block_pair", "per_op_seconds", "flops_ratio"):
        monkeypatch.setattr(model, slow, lambda *args: 1.0)
    monkeypatch.setattr(model, "_added_rows", lambda params, ctx: [])
    rows = {r["quantity"]: r for r in model.run(PARAMS, Ctx)}
    row = rows["kv_traffic_ratio_half_tile"]
    assert row["value"] == 2.0
    assert "B_k=128" in row["inputs"]


def test_split_kv_launches_as_many_operations_at_one_split_as_at_sixty_four():
    """Why C13-26 and C13-58 are judged: the chapter's reason, launch overhead, carries to
    this splitkv_decode, whose operation count does not vary with the split count."""
    one, sixty_four = model.splitkv_ops(PARAMS, Ctx)
    assert one == sixty_four > 1
    assert model.SPLITS == (1, 64)


def test_the_model_stage_writes_the_rows_the_new_claims_read(monkeypatch):
    """Q13-12, Q13-14, C13-53 and C13-61 read these rows; they validate against the model
    schema, and the counts come from the traffic model and the profiler."""
    monkeypatch.setattr(model, "fma_ratio", lambda params, ctx: Ratio("fused", 1.5, 1.4, 1.6))
    params = model.Params(T=256, block=64, d=16, heads=2, cache_len=1024,
                          cache_dtype="float16", launch_us=40, decode_gbs=50,
                          sustainable_factor=6, dtypes=("float32", "bfloat16"))
    rows = {(r["quantity"], r["dtype"]): r for r in model._added_rows(params, Ctx)}
    artifacts.encode("model", list(rows.values()))  # the contract's columns and enums
    full = rows[("naive_score_round_trips_full", None)]["value"]
    causal = rows[("naive_score_round_trips_causal", None)]["value"]
    assert full == (naive_hbm_elements(256, 16) - 4 * 256 * 16) / (2 * 256 * 256)
    assert causal > full  # the causal mask adds a pass over the score matrix
    ops = rows[("splitkv_ops_per_call", None)]
    assert ops["value"] >= 1 and "at 1 splits" in ops["inputs"] and "at 64 splits" in \
        ops["inputs"]
    assert rows[("decode_intensity", "float32")]["value"] == \
        rows[("decode_intensity", "bfloat16")]["value"] / 2  # bytes per element halve
    fma = rows[("fma_two_kernels_over_fused", None)]
    assert (fma["value"], fma["ci_low"], fma["ci_high"]) == (1.5, 1.4, 1.6)
