"""Claims: loading and validation, the check vocabulary, verdicts on synthetic evidence
with known answers, and the audit chain with tamper detection.

The evidence is written with ``provenance.write_artifact`` (the one writer), so the
fixtures and the pipeline cannot drift apart in format.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from inferlab import artifacts, audit, claims, layout, verdicts
from inferlab.audit import evaluate_key
from inferlab.cli import main as cli_main
from inferlab.provenance import write_artifact
from inferlab.register import Register

SEED = 20240613
CPU, GPU = "cpu-synth-2t", "cuda-synth-gpu"
VERDICTS = artifacts.schema("claims")["$defs"]["result"]["properties"]["verdict"]["enum"]


def _cells(frame: pd.DataFrame) -> list[dict]:
    """DataFrame rows as row dicts, NaN as a missing cell (the artifact's empty cell)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in frame.to_dict(orient="records")]


def probe_json(device: str, availability: list[dict]) -> dict:
    """A probe.json that passes its schema: environment, availability rows, ceilings."""
    row = {"dtype": "float16", "causal": False, "T": 1024, "heads": 12, "d": 64,
           "can_run": False, "ran": False, "reason": None, "reason_source": "pytorch",
           "limit_kind": None, "op": None, "error": None}
    return {"environment": {"device": device},
            "availability": [{**row, **a} for a in availability],
            "ceilings": {"copy_gbs": 300.0, "matmul_gflops": {"float16": 1000.0},
                         "copy_bytes": 1 << 20, "matmul_size": 1024, "method": "synthetic",
                         "timings": {}}}


# ---------------------------------------------------------------- evidence builders


def write_stage(root: Path, machine: str, stage: str, content, device: str) -> dict:
    """Write one artifact (DataFrame -> CSV, dict -> JSON) through the real provenance
    writer; return its register entry."""
    data = artifacts.encode(stage, _cells(content) if isinstance(content, pd.DataFrame)
                            else content)
    return write_artifact(
        root, machine, stage, data, config={"stage_param": stage, "lengths": [512, 1024]},
        code_files=[Path(claims.__file__)], inputs=[], seed=SEED,
        command=f"python -m inferlab stage {stage} --machine {machine}",
        environment={"device": device, "build": {"torch": "2.13.0"},
                     "host": {"torch_threads": 2, "cpu_model": "synthetic"}, "cuda": None})


def prefill_frame(rnd: random.Random, dtype: str, fused_speedup: tuple[float, float],
                  tiled_slowdown: tuple[float, float], lengths=(1024, 2048, 4096)) -> pd.DataFrame:
    """Prefill rows where naive / (fastest fused) and tiled / naive are drawn from the
    given ranges; a faster sdpa_math row and an unavailable sdpa_cudnn row test the rule."""
    rows = []
    for T in lengths:
        for causal in (False, True):
            naive = rnd.uniform(5, 50) * (T / 1024) ** 2
            fused = naive / rnd.uniform(*fused_speedup)
            impls = {"naive": naive, "tiled": naive * rnd.uniform(*tiled_slowdown),
                     "sdpa_flash": fused, "sdpa_efficient": fused * rnd.uniform(1.2, 2.0),
                     "sdpa_math": fused * 0.5, "sdpa_cudnn": float("nan")}
            for impl, ms in impls.items():
                rows.append(_prefill_row(rnd, impl, T, dtype, causal, ms))
    return pd.DataFrame(rows)


def _prefill_row(rnd, impl, T, dtype, causal, ms) -> dict:
    status = "unavailable: needs sm80" if math.isnan(ms) else "ok"
    memory = {"naive": 3 * 12 * T * T * 2}.get(impl, int(12 * T * 64 * rnd.uniform(2, 4)))
    return dict(impl=impl, fused_sdpa=impl in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn"),
                T=T, batch=1, heads=12, d=64, dtype=dtype, causal=causal,
                block_q=128, block_k=128, threads=2, median_ms=ms, iqr_ms=ms * 0.01,
                n_timings=9, round_spread=rnd.uniform(0.01, 0.05), noisy=False,
                peak_extra_bytes=memory, memory_method="profiler", flops=4 * 12 * T * T * 64,
                achieved_gflops=1.0, frac_matmul_ceiling=rnd.uniform(0.2, 0.6), kernel="k",
                status=status)


def correctness_frame(rnd: random.Random, dtypes=("float32", "bfloat16")) -> pd.DataFrame:
    rows = []
    for dtype in dtypes:
        base = {"float32": 1e-6, "bfloat16": 4e-3, "float16": 5e-4}[dtype]
        for T in (512, 2048):
            for bq, bk in ((64, 64), (128, 128), (64, 128)):
                for scale in (1, 30):
                    err = base * rnd.uniform(0.8, 1.2)
                    rows.append(dict(check="equivalence", impl="tiled", T=T, heads=12, d=64,
                                     block_q=bq, block_k=bk, dtype=dtype, causal=True,
                                     score_scale=scale, splits=None, max_abs_err=err,
                                     naive_same_dtype_err=err * rnd.uniform(0.9, 1.1),
                                     status="ok"))
    for bq in (64, 128):
        n = 2048 // bq
        rows.append(dict(check="causal_pairs", impl="tiled", T=2048, block_q=bq, block_k=bq,
                         causal=True, computed_pairs=n * (n + 1) // 2, total_pairs=n * n,
                         pair_fraction=(n * (n + 1) / 2) / n**2, status="ok"))
    return pd.DataFrame(rows)


@pytest.fixture
def rnd() -> random.Random:
    return random.Random(SEED)


def build_evidence(root: Path) -> Path:
    """A CPU machine (bf16, plain tiling *faster* than naive) and a GPU machine (fp16,
    the chapter's ratios), each with probe, correctness and prefill; no decode/traffic."""
    rnd = random.Random(SEED)
    write_stage(root, CPU, "prefill", prefill_frame(rnd, "bfloat16", (2.0, 3.0), (0.3, 0.6)),
                "cpu")
    write_stage(root, CPU, "correctness", correctness_frame(rnd), "cpu")
    write_stage(root, GPU, "prefill", prefill_frame(rnd, "float16", (8.0, 12.0), (14.0, 22.0)),
                "cuda")
    write_stage(root, GPU, "correctness", correctness_frame(rnd, ("float32", "float16")), "cuda")
    probe = probe_json("cuda", [{"backend": "flash", "reason": "not built",
                                 "limit_kind": "build"}])
    write_stage(root, GPU, "probe", probe, "cuda")
    return root


@pytest.fixture(scope="module")
def evidence_template(tmp_path_factory) -> Path:
    return build_evidence(tmp_path_factory.mktemp("evidence"))


@pytest.fixture
def evidence(tmp_path: Path, evidence_template: Path) -> Path:
    """A private copy of the synthetic evidence (tests may tamper with it)."""
    return Path(shutil.copytree(evidence_template, tmp_path / "root"))


def write_claims(tmp_path: Path, *claims: dict) -> Path:
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "claims": list(claims)}))
    return path


