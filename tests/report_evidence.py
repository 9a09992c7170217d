"""Synthetic evidence at the book's sizes for two machines, written with the real writer,
for the report tests (tests/test_report.py) and the browser tests (tests/test_browser.py).

The CPU key has every stage at the CPU grid of config.yaml (256-1,024 tokens, fp32 and
bf16, 12 heads, d = 64; caches 1,024-16,384 at batch 1 and 4), with CUDA-only backends
unavailable, some noisy rows, PyTorch's CPU flash kernel as the op of its sdpa_flash rows
(so traffic.csv, written by the real traffic stage, has rows at that kernel's known tile),
model-only traffic rows, and a malicious string in a probe reason and a kernel name. The
GPU key has the chapter's grid in fp16 (1,024-8,192 tokens; caches 4,096-65,536 at batch 1
and 8) and no traffic stage. Both get the claims.json the claims stage would write.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pandas as pd
from series_helper import series_rows
from test_claims import (
    CPU,
    GPU,
    SEED,
    _cells,
    correctness_rows,
    evaluate_key,
    probe_json,
    write_stage,
)

from inferlab.algorithms.traffic import decode_cache_bytes
from inferlab.evidence import artifacts
from inferlab.evidence.register import Evidence
from inferlab.measurement.status import status_fields
from inferlab.stages import traffic
from inferlab.stages.traffic import CPU_FLASH_OP
from inferlab.workflow.runner import StageContext

EVIL = "<script>alert(1)</script>"
CUDA_ONLY = ("{} attention is a CUDA-only kernel and this PyTorch build has no CUDA "
             "(torch.version.cuda is None, torch 2.13.0+cpu)")
HEADS, D = 12, 64
SIZES = {"float32": 4, "bfloat16": 2, "float16": 2}
MATMUL_GFLOPS = {"float32": 120.0, "bfloat16": 500.0, "float16": 1000.0}


def _probe(device: str, dtypes: tuple[str, ...], refused: dict[str, str],
           copy_gbs: float) -> dict:
    rows = []
    for dtype in dtypes:
        for causal in (False, True):
            for backend in ("flash", "efficient", "cudnn", "math"):
                reason = refused.get(backend)
                rows.append({"backend": backend, "dtype": dtype, "causal": causal,
                             "can_run": reason is None, "ran": reason is None,
                             "reason": reason, "limit_kind": reason and "build",
                             "reason_source": "inferlab" if reason else "pytorch"})
    probe = probe_json(device, rows)
    probe["environment"] = {"device": device, "build": {"torch": "2.13.0"},
                            "host": {"cpu_model": "Synthetic CPU", "torch_threads": 2},
                            "cuda": {"device_name": "Synthetic GPU"} if device == "cuda"
                            else None}
    probe["ceilings"]["copy_gbs"] = copy_gbs
    probe["ceilings"]["matmul_gflops"] = {d: MATMUL_GFLOPS[d] for d in dtypes}
    probe["ceilings"]["matmul_gflops_by_size"] = {d: {"1024": MATMUL_GFLOPS[d]} for d in dtypes}
    return probe


def _timing(rnd: random.Random, ms: float, ref_ms: float | None, ref: str | None) -> dict:
    """The harness's columns: median, its interval, rounds, and the ratio paired with
    ``ref`` (interval width drawn, some rows noisy)."""
    if ms != ms:
        return {}
    width = rnd.uniform(0.005, 0.2)
    ratio = None if ref_ms is None else ms / ref_ms
    return dict(median_ms=ms, ci_low_ms=ms * (1 - width), ci_high_ms=ms * (1 + width),
                iqr_ms=ms * width, rounds=rnd.choice((6, 12, 30)), converged=width <= 0.02,
                noisy=width > 0.1, timing_method="synthetic", ratio_to=ref, ratio=ratio,
                ratio_ci_low=None if ratio is None else ratio * (1 - width),
                ratio_ci_high=None if ratio is None else ratio * (1 + width), workers=4,
                process_sd=width / 2, ratio_process_sd=None if ratio is None else width / 2)


def _prefill_row(rnd: random.Random, impl: str, T: int, dtype: str, causal: bool,
                 block: int | None, ms: float, fused: bool, status: str,
                 naive_ms: float) -> dict:
    scores = HEADS * T * T * SIZES[dtype]
    memory = {"naive": 3 * scores, "sdpa_math": 2 * scores}.get(
        impl, int(HEADS * T * D * SIZES[dtype] * (block or 64) / 64 * rnd.uniform(2, 3)))
    return dict(impl=impl, fused_sdpa=fused, T=T, batch=1, heads=HEADS, d=D, dtype=dtype,
                causal=causal, block_q=block, block_k=block, threads=2,
                **_timing(rnd, ms, naive_ms, "naive"),
                causal_over_full=rnd.uniform(0.55, 0.75) if causal and ms == ms else None,
                peak_extra_bytes=memory if ms == ms else None,
                memory_method="synthetic", flops=4 * HEADS * T * T * D,
                achieved_gflops=4 * HEADS * T * T * D / ms / 1e6 if ms == ms else None,
                frac_matmul_ceiling=rnd.uniform(0.1, 0.6) if ms == ms else None,
                kernel="aten::bmm" if ms == ms else None, status=status)


def with_status(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows' one-string status ("unavailable: <reason>") as the artifact's columns."""
    fields = pd.DataFrame([status_fields(s) for s in frame["status"]], index=frame.index)
    return frame.drop(columns=["status"]).join(fields)


