"""The stage functions, in process, on tiny random sizes: their seeded inputs, their rows,
their budgets; older artifacts they still read."""

from __future__ import annotations

import random
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from inferlab.algorithms.traffic import block_pairs, implied_block_q, traffic_ratio
from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.register import Evidence
from inferlab.stages import common, correctness, decode, prefill, traffic
from inferlab.workflow.config import effective_config, load_config
from inferlab.workflow.runner import StageContext
from tests.series_helper import series_table
from tests.test_traffic import _prefill_point, _timed

SEED = 20240611


# --------------------------------------------------------------------------- context


def _ctx(tmp_path: Path, stage: str, lines: list | None = None, **inputs) -> StageContext:
    """A context whose upstream artifacts are ``inputs`` (stage -> data, as read)."""
    sink = lines.append if lines is not None else (lambda line: None)
    evidence = {name: Evidence(name, tmp_path / name, data, None, None)
                for name, data in inputs.items()}
    return StageContext(stage, tmp_path, "test-stage", "cpu", 1, SEED, evidence, sink)


def _probe(rng: random.Random) -> dict:
    return {"ceilings": {"copy_gbs": rng.uniform(5, 50),
                         "matmul_gflops": {"float32": rng.uniform(20, 200)}}}


def _table(stage: str, rows: list[dict]) -> pd.DataFrame:
    """Rows through the real writer and reader: what the artifact would hold."""
    return artifacts.decode(stage, artifacts.encode(stage, rows)).frame


def test_progress_line_format(tmp_path):
    lines = []
    _ctx(tmp_path, "prefill", lines).progress(7, 24, "naive T=2048 float32 causal")
    assert lines == ["[prefill] 7/24 naive T=2048 float32 causal"]


# --------------------------------------------------------------------------- inputs


def _as_committed(shape, dtype, device, seed, keys=None):
    """random_qkv as it was when the committed CPU evidence was made (on the CPU, float32,
    one seeded CPU generator, then cast)."""
    B, H, T, D = shape
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn((B, H, T, D), generator=gen)
    k, v = (torch.randn((B, H, T if keys is None else keys, D), generator=gen) for _ in "kv")
    return tuple(t.to(device=device, dtype=common.DTYPES[dtype]) for t in (q, k, v))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(("shape", "keys", "seed"), [
    ((1, 12, 1024, 64), None, 0),   # prefill's first point
    ((1, 3, 37, 17), None, 5),      # awkward sizes
    ((4, 12, 1, 64), 4096, 0),      # a decode point
])
def test_cpu_inputs_are_byte_for_byte_those_of_the_committed_evidence(shape, keys, seed, dtype):
    new = common.random_qkv(shape, dtype, "cpu", seed, keys=keys)
    old = _as_committed(shape, dtype, "cpu", seed, keys=keys)
    for a, b in zip(new, old, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def test_inputs_are_drawn_on_their_device_with_its_own_generator(monkeypatch):
    # Decode's 805 M samples at 65,536 keys and batch 8 took ~12 s per draw on the CPU,
    # repeated in every worker, before a transfer: on a GPU they are drawn there.
    seen = {"generators": [], "draws": []}
    real_generator, real_randn = torch.Generator, torch.randn

    def generator(device="cpu"):
        seen["generators"].append(str(device))
        return real_generator(device="cpu")  # a stand-in: this machine has no GPU

    def randn(size, generator=None, device=None, **kwargs):
        seen["draws"].append(str(device))
        return real_randn(size, generator=generator, **kwargs)

    monkeypatch.setattr(common.torch, "Generator", generator)
    monkeypatch.setattr(common.torch, "randn", randn)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self)
    common.random_qkv((8, 12, 1, 64), "float16", "cuda", 0, keys=64)
    assert seen == {"generators": ["cuda"], "draws": ["cuda"] * 3}


# --------------------------------------------------------------------------- correctness


MODULES = {"correctness": correctness, "prefill": prefill, "decode": decode,
           "traffic": traffic}


def _params(stage: str, overrides: list[str]):
    raw = load_config(overrides=["device=cpu", f"seed={SEED}", *overrides])
    return MODULES[stage].Params.from_config(effective_config(raw, stage, "cpu"))