def claim(cid: str, check: dict | None = None, **extra) -> dict:
    base = {"id": cid, "sentence": "A sentence.", "chapter_value": "v",
            "kind": "measured" if check else "reported"}
    return {**base, **({"check": check} if check else {"source": "someone"}), **extra}


SPEEDUP = {"stage": "prefill", "where": {"causal": True},
           "ratio": {"numerator": {"where": {"impl": "naive"}},
                     "denominator": {"where": {"fused_sdpa": True},
                                     "best": {"by": ["T", "dtype", "causal"],
                                              "lowest": "median_ms"}},
                     "join": ["T", "dtype", "causal"], "column": "median_ms", "stat": "range"},
           "expect": {"between": [7.8, 13.5], "tolerance": 0.1}}


def one(tmp_path: Path, root: Path, machine: str, check: dict | None) -> dict:
    path = write_claims(tmp_path, claim("C13-01", check))
    return evaluate_key(root, machine, path)["claims"][0]


# ---------------------------------------------------------------- claims.yaml


def test_every_claim_in_claims_yaml_loads_and_validates():
    loaded = claims.load().claims
    assert len(loaded) >= 30
    for c in loaded:
        assert (c.check is None) == (c.kind == "reported"), c.id
        assert c.sentence and c.chapter_value