def prefill_frame(rnd: random.Random, lengths, dtypes, fused_speedup, tiled_slowdown,
                  unavailable: dict[str, str]) -> pd.DataFrame:
    """Rows of every implementation; those in ``unavailable`` (impl -> reason) are
    "unavailable: <reason>" rows without numbers."""
    rows = []
    for dtype in dtypes:
        for T in lengths:
            for causal in (False, True):
                naive = rnd.uniform(2, 4) * (T / 256) ** 2
                fused = naive / rnd.uniform(*fused_speedup)
                tiled = naive * rnd.uniform(*tiled_slowdown)
                impls = [("naive", None, naive, False), ("tiled", 128, tiled, False),
                         ("tiled", 512, tiled * 0.6, False),
                         ("tiled_fast", 128, tiled * 0.7, False),
                         ("sdpa_flash", None, fused, True), ("sdpa_math", None, naive, False),
                         ("sdpa_efficient", None, fused * 1.3, True),
                         ("sdpa_cudnn", None, fused * 1.1, True)]
                for impl, block, ms, fused_sdpa in impls:
                    status = f"unavailable: {unavailable[impl]}" if impl in unavailable \
                        else "ok"
                    ms = math.nan if impl in unavailable else ms
                    rows.append(_prefill_row(rnd, impl, T, dtype, causal, block, ms,
                                             fused_sdpa, status, naive))
    return with_status(pd.DataFrame(rows))


def decode_frame(rnd: random.Random, cache_lens, batches, dtype: str, copy_gbs: float,
                 unavailable=("sdpa_efficient",)) -> pd.DataFrame:
    rows = []
    for cache_len in cache_lens:
        for batch in batches:
            cache_bytes = decode_cache_bytes(batch, HEADS, cache_len, D, SIZES[dtype])
            floor_ms = cache_bytes / copy_gbs / 1e6
            impls = [("splitkv", s) for s in (1, 4, 16, 64)] + [
                ("sdpa_flash", None), ("sdpa_math", None), ("sdpa_efficient", None)]
            fused_ms = floor_ms * 3 + 0.05
            for impl, splits in impls:
                ok = impl not in unavailable
                ms = fused_ms if impl == "sdpa_flash" else floor_ms * rnd.uniform(1.5, 6) + 0.05
                rows.append(dict(
                    impl=impl, fused_sdpa=impl in ("sdpa_flash", "sdpa_efficient"),
                    cache_len=cache_len, batch=batch, heads=HEADS, d=D, dtype=dtype,
                    splits=splits, **_timing(rnd, ms if ok else math.nan, fused_ms,
                                             "sdpa_flash"),
                    cache_bytes=cache_bytes, achieved_gbs=cache_bytes / ms / 1e6 if ok else None,
                    frac_copy_ceiling=cache_bytes / ms / 1e6 / copy_gbs if ok else None,
                    floor_ms=floor_ms, kernel="aten::bmm" if ok else None,
                    status="ok" if ok else "unavailable: " + CUDA_ONLY.format("efficient")))
    return with_status(pd.DataFrame(rows))