@pytest.fixture(scope="module")
def correctness_rows(tmp_path_factory):
    params = _params("correctness", [
        "correctness.d=8", "correctness.blocks=[[16, 16], [32, 8]]",
        "correctness.splits=[1, 3, 7]", "correctness.pair_model={T: 4096, blocks: [128]}",
        "correctness.score_scales=[1, 40]",  # plain scores, and large ones
        "correctness.cpu={heads: 2, lengths: [40], dtypes: [float32, bfloat16], "
        "splitkv_cache_len: 50}"])
    rows = correctness.run(params, _ctx(tmp_path_factory.mktemp("c"), "correctness"))
    return params, _table("correctness", rows)


def test_tiled_error_is_within_rounding(correctness_rows):
    _, rows = correctness_rows
    eq = rows[rows["check"] == "equivalence"]
    # the flash-attention test rule: at most twice the plain same-dtype error (+ fp32 eps)
    assert (eq["max_abs_err"] <= 2 * eq["naive_same_dtype_err"] + 1e-5).all()
    assert set(eq["impl"]) == {"tiled", "tiled_fast"}


def test_causal_pairs_match_the_model(correctness_rows):
    params, rows = correctness_rows
    pairs = rows[rows["check"] == "causal_pairs"]
    for _, row in pairs.iterrows():
        computed, total = block_pairs(row["T"], row["T"], row["block_q"], row["block_k"], True)
        assert (row["computed_pairs"], row["total_pairs"]) == (computed, total)
    assert params.pair_model_T in set(pairs.loc[pairs["impl"] == "model", "T"])


def test_splitkv_and_merge_rows(correctness_rows):
    params, rows = correctness_rows
    split = rows[rows["check"] == "splitkv"]
    assert sorted(set(split["splits"])) == sorted(params.splits)
    assert (split["max_abs_err"] <= 2 * split["naive_same_dtype_err"] + 1e-5).all()
    merge = rows[rows["check"] == "merge_assoc"]
    assert len(merge) == len(params.dtypes) and (merge["max_abs_err"] < 1e-5).all()


# --------------------------------------------------------------------------- prefill


TIMING = ("timing={warmup: 1, min_rounds: 6, max_rounds: 6, target: 1.0, time_cap_s: 1, "
          "noisy_threshold: 1.0, min_run_ms: 1, workers: 2, worker_rounds: 3, point_cap_s: 4}")
PREFILL = [TIMING, "prefill.d=8", "prefill.blocks=[16]",
           "prefill.cpu={heads: 2, sizes: [{dtype: float32, T: [48]}, "
           "{dtype: bfloat16, T: [32, 64]}], backends: [flash, math, cudnn]}"]


@pytest.fixture(scope="module")
def prefill_run(tmp_path_factory):
    """float32 at 48 tokens timed; bfloat16, which the probe found on a slow path, not."""
    probe = _probe(random.Random(SEED))
    probe["ceilings"]["matmul_slow_path"] = {"float32": False, "bfloat16": True}
    params = _params("prefill", PREFILL)
    rows = _table("prefill", prefill.run(params, _ctx(tmp_path_factory.mktemp("p"), "prefill",
                                                      probe=probe)))
    by_dtype = dict(iter(rows.groupby("dtype")))
    return params, probe["ceilings"], by_dtype["float32"], by_dtype["bfloat16"]


def test_prefill_rows_and_rates(prefill_run):
    params, ceilings, rows, _ = prefill_run
    # causal x (naive, tiled, tiled_fast, 3 backends, our Triton kernel)
    assert len(rows) == 2 * (1 + 2 + 3 + 1)
    ok = rows[rows["status"] == "ok"]
    flops = 4 * params.heads * 48 * 48 * params.d / ok["causal"].map({True: 2, False: 1})
    assert (ok["flops"] == flops).all()
    rate = ok["flops"] / (ok["median_ms"] * 1e-3) / 1e9
    assert (ok["achieved_gflops"] - rate).abs().max() < 1e-6 * rate.max()
    frac = ok["achieved_gflops"] / ceilings["matmul_gflops"]["float32"]
    assert (ok["frac_matmul_ceiling"] - frac).abs().max() < 1e-9 * frac.max()
    bad = ok[(ok["peak_extra_bytes"] <= 0) | ok["kernel"].isna()]
    assert bad.empty, bad[["impl", "causal", "peak_extra_bytes", "kernel"]].to_string()