def test_claim_ids_are_unique_and_cover_chapter_and_qa():
    ids = [c["id"] for c in yaml.safe_load(layout.CLAIMS_FILE.read_text())["claims"]]
    assert len(ids) == len(set(ids))
    assert any(i.startswith("C13-") for i in ids) and any(i.startswith("Q13-") for i in ids)


def test_duplicate_id_is_rejected_naming_it(tmp_path):
    path = write_claims(tmp_path, claim("C13-07"), claim("C13-07"))
    with pytest.raises(ValueError, match="C13-07"):
        claims.load(path)


@pytest.mark.parametrize("bad_expect", [{"approx": 3}, {"between": [1]}, {"nearly": 2}])
def test_schema_error_names_the_claim_and_field(tmp_path, bad_expect):
    check = {**SPEEDUP, "expect": bad_expect}
    path = write_claims(tmp_path, claim("C13-01"), claim("C13-42", check))
    with pytest.raises(ValueError, match=r"claim C13-42, field check\.expect"):
        claims.load(path)


def test_unit_must_fit_the_column(tmp_path):
    check = {"stage": "prefill", "value": {"column": "median_ms", "unit": "MiB", "stat": "max"},
             "expect": {"max": 1}}
    with pytest.raises(ValueError, match="C13-03.*unit='MiB'"):
        claims.load(write_claims(tmp_path, claim("C13-03", check)))


# ---------------------------------------------------------------- verdicts


def test_speedup_reproduced_with_the_planted_ratios(tmp_path, evidence):
    result = one(tmp_path, evidence, GPU, SPEEDUP)
    assert result["verdict"] == "reproduced", result["reason"]
    lo, hi = result["value"]
    assert 8.0 <= lo <= hi <= 12.0  # the fastest fused row, not the faster sdpa_math one


def test_speedup_not_reproduced_reports_the_value_here(tmp_path, evidence):
    result = one(tmp_path, evidence, CPU, SPEEDUP)
    assert result["verdict"] == "not reproduced"
    lo, hi = result["value"]
    assert 2.0 <= lo <= hi <= 3.0
    assert "value here" in result["reason"] and CPU in result["reason"]


def test_plain_tiling_faster_here_is_not_reproduced_not_hidden(tmp_path, evidence):
    check = {**SPEEDUP, "ratio": {**SPEEDUP["ratio"],
                                  "numerator": {"where": {"impl": "tiled"}},
                                  "denominator": {"where": {"impl": "naive"}}},
             "expect": {"between": [13, 23], "tolerance": 0.1}}
    result = one(tmp_path, evidence, CPU, check)
    assert result["verdict"] == "not reproduced"
    assert result["value"][1] < 1  # tiled is faster than naive on this machine


def test_fp16_claim_is_not_measurable_without_fp16_rows(tmp_path, evidence):
    check = {"stage": "correctness", "requires": {"dtype": "float16"},
             "where": {"check": "equivalence"},
             "value": {"column": "max_abs_err", "stat": "max"}, "expect": {"max": 1e-3}}
    cpu = one(tmp_path, evidence, CPU, check)
    assert cpu["verdict"] == "not measurable here"
    assert "float16" in cpu["reason"] and "no substitute" in cpu["reason"]
    assert one(tmp_path, evidence, GPU, check)["verdict"] == "reproduced"


def test_cuda_claim_is_not_measurable_on_cpu(tmp_path, evidence):
    check = {"stage": "prefill", "requires": {"device": "cuda"},
             "value": {"column": "median_ms", "stat": "max"}, "expect": {"min": 0}}
    result = one(tmp_path, evidence, CPU, check)
    assert result["verdict"] == "not measurable here" and "CUDA" in result["reason"]


def test_missing_stage_is_not_measurable(tmp_path, evidence):
    check = {"stage": "decode", "value": {"column": "median_ms", "stat": "max"},
             "expect": {"min": 0}}
    result = one(tmp_path, evidence, CPU, check)
    assert result["verdict"] == "not measurable here"
    assert "decode" in result["reason"] and "missing" in result["reason"]


