"""The stage functions, in process, on tiny random sizes; the code table; artifact checks."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import pandas as pd
import pytest

from inferlab import pipeline
from inferlab.config import REPO_ROOT, Config, load_config
from inferlab.layout import STAGES
from inferlab.pipeline import StageContext
from inferlab.stages import correctness, decode, prefill, traffic
from inferlab.traffic import block_pairs, implied_block_q, traffic_ratio

SEED = 20240611
# modules that store or route results (and the lazy package root) are left out of
# STAGE_CODE on purpose: see inferlab/pipeline.py
PLUMBING = {"inferlab/__init__.py", "inferlab/config.py", "inferlab/layout.py",
            "inferlab/pipeline.py", "inferlab/provenance.py", "inferlab/register.py"}


def _imported_files(path: Path) -> set[str]:
    """Repository-relative files of the inferlab modules ``path`` imports (one level)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("inferlab"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("inferlab")]
        else:
            continue
        for name in names:
            stem = name.replace(".", "/")
            found |= {c for c in (f"{stem}.py", f"{stem}/__init__.py") if (REPO_ROOT / c).is_file()}
    return found


def _closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        current = todo.pop()
        if current in seen or current in PLUMBING:
            continue
        seen.add(current)
        todo += sorted(_imported_files(REPO_ROOT / current))
    return seen


@pytest.mark.parametrize("stage", STAGES)
def test_stage_code_covers_every_module_the_stage_imports(stage):
    needed = _closure(f"inferlab/stages/{stage}.py") | {"inferlab/stages/__init__.py"}
    assert needed <= set(pipeline.STAGE_CODE[stage]), needed - set(pipeline.STAGE_CODE[stage])
    assert all((REPO_ROOT / f).is_file() for f in pipeline.STAGE_CODE[stage])


def test_attention_is_not_code_of_probe():
    # the brief's example: touching attention.py must not rerun the probe
    assert "inferlab/attention.py" not in pipeline.STAGE_CODE["probe"]
    assert all("inferlab/attention.py" in pipeline.STAGE_CODE[s]
               for s in ("correctness", "prefill", "decode"))


# --------------------------------------------------------------------------- context


def _ctx(tmp_path: Path, stage: str, lines: list | None = None, **inputs) -> StageContext:
    sink = lines.append if lines is not None else (lambda line: None)
    return StageContext(stage, tmp_path, "test-stage", "cpu", 1, SEED, inputs, sink)


def _probe_json(tmp_path: Path, rng: random.Random) -> tuple[Path, dict]:
    ceilings = {"copy_gbs": rng.uniform(5, 50),
                "matmul_gflops": {"float32": rng.uniform(20, 200)}}
    path = tmp_path / "probe.json"
    path.write_text(json.dumps({"ceilings": ceilings}))
    return path, ceilings


def test_progress_line_format(tmp_path):
    lines = []
    _ctx(tmp_path, "prefill", lines).progress(7, 24, "naive T=2048 float32 causal")
    assert lines == ["[prefill] 7/24 naive T=2048 float32 causal"]


# --------------------------------------------------------------------------- correctness


def _params(stage: str, overrides: list[str]):
    raw = load_config(overrides=["device=cpu", *overrides])
    return Config(machine="test-stage", device="cpu", threads=1, seed=SEED,
                  raw=raw).stage_params(stage)


@pytest.fixture(scope="module")
def correctness_rows(tmp_path_factory):
    params = _params("correctness", [
        "correctness.d=8", "correctness.blocks=[[16, 16], [32, 8]]",
        "correctness.splits=[1, 3, 7]", "correctness.pair_model={T: 4096, blocks: [128]}",
        "correctness.cpu={heads: 2, lengths: [40], dtypes: [float32, bfloat16], "
        "splitkv_cache_len: 50}"])
    return params, correctness.run(params, _ctx(tmp_path_factory.mktemp("c"), "correctness"))


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


def test_correctness_table_passes_its_schema(correctness_rows):
    _, rows = correctness_rows
    pipeline.validate_artifact("correctness", pipeline.serialise("correctness", rows))


# --------------------------------------------------------------------------- prefill


TIMING = "timing={warmup: 1, rounds: 2, timings_per_round: 1, noisy_threshold: 1.0, min_run_ms: 1}"
PREFILL = [TIMING, "prefill.d=8", "prefill.blocks=[16]", "prefill.backends=[flash, math, cudnn]",
           "prefill.cpu={heads: 2, lengths: [48], dtypes: [float32]}"]


@pytest.fixture(scope="module")
def prefill_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("p")
    probe, ceilings = _probe_json(tmp, random.Random(SEED))
    params = _params("prefill", PREFILL)
    return params, ceilings, prefill.run(params, _ctx(tmp, "prefill", probe=probe))


def test_prefill_rows_and_rates(prefill_run):
    params, ceilings, rows = prefill_run
    assert len(rows) == 2 * (1 + 2 + 3)  # causal x (naive, tiled, tiled_fast, 3 backends)
    ok = rows[rows["status"] == "ok"]
    flops = 4 * params.heads * 48 * 48 * params.d / ok["causal"].map({True: 2, False: 1})
    assert (ok["flops"] == flops).all()
    rate = ok["flops"] / (ok["median_ms"] * 1e-3) / 1e9
    assert (ok["achieved_gflops"] - rate).abs().max() < 1e-6 * rate.max()
    frac = ok["achieved_gflops"] / ceilings["matmul_gflops"]["float32"]
    assert (ok["frac_matmul_ceiling"] - frac).abs().max() < 1e-9 * frac.max()
    bad = ok[(ok["peak_extra_bytes"] <= 0) | ok["kernel"].isna()]
    assert bad.empty, bad[["impl", "causal", "peak_extra_bytes", "kernel"]].to_string()