@pytest.mark.parametrize(("impl", "causes"), [
    ("sdpa_cudnn", {"no_cuda_build"}),  # a CPU build of torch has no CUDA: the tests' is one
    ("triton_flash", {"no_cuda_device", "no_triton"})])
def test_a_cuda_only_kernel_is_not_measured_on_a_cpu_and_says_why(prefill_run, impl, causes):
    """The cause says why, as data; no words of ours in the artifact; none of our kernel's
    configurations chosen."""
    _, _, rows, _ = prefill_run
    ours = rows[rows["impl"] == impl]
    assert sorted(ours["causal"]) == [False, True] and ours["median_ms"].isna().all()
    assert ours["block_q"].isna().all() and ours["kernel"].isna().all()
    assert (ours["status"] == "unavailable").all() and ours["reason"].isna().all()
    assert set(ours["cause"]) <= causes


def test_a_prefill_rows_reason_is_only_ever_external_words(prefill_run):
    """Evidence holds no prose of ours: ``reason`` is set only where the cause is one whose
    words are PyTorch's, Triton's or an exception's."""
    _, _, rows, _ = prefill_run
    ours = rows[rows["reason"].notna() & ~rows["cause"].isin(
        ["backend_refused", "triton_driver", "exception"])]
    assert ours.empty, ours[["impl", "cause", "reason"]].to_string()


def test_prefill_skips_a_slow_path_dtype_with_rows_saying_why(prefill_run):
    """The cause as data (the report says it in words, with the probe's two rates)."""
    _, _, fp32, bf16 = prefill_run
    assert set(bf16["T"]) == {32, 64} and bf16["median_ms"].isna().all()
    assert (bf16["status"] == "dropped").all() and (bf16["cause"] == "slow_path").all()
    assert (fp32["status"] == "ok").any() and fp32["median_ms"].notna().any()


def test_only_fused_sdpa_backends_are_marked_fused(prefill_run):
    _, _, rows, _ = prefill_run
    fused = set(rows.loc[rows["fused_sdpa"], "impl"])
    assert fused == {"sdpa_flash", "sdpa_cudnn"}  # the ones asked for that are fused kernels
    assert not rows.loc[rows["impl"].isin(["naive", "tiled", "sdpa_math"]), "fused_sdpa"].any()


def test_memory_cap_gives_oom_rows(tmp_path):
    probe = _probe(random.Random(SEED + 1))
    # naive materialises 2 x 4096 x 4096 fp32 scores = 128 MiB, far above a 1 MiB cap. The
    # cap limits address space, so the allocation must be above glibc's largest mmap
    # threshold (32 MiB): a smaller one can be served from heap memory freed by earlier tests.
    params = _params("prefill", [
        TIMING.replace("workers: 2", "workers: 1"),
        "prefill.d=8", "prefill.implementations=[naive]", "prefill.memory_cap_gib=0.001",
        "prefill.causal=[false]",
        "prefill.cpu={heads: 2, sizes: [{dtype: float32, T: [4096]}], backends: [flash]}"])
    rows = prefill.run(params, _ctx(tmp_path, "prefill", probe=probe))
    assert [r["status"] for r in rows] == ["oom"]


# --------------------------------------------------------------------------- decode


GROUPED = ("decode.cpu={heads: 2, cache_lens: [300], batches: [1, 3], dtypes: [float32], "
           "workers: 1, worker_rounds: 3, min_run_ms: 1, "
           "grouped: [{heads: 6, kv_heads: 2, cache_lens: [96], batches: [1, 2]}]}")


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory):
    """The chapter's layout at 300 keys, then a grouped one (6 query heads over 2) at 96."""
    probe = _probe(random.Random(SEED + 2))
    params = _params("decode", [TIMING, "decode.d=8", "decode.splits=[1, 5, 1000]",
                                "decode.backends=[flash, math]", GROUPED])
    rows = decode.run(params, _ctx(tmp_path_factory.mktemp("d"), "decode", probe=probe))
    return params, probe["ceilings"], _table("decode", rows)