def test_no_matching_rows_is_not_measurable(tmp_path, evidence):
    check = {"stage": "prefill", "where": {"T": 8192},
             "value": {"column": "median_ms", "stat": "max"}, "expect": {"min": 0}}
    result = one(tmp_path, evidence, GPU, check)
    assert result["verdict"] == "not measurable here" and "no rows" in result["reason"]


def test_reported_claim_is_not_checkable(tmp_path, evidence):
    result = one(tmp_path, evidence, GPU, None)
    assert result["verdict"] == "not checkable" and "someone" in result["reason"]
    assert result["artifact"] is None


def test_probe_rows_are_checkable(tmp_path, evidence):
    check = {"stage": "probe", "requires": {"device": "cuda"}, "where": {"backend": "flash"},
             "value": {"column": "ran", "stat": "max"}, "expect": {"equals": False}}
    assert one(tmp_path, evidence, GPU, check)["verdict"] == "reproduced"


def test_pair_fraction_checked_against_the_rows(tmp_path, evidence):
    check = {"stage": "correctness", "where": {"check": "causal_pairs", "block_q": 128},
             "value": {"column": "pair_fraction", "stat": "range"},
             "expect": {"approx": 0.53, "abs": 0.005}}
    result = one(tmp_path, evidence, CPU, check)
    assert result["verdict"] == "reproduced"
    assert result["value"] == pytest.approx([136 / 256, 136 / 256])


def test_real_claims_on_synthetic_evidence_give_valid_results(evidence):
    for machine in (CPU, GPU):
        result = evaluate_key(evidence, machine)
        artifacts.encode("claims", result)  # passes its schema
        found = {c["verdict"] for c in result["claims"]}
        assert found <= set(VERDICTS)
        entry = Register(evidence, machine).latest("prefill")
        prefill = [c for c in result["claims"]
                   if c["artifact"] and c["artifact"]["stage"] == "prefill"]
        assert prefill and all(c["artifact"]["sha256"] == entry["sha256"] for c in prefill)
        assert all(len(c["rows"]) <= verdicts.MAX_ROWS for c in result["claims"])
    assert {"reproduced", "not measurable here", "not checkable"} <= found


def test_modified_results_file_is_named_in_the_reason(tmp_path, evidence):
    path = layout.artifact_path(evidence, GPU, "prefill")
    path.write_text(path.read_text() + "\n")
    result = one(tmp_path, evidence, GPU, SPEEDUP)
    assert "no longer matches register version 1" in result["reason"]


# ---------------------------------------------------------------- the vocabulary


@pytest.mark.parametrize("exponent", [0.7, 1.3, 2.0])
def test_loglog_slope_recovers_a_power_law(rnd, exponent):
    xs = [512, 1024, 2048, 4096]
    c = rnd.uniform(0.5, 5.0)
    frame = pd.DataFrame({"T": xs, "y": [c * x**exponent for x in xs]})
    assert verdicts.loglog_slope(frame, "y", "T") == pytest.approx(exponent)


def test_spread_by_group_and_rank_filters(rnd):
    a, b = rnd.uniform(1, 2), rnd.uniform(1, 2)
    frame = pd.DataFrame({"cache_len": [1024, 1024, 4096, 4096], "status": ["ok"] * 4,
                          "t": [a, 2 * a, b, 1.5 * b]})
    spread = claims.Measure(column="t", stat="spread", by=("cache_len",))
    assert verdicts.statistic(frame, "t", spread) == pytest.approx([1.0, 0.5])
    longest = verdicts.select_rows(frame, (claims.Condition("cache_len", rank="largest"),))
    assert set(longest["cache_len"]) == {4096}
    shorter = verdicts.select_rows(frame, (claims.Condition("cache_len", rank="not_largest"),))
    assert set(shorter["cache_len"]) == {1024}