def traffic_rows(series, device: str,
                 model_lengths=(1024, 2048, 4096, 8192)) -> list[dict]:
    """The traffic stage's own rows from the series' rows as written: measured where
    prefill ran (at the assumed tile, and at the known tile of a kernel that ran with one),
    model-only (empty dtype) at the chapter's lengths it did not."""
    table = artifacts.decode("series", artifacts.encode("series", _cells(pd.DataFrame(series))))
    evidence = {"series": Evidence("series", Path("series.csv"), table, None, None)}
    ctx = StageContext("traffic", Path("."), "synthetic", device, 1, SEED, evidence,
                       lambda _: None)
    return traffic.run(traffic.Params(block_q_model=128, model_lengths=model_lengths), ctx)


def splitkv_rows(rnd: random.Random, dtype: str) -> pd.DataFrame:
    base = {"float32": 1e-6, "bfloat16": 4e-3, "float16": 5e-4}[dtype]
    return pd.DataFrame([dict(check="splitkv", impl="splitkv", T=4096, heads=4, d=D,
                              dtype=dtype, causal=False, splits=s,
                              max_abs_err=base * rnd.uniform(0.5, 1.5),
                              naive_same_dtype_err=base, status="ok")
                         for s in (1, 2, 3, 4, 8, 16, 32, 64)])


def two_machines(root: Path) -> Path:
    """The CPU and GPU keys described above, with claims.json; returns ``root``."""
    rnd = random.Random(SEED)
    cpu_refused = {b: CUDA_ONLY.format(b) for b in ("efficient", "cudnn")}
    probe = _probe("cpu", ("float32", "bfloat16"), cpu_refused, 16.0)
    probe["availability"][2]["reason"] = EVIL
    write_stage(root, CPU, "probe", probe, "cpu")
    write_stage(root, CPU, "correctness", pd.concat(
        [pd.DataFrame(correctness_rows(rnd)), splitkv_rows(rnd, "float32")]), "cpu")
    prefill = prefill_frame(rnd, (256, 512, 1024), ("float32", "bfloat16"), (1.5, 3.0),
                            (1.5, 2.5), {f"sdpa_{b}": r for b, r in cpu_refused.items()})
    prefill.loc[0, "kernel"] = EVIL
    prefill.loc[(prefill["impl"] == "sdpa_flash") & (prefill["status"] == "ok"),
                "kernel"] = CPU_FLASH_OP
    write_stage(root, CPU, "prefill", prefill, "cpu")
    decode = decode_frame(rnd, (1024, 4096, 16384), (1, 4), "float32", 16.0)
    write_stage(root, CPU, "decode", decode, "cpu")
    series = series_rows(prefill=prefill, decode=decode)
    write_stage(root, CPU, "series", pd.DataFrame(series), "cpu")
    write_stage(root, CPU, "traffic", traffic_rows(series, "cpu"), "cpu")

    write_stage(root, GPU, "probe", _probe("cuda", ("float16",), {"flash": "not built"}, 300.0),
                "cuda")
    write_stage(root, GPU, "correctness", pd.concat(
        [pd.DataFrame(correctness_rows(rnd, ("float32", "float16"))),
         splitkv_rows(rnd, "float16")]), "cuda")
    gpu_prefill = prefill_frame(rnd, (1024, 2048, 4096, 8192), ("float16",), (6.0, 13.0),
                                (13.0, 22.0), {"sdpa_flash": "not built"})
    gpu_decode = decode_frame(rnd, (4096, 16384, 65536), (1, 8), "float16", 300.0,
                              unavailable=())
    write_stage(root, GPU, "prefill", gpu_prefill, "cuda")
    write_stage(root, GPU, "decode", gpu_decode, "cuda")
    gpu_series = series_rows(prefill=gpu_prefill, decode=gpu_decode)
    write_stage(root, GPU, "series", pd.DataFrame(gpu_series), "cuda")
    for key in (CPU, GPU):
        write_stage(root, key, "claims", evaluate_key(root, key), "cpu")
    return root