def test_decode_rows_bandwidth_floor_and_pairing(decode_run):
    _, ceilings, rows = decode_run
    assert set(rows["splits"].dropna()) == {1, 5}  # 1000 splits > 300 or 96 keys: skipped
    # the cache holds the key/value heads only: 2 x batch x kv heads x keys x d 8 x fp32
    cache_bytes = 2 * rows["batch"] * rows["kv_heads"] * rows["cache_len"] * 8 * 4
    assert (rows["cache_bytes"] == cache_bytes).all()
    floor_ms = cache_bytes / (ceilings["copy_gbs"] * 1e9) * 1e3
    assert ((rows["floor_ms"] - floor_ms).abs() < 1e-9 * floor_ms).all()
    ok = rows[rows["status"] == "ok"]
    gbs = ok["cache_bytes"] / (ok["median_ms"] * 1e-3) / 1e9
    assert ((ok["achieved_gbs"] - gbs).abs() < 1e-9 * gbs).all()
    # each paired with the fastest fused backend: math is not a fused kernel
    assert set(ok["ratio_to"]) == {"sdpa_flash"}
    flash = rows[rows["impl"] == "sdpa_flash"]
    assert (flash["ratio"] == 1.0).all() and bool(flash["fused_sdpa"].all())
    ours = rows[(rows["impl"] == "triton_decode") & (rows["cache_len"] == 300)]  # CUDA only
    assert sorted(ours["splits"]) == [1, 1, 5, 5] and ours["median_ms"].isna().all()
    assert set(ours["cause"]) <= {"no_cuda_device", "no_triton"} and ours["reason"].isna().all()


def test_decode_times_a_grouped_layout_after_the_chapters(decode_run):
    params, _, rows = decode_run
    assert [p[3:] for p in params.points()] == [(2, 2, True)] * 2 + [(6, 2, False)] * 2
    chapter, grouped = rows[rows["cache_len"] == 300], rows[rows["cache_len"] == 96]
    assert (chapter["kv_heads"] == chapter["heads"]).all()
    assert set(grouped["heads"]) == {6} and set(grouped["kv_heads"]) == {2}
    ok = grouped[grouped["status"] == "ok"]
    assert {"splitkv", "sdpa_flash", "sdpa_math"} <= set(ok["impl"])


def test_a_grouped_points_queries_are_the_query_heads_of_each_key_value_head():
    """The folded layout is grouped-query attention as PyTorch defines it (enable_gqa:
    query head h reads key/value head h // G)."""
    from inferlab.algorithms.partials import splitkv_decode

    params = _params("decode", ["decode.d=8", GROUPED])
    q, k, v = decode._inputs(params, 40, 2, "float32", 6, 2, "cpu", SEED)
    assert q.shape == (2, 2, 3, 8) and k.shape == v.shape == (2, 2, 40, 8)
    out = splitkv_decode(q, k, v, 3).reshape(2, 6, 1, 8)
    ref = torch.nn.functional.scaled_dot_product_attention(q.reshape(2, 6, 1, 8), k, v,
                                                           enable_gqa=True)
    assert (out - ref).abs().max() < 1e-5


def test_a_grouped_layout_whose_heads_do_not_divide_is_named():
    with pytest.raises(ValueError, match=r"decode\.cpu\.grouped\[0\]: kv_heads=4 does not "
                                         "divide heads=6"):
        _params("decode", [GROUPED.replace("kv_heads: 2", "kv_heads: 4")])


# --------------------------------------------------------------------------- traffic