def test_rows_not_ok_are_dropped_unless_status_is_named(rnd):
    frame = pd.DataFrame({"impl": ["a", "a"], "status": ["ok", "oom"],
                          "t": [rnd.random(), rnd.random()]})
    assert len(verdicts.select_rows(frame, (claims.Condition("impl", values=("a",)),))) == 1
    assert len(verdicts.select_rows(frame, (claims.Condition("status", values=("oom",)),))) == 1


def test_approx_at_checks_the_lengths_present_and_names_the_absent():
    value = [[1024, 9.09], [2048, 10.32]]
    ok, text = verdicts.judge(claims.Expect("approx_at", rel=0.01, points=(
        (1024, 9.1), (2048, 10.3), (8192, 11.5))), value)
    assert ok and "8192 not measured here" in text
    bad, _ = verdicts.judge(claims.Expect("approx_at", rel=0.01, points=((1024, 8.0),)), value)
    assert not bad


def test_range_needs_every_value():
    assert not verdicts.judge(claims.Expect("direction", target=">1"), [0.5, 1.5])[0]
    assert verdicts.judge(claims.Expect("direction", target=">1"), [1.1, 1.5])[0]


# ---------------------------------------------------------------- audit


AUDIT_FIELDS = ("created_at", "git_commit", "git_dirty", "code_sha256", "config",
                "environment", "command")


def test_audit_has_every_link_of_the_chain(tmp_path, evidence, capsys):
    path = write_claims(tmp_path, claim("C13-05", SPEEDUP))
    data = audit.audit("C13-05", evidence, claims_path=path)
    assert data["ok"] and {m["machine"] for m in data["machines"]} == {CPU, GPU}
    for m in data["machines"]:
        assert m["integrity"]["status"] == "sha256 OK"
        assert m["artifact"]["version"] == 1 and len(m["artifact"]["sha256"]) == 64
        assert all(field in m["provenance"] for field in AUDIT_FIELDS)
        assert m["provenance"]["environment"]["torch"] == "2.13.0"
        assert m["provenance"]["command"].startswith("python -m inferlab stage prefill")
    text = audit.format_audit(data)
    for needle in ("C13-05", "sentence:", "chapter value:", "sha256 OK", "git commit",
                   "reproduce: python -m inferlab stage prefill", "threads=2"):
        assert needle in text


def test_cli_audit_json_and_exit_code(evidence, capsys):
    assert audit.cli_audit("C13-08", evidence, key=GPU, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["claim"]["id"] == "C13-08" and data["machines"][0]["machine"] == GPU


@pytest.mark.parametrize("target", ["results", "copy"])
def test_tampering_is_a_mismatch_and_exit_1(evidence, capsys, target):
    entry = Register(evidence, GPU).latest("prefill")
    path = (layout.artifact_path(evidence, GPU, "prefill") if target == "results"
            else Register(evidence, GPU).copy_path(entry["sha256"]))
    path.chmod(0o644)
    path.write_text(path.read_text().replace("ok", "ok ", 1))
    assert audit.cli_audit("C13-08", evidence, key=GPU) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and ("results file" if target == "results" else "retained") in out
    assert audit.cli_audit("C13-08", evidence, key=CPU) == 0


def test_unknown_id_lists_close_matches(evidence):
    with pytest.raises(ValueError, match=r"C13-0x.*did you mean .*C13-0"):
        audit.audit("C13-0x", evidence)


def test_unknown_id_through_the_cli_exits_2(evidence, capsys):
    assert cli_main(["--root", str(evidence), "audit", "C31-08"]) == 2
    assert "C13-08" in capsys.readouterr().err


def test_cli_claims_table_per_machine(evidence, capsys):
    for machine, device in ((CPU, "cpu"), (GPU, "cuda")):
        write_stage(evidence, machine, "claims", evaluate_key(evidence, machine), device)
    assert audit.cli_claims(evidence) == 0
    out = capsys.readouterr().out
    assert CPU in out and GPU in out and "C13-08" in out and "Q13-01" in out
    assert audit.cli_claims(evidence, as_json=True) == 0
    matrix = json.loads(capsys.readouterr().out)
    assert matrix["C13-33"][GPU]["verdict"] == "not checkable"