def test_prefill_names_refused_backends(prefill_run):
    _, _, rows = prefill_run
    cudnn = rows[rows["impl"] == "sdpa_cudnn"]
    assert cudnn["status"].str.startswith("unavailable: ").all()  # CPU: no cuDNN kernel
    assert cudnn["median_ms"].isna().all()


def test_prefill_table_passes_its_schema(prefill_run):
    _, _, rows = prefill_run
    pipeline.validate_artifact("prefill", pipeline.serialise("prefill", rows))


def test_memory_cap_gives_oom_rows(tmp_path):
    probe, _ = _probe_json(tmp_path, random.Random(SEED + 1))
    # naive materialises 2 x 4096 x 4096 fp32 scores = 128 MiB, far above a 1 MiB cap. The
    # cap limits address space, so the allocation must be above glibc's largest mmap
    # threshold (32 MiB): a smaller one can be served from heap memory freed by earlier tests.
    params = _params("prefill", [
        "timing={warmup: 1, rounds: 1, timings_per_round: 1, noisy_threshold: 1.0, min_run_ms: 1}",
        "prefill.d=8", "prefill.implementations=[naive]", "prefill.memory_cap_gib=0.001",
        "prefill.causal=[false]", "prefill.cpu={heads: 2, lengths: [4096], dtypes: [float32]}"])
    rows = prefill.run(params, _ctx(tmp_path, "prefill", probe=probe))
    assert list(rows["status"]) == ["oom"]


# --------------------------------------------------------------------------- decode


def test_decode_rows_bandwidth_and_floor(tmp_path):
    probe, ceilings = _probe_json(tmp_path, random.Random(SEED + 2))
    params = _params("decode", [
        TIMING, "decode.d=8", "decode.splits=[1, 5, 1000]", "decode.backends=[flash, math]",
        "decode.cpu={heads: 2, cache_lens: [300], batches: [1, 3], dtypes: [float32]}"])
    rows = decode.run(params, _ctx(tmp_path, "decode", probe=probe))
    assert set(rows["splits"].dropna()) == {1, 5}  # 1000 splits > 300 keys: skipped
    cache_bytes = 2 * rows["batch"] * 2 * 300 * 8 * 4
    assert (rows["cache_bytes"] == cache_bytes).all()
    floor_ms = cache_bytes / (ceilings["copy_gbs"] * 1e9) * 1e3
    assert ((rows["floor_ms"] - floor_ms).abs() < 1e-9 * floor_ms).all()
    gbs = rows["cache_bytes"] / (rows["median_ms"] * 1e-3) / 1e9
    assert ((rows["achieved_gbs"] - gbs).abs() < 1e-9 * gbs).all()
    pipeline.validate_artifact("decode", pipeline.serialise("decode", rows))


# --------------------------------------------------------------------------- traffic


def _prefill_frame(rng: random.Random, T: int, naive_status: str = "ok") -> pd.DataFrame:
    times = {"naive": rng.uniform(50, 100), "sdpa_flash": rng.uniform(5, 10),
             "sdpa_efficient": rng.uniform(10, 20), "sdpa_math": rng.uniform(1, 2)}
    return pd.DataFrame([{"impl": impl, "T": T, "d": 64, "causal": True, "dtype": "float32",
                          "median_ms": ms, "status": naive_status if impl == "naive" else "ok"}
                         for impl, ms in times.items()])


def test_traffic_ratio_uses_the_fastest_fused_backend(tmp_path):
    rng = random.Random(SEED + 3)
    path = tmp_path / "prefill.csv"
    frame = pd.concat([_prefill_frame(rng, 1024), _prefill_frame(rng, 2048, "oom")])
    frame.to_csv(path, index=False)
    params = _params("traffic", ["traffic.block_q_model=64"])
    rows = traffic.run(params, _ctx(tmp_path, "traffic", prefill=path)).set_index("T")
    first = frame[frame["T"] == 1024].set_index("impl")["median_ms"]
    # sdpa_math is faster here but is not a fused kernel: flash is the fused one
    assert rows.loc[1024, "fused_impl"] == "sdpa_flash"
    measured = first["naive"] / first["sdpa_flash"]
    assert rows.loc[1024, "measured_ratio"] == pytest.approx(measured)
    assert rows.loc[1024, "model_ratio"] == pytest.approx(traffic_ratio(1024, 64, 64))
    implied = implied_block_q(measured, 1024, 64, causal=True)
    assert rows.loc[1024, "implied_block_q"] == pytest.approx(implied)
    assert rows.loc[1024, "cpu_kernel_q_split"] == 256
    assert pd.isna(rows.loc[2048, "measured_ratio"]) and "naive" in rows.loc[2048, "note"]
    pipeline.validate_artifact("traffic", pipeline.serialise("traffic", rows.reset_index()))


# --------------------------------------------------------------------------- artifacts


def test_serialise_refuses_missing_columns():
    with pytest.raises(ValueError, match="missing"):
        pipeline.serialise("traffic", pd.DataFrame({"T": [1]}))


def test_validate_names_row_and_column(prefill_run):
    _, _, rows = prefill_run
    bad = rows.copy()
    bad.loc[bad.index[3], "status"] = "fine"
    with pytest.raises(ValueError, match=r"row 3, status"):
        pipeline.validate_artifact("prefill", pipeline.serialise("prefill", bad))