def test_traffic_ratio_uses_the_fastest_fused_backend(tmp_path):
    naive, flash = _prefill_point(random.Random(SEED + 3), 1024, True, None)
    ms = naive["median_ms"]
    rows = [naive, _timed(flash, ms, 8), _timed(flash, ms, 4, impl="sdpa_efficient"),
            _timed(flash, ms, 50, impl="sdpa_math", fused_sdpa=False)]
    # at 2,048 tokens naive ran out of memory: no row is paired with it
    rows += [{k: v for k, v in r.items() if not k.startswith("ratio")}
             | {"T": 2048, "status": "oom" if r is naive else "ok"} for r in rows]
    prefill_table = artifacts.decode("prefill", artifacts.encode("prefill", rows))
    frame = prefill_table.frame
    params = _params("traffic", ["traffic.block_q_model=64"])
    series = series_table(prefill=prefill_table)
    out = traffic.run(params, _ctx(tmp_path, "traffic", series=series))
    rows = _table("traffic", out)
    # each fused kernel that ran has its assumed row; the fastest is marked
    assert sorted(rows[rows["T"] == 1024]["fused_impl"]) == ["sdpa_efficient", "sdpa_flash"]
    rows = rows[rows["fastest_fused"]].set_index("T")
    pooled = series.frame[(series.frame["kind"] == "pooled") & (series.frame["T"] == 1024)
                          & (series.frame["impl"] == "sdpa_flash")].iloc[0]
    first = frame[frame["T"] == 1024].set_index("impl")["median_ms"]
    # sdpa_math is faster here but is not a fused kernel: flash is the fused one
    assert rows.loc[1024, "fused_impl"] == "sdpa_flash"
    measured = first["naive"] / first["sdpa_flash"]
    assert rows.loc[1024, "measured_ratio"] == pytest.approx(measured)
    # the series' interval of the fused kernel's ratio, inverted (one run with the prior)
    assert rows.loc[1024, "measured_ratio_ci_low"] == pytest.approx(1 / pooled["ratio_ci_high"])
    assert rows.loc[1024, "measured_ratio_ci_high"] == pytest.approx(1 / pooled["ratio_ci_low"])
    assert rows.loc[1024, "model_ratio"] == pytest.approx(traffic_ratio(1024, 64, 64))
    implied = implied_block_q(measured, 1024, 64, causal=True)
    assert rows.loc[1024, "implied_block_q"] == pytest.approx(implied)
    assert rows.loc[1024, "cpu_kernel_q_split"] == 256
    assert pd.isna(rows.loc[2048, "measured_ratio"]) and "naive" in rows.loc[2048, "note"]


def test_prefill_rows_are_paired_with_naive_of_their_own_mask(prefill_run):
    _, _, rows, _ = prefill_run
    ok = rows[rows["status"] == "ok"]
    assert (ok["ratio_to"] == "naive").all() and ok["rounds"].min() >= 6
    naive = ok[ok["impl"] == "naive"]
    assert (naive["ratio"] == 1.0).all()
    assert (ok["ratio_ci_low"] <= ok["ratio"]).all() and (ok["ratio"] <= ok["ratio_ci_high"]).all()
    # a causal row carries its causal/full ratio, a full row does not
    causal, full = ok[ok["causal"].astype(bool)], ok[~ok["causal"].astype(bool)]
    assert causal["causal_over_full"].notna().all() and full["causal_over_full"].isna().all()
    assert set(ok["timing_method"]) == {"torch.utils.benchmark.Timer"}


# --------------------------------------------------------------------------- older versions

ROOT = layout.REPO_ROOT
COMMITTED = "cpu-amd-epyc-avx512bf16-2c"   # evidence committed by an earlier version
NEW_COLUMNS = ["workers", "between_share", "interval_method", "over_budget"]  # version 2
RUN_LEVEL_COLUMNS = ["ratio_process_sd", "ratio_run_sd"]                       # version 3
STATUS_COLUMNS = ["cause", "reason", "budget_left_s", "process_sd",             # version 4
                  "causal_over_full_process_sd"]
INEXACT_COLUMNS = ["max_error", "error_bound"]                                  # version 5


def _rewritten(tmp_path: Path, stage: str, change) -> Path:
    """The committed ``stage`` table, its frame (of strings) passed through ``change``."""
    path = layout.artifact_path(ROOT, COMMITTED, stage)
    old = tmp_path / path.name
    old.write_text(change(pd.read_csv(path, dtype=str, keep_default_na=False))
                   .to_csv(index=False))
    return old


def _as_version_1(frame: pd.DataFrame) -> pd.DataFrame:
    """A table in the layout of schema version 1: the columns added since left out."""
    if "reason" in frame:  # its status one string, as versions 1-3 wrote it
        frame.loc[frame["status"] == "dropped", "status"] = \
            "dropped: 0.0 s of the stage budget left for this worker"
        # an unavailable row's words, as they wrote them (today's reason is only PyTorch's)
        frame.loc[frame["status"] == "unavailable", "status"] = \
            "unavailable: cudnn attention is a CUDA-only kernel and this build has no CUDA"
    return frame.drop(columns=[c for c in NEW_COLUMNS + RUN_LEVEL_COLUMNS + STATUS_COLUMNS
                               + INEXACT_COLUMNS if c in frame])


@pytest.mark.parametrize("stage", ["prefill", "decode"])
def test_a_version_1_table_still_reads_its_new_columns_missing(stage, tmp_path):
    table = artifacts.read(_rewritten(tmp_path, stage, _as_version_1), stage)
    added = NEW_COLUMNS + RUN_LEVEL_COLUMNS
    committed = pd.read_csv(layout.artifact_path(ROOT, COMMITTED, stage))
    assert len(table) == len(committed) and table.frame[added].isna().all().all()
    assert artifacts.schema_version(stage) == {"prefill": 5, "decode": 6}[stage]
    since = {c: artifacts.schema(stage)["properties"][c]["x-since-version"] for c in added}
    assert since == {**dict.fromkeys(NEW_COLUMNS, 2), **dict.fromkeys(RUN_LEVEL_COLUMNS, 3)}
    # the one-string status of versions 1-3 reads as today's enum and cause
    frame = table.frame
    assert set(frame["status"]) <= {"ok", "dropped", "unavailable"}
    unavailable = frame[frame["status"] == "unavailable"]
    assert (unavailable["cause"] == "backend_refused").all()
    assert unavailable["reason"].str.len().gt(0).all()
    dropped = frame[frame["status"] == "dropped"]
    assert (dropped["cause"] == "budget").all() and (dropped["budget_left_s"] >= 0).all()


@pytest.mark.parametrize("stage", ["prefill", "decode"])
def test_a_version_4_table_reads_with_no_inexact_columns(stage, tmp_path):
    """Every table committed before schema version 5 (the AVX2 machine's) has no
    ``max_error``/``error_bound``: it reads, with them empty."""
    table = artifacts.read(_rewritten(tmp_path, stage, lambda f: f.drop(columns=INEXACT_COLUMNS)),
                           stage)
    committed = pd.read_csv(layout.artifact_path(ROOT, COMMITTED, stage))
    assert len(table) == len(committed) and table.frame[INEXACT_COLUMNS].isna().all().all()


def test_a_table_missing_a_column_of_version_1_is_refused(tmp_path):
    bad = _rewritten(tmp_path, "prefill", lambda f: _as_version_1(f).drop(columns=["ratio"]))
    with pytest.raises(ValueError, match="nor an older version's"):
        artifacts.read(bad, "prefill")


@pytest.mark.parametrize("key", sorted(k for k in layout.keys(ROOT) if "@" not in k))
def test_the_committed_evidence_of_an_older_version_feeds_the_claims(key):
    """Every machine's committed evidence, another machine's made by older code included,
    is read by the claims stage, which judges every claim (test_traffic.py runs the traffic
    stage on each)."""
    from inferlab.evidence.register import load_evidence
    from inferlab.stages import claims

    reads = ("probe", "correctness", "prefill", "decode", "traffic", "model")
    evidence = {name: load_evidence(ROOT, key, name) for name in reads}
    assert all(e.data is not None for e in evidence.values()), \
        {n: e.error for n, e in evidence.items()}
    ctx = StageContext("claims", ROOT, key, "cpu", 1, SEED, evidence, lambda line: None)
    result = claims.run(claims.Params.from_config({}), ctx)
    assert result["claims"] and all(c["verdict"] for c in result["claims"])


# --------------------------------------------------------------------------- budgets


def test_the_default_cpu_grid_has_the_chapters_8192_tokens_causal():
    params = _params("prefill", [])
    # the chapter's points first, each required; bf16 at 512 an extra, timed last
    assert (8192, "float32", (True,), 1, 1, True) in params.points()
    assert params.points()[-1][:2] == (512, "bfloat16") and not params.points()[-1][5]
    assert params.budget_s > 0 and _params("decode", []).budget_s > 0


@pytest.mark.parametrize("stage", ["prefill", "decode"])
def test_a_budget_that_covers_nothing_still_times_every_chapter_point_once(stage, tmp_path):
    """A budget the checks before the timings already spend: the chapter's points are
    never dropped, each gets one process (rounds and processes are what the budget cuts);
    an extra point is rows ``dropped`` (cause budget, the seconds left), valid under the
    schema, nothing measured."""
    probe = _probe(random.Random(SEED + 5))
    sizes = {"prefill": ["prefill.d=8", "prefill.implementations=[naive, tiled, sdpa]",
                         "prefill.cpu={heads: 2, sizes: [{dtype: float32, T: [32, 64]}, "
                         "{dtype: float32, T: [48], extra: true}], "
                         "backends: [flash], budget_s: 0.001}"],
             "decode": ["decode.d=8", "decode.splits=[1, 3]", "decode.backends=[flash]",
                        "decode.cpu={heads: 2, cache_lens: [64, 96], batches: [1], "
                        "dtypes: [float32], budget_s: 0.001, min_run_ms: 1}"]}[stage]
    params = _params(stage, [TIMING, *sizes])
    module = MODULES[stage]
    rows = _table(stage, module.run(params, _ctx(tmp_path, stage, probe=probe)))
    length = "T" if stage == "prefill" else "cache_len"
    extra = rows[rows[length] == 48]
    assert (extra["status"] == "dropped").all() and (extra["cause"] == "budget").all()
    assert extra["median_ms"].isna().all() and (extra["budget_left_s"] >= 0).all()
    chapter = rows[(rows[length] != 48) & (rows["status"] != "unavailable")]
    assert len(chapter) and (chapter["status"] == "ok").all()
    assert (chapter["workers"] == 1).all()
    expected = {"prefill": {"naive", "tiled", "sdpa_flash"},
                "decode": {"splitkv", "sdpa_flash"}}[stage]
    assert set(rows["impl"]) >= expected


def test_decode_sets_its_own_rounds_and_timing_length_over_the_timing_section():
    base = [TIMING, "decode.cpu={heads: 2, cache_lens: [64], batches: [1], dtypes: [float32], "
                    "budget_s: 5, workers: 5, worker_rounds: 11, min_run_ms: 7}"]
    timing = _params("decode", base).timing
    options = timing.point_options(types.SimpleNamespace(device="cpu", threads=1))
    assert (timing.workers, options["rounds"], options["min_run_s"]) == (5, 11, 0.007)
    prefill_timing = _params("prefill", base).timing  # the others keep the timing section's
    assert (prefill_timing.workers, prefill_timing.worker_rounds) == (2, 3)
    # config.yaml: decode's own, the timing section's for the others
    book = {s: _params(s, []).timing for s in ("decode", "prefill")}
    assert {s: (t.workers, t.worker_rounds, t.min_run_ms) for s, t in book.items()} == {
        "decode": (4, 9, 10), "prefill": (4, 3, 50)}


def test_an_out_of_memory_length_is_an_oom_row(monkeypatch, tmp_path):
    real = correctness.naive_attention

    def naive(q, k, v, causal=False):
        if q.shape[-2] * k.shape[-2] >= 4096:  # as the allocator refuses 68,719,476,736 bytes
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator:"
                               " not enough memory: you tried to allocate 68719476736 bytes.")
        return real(q, k, v, causal)

    monkeypatch.setattr(correctness, "naive_attention", naive)
    params = _params("correctness", ["correctness.cpu.lengths=[32,4096]",
                                     "correctness.cpu.splitkv_cache_len=4096"])
    rows = correctness.run(params, _ctx(tmp_path, "correctness"))
    artifacts.encode("correctness", rows)  # the rows pass the schema
    big = [r for r in rows if r["T"] == 4096 and r["check"] != "causal_pairs"]
    assert big and {r["status"] for r in big} == {"oom"}
    assert {r["check"] for r in big} == {"equivalence", "splitkv", "merge_assoc"}
    assert all(r.get("max_abs_err") is None for r in big)
    assert {r["status"] for r in rows if r["T"] == 32} == {"ok"}

