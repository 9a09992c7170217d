"""Claims: loading (every field, the column names, the sentences), every verdict path on
synthetic evidence written by the real artifact writer, and the audit chain with tamper
detection.

The evidence is written with ``artifacts.encode`` and ``register.write_artifact`` (the
one writer), so the fixtures and the pipeline cannot drift apart in format.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register, write_artifact
from inferlab.judging import claims, verdicts
from inferlab.presentation.formats import value_text
from tests.series_helper import series_rows
from tests.test_verdicts import Rendered, _claims_yaml

SEED = 20240613
CPU, GPU = "cpu-synth-2t", "cuda-synth-gpu"
VERDICTS = verdicts.VERDICTS
FUSED = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn")
ENV = {"cpu": {"device": "cpu", "build": {"torch": "2.13.0", "cpu_capability": "AVX2"},
               "host": {"torch_threads": 2, "cpu_model": "synthetic"}, "cuda": None},
       "cuda": {"device": "cuda", "build": {"torch": "2.13.0"},
                "host": {"torch_threads": 2, "cpu_model": "synthetic"},
                "cuda": {"device_name": "Synthetic GPU"}}}


# ---------------------------------------------------------------- evidence builders

def evaluate_key(root: Path | str, key: str, claims_path: Path | str | None = None) -> dict:
    """Every claim judged now on ``key``'s artifacts: what the claims stage would write."""
    from inferlab.core.pipeline import STAGES
    from inferlab.evidence.register import load_evidence
    from inferlab.judging.series_view import judged
    from inferlab.judging.verdicts import evaluate_all

    claims_file = claims.load(claims_path)
    evidence = {s: load_evidence(root, key, s) for s in STAGES if s != "claims"}
    return evaluate_all(claims_file.claims, judged(evidence), key, Path(root),
                        claims_file.fp16_stand_in, claims_file.chapter_gpu)


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
                         "copy_bytes": 1 << 20, "matmul_sizes": [1024],
                         "matmul_gflops_by_size": {"float16": {"1024": 1000.0}},
                         "method": "synthetic",
                         "timings": {}}}


def write_stage(root: Path, machine: str, stage: str, content, device: str,
                rows: list[dict] | None = None) -> dict:
    """Write one artifact (DataFrame or rows -> CSV, dict -> JSON) through the real writer;
    return its register entry."""
    if isinstance(content, pd.DataFrame):
        content = _cells(content)
    data = artifacts.encode(stage, content)
    return write_artifact(
        root, machine, stage, data, config={"stage_param": stage, "lengths": [512, 1024]},
        code_files=[Path(claims.__file__)], inputs=[], seed=SEED,
        command=f"python -m inferlab stage {stage} --machine {machine}",
        environment=ENV[device])


def prefill_rows(rnd: random.Random, dtype: str, fused_speedup: tuple[float, float],
                 tiled_slowdown: tuple[float, float], lengths=(1024, 2048, 4096)) -> list[dict]:
    """Prefill rows where naive / (fastest fused) and tiled / naive are drawn from the
    given ranges, paired with naive as the stage pairs them; a faster sdpa_math row and
    an unavailable sdpa_cudnn row test the fused rule."""
    rows = []
    for T in lengths:
        for causal in (False, True):
            naive = rnd.uniform(5, 50) * (T / 1024) ** 2
            fused = naive / rnd.uniform(*fused_speedup)
            impls = {"naive": naive, "tiled": naive * rnd.uniform(*tiled_slowdown),
                     "sdpa_flash": fused, "sdpa_efficient": fused * rnd.uniform(1.2, 2.0),
                     "sdpa_math": fused * 0.5, "sdpa_cudnn": math.nan}
            for impl, ms in impls.items():
                rows.append(_prefill_row(rnd, impl, T, dtype, causal, ms, naive))
    return rows


def _prefill_row(rnd, impl, T, dtype, causal, ms, naive_ms) -> dict:
    ok = not math.isnan(ms)
    memory = {"naive": 3 * 12 * T * T * 2}.get(impl, int(12 * T * 64 * rnd.uniform(2, 4)))
    timing = {"median_ms": ms, "ci_low_ms": ms * 0.99, "ci_high_ms": ms * 1.01,
              "iqr_ms": ms * 0.01, "rounds": 6, "converged": True, "noisy": False,
              "timing_method": "synthetic", "ratio_to": "naive", "ratio": ms / naive_ms,
              "ratio_ci_low": 0.99 * ms / naive_ms, "ratio_ci_high": 1.01 * ms / naive_ms,
              "causal_over_full": 0.65 if causal else None,
              "peak_extra_bytes": memory, "memory_method": "profiler",
              "achieved_gflops": 1.0, "frac_matmul_ceiling": rnd.uniform(0.2, 0.6),
              "kernel": "k"} if ok else {}
    return {"impl": impl, "fused_sdpa": impl in FUSED, "T": T, "batch": 1, "heads": 12,
            "d": 64, "dtype": dtype, "causal": causal, "block_q": 128, "block_k": 128,
            "threads": 2, "flops": 4 * 12 * T * T * 64, **timing,
            **({"status": "ok"} if ok else {"status": "unavailable", "cause": "backend_refused",
                                            "reason": "needs sm80"})}


def correctness_rows(rnd: random.Random, dtypes=("float32", "bfloat16")) -> list[dict]:
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
    return rows


@pytest.fixture
def rnd() -> random.Random:
    return random.Random(SEED)


def build_evidence(root: Path) -> Path:
    """A CPU machine (fp32 and bf16, plain tiling *faster* than naive) and a GPU machine
    (fp16, the chapter's ratios), each with probe, correctness and prefill."""
    rnd = random.Random(SEED)
    cpu_prefill = prefill_rows(rnd, "float32", (2.0, 3.0), (0.3, 0.6)) + \
        prefill_rows(rnd, "bfloat16", (20.0, 30.0), (0.3, 0.6))
    write_stage(root, CPU, "prefill", cpu_prefill, "cpu")
    write_stage(root, CPU, "correctness", correctness_rows(rnd), "cpu")
    write_stage(root, CPU, "probe", probe_json("cpu", [{"backend": "flash", "ran": True,
                                                        "dtype": "float32"}]), "cpu")
    write_stage(root, GPU, "prefill", prefill_rows(rnd, "float16", (8.0, 12.0), (14.0, 22.0)),
                "cuda")
    write_stage(root, GPU, "correctness", correctness_rows(rnd, ("float32", "float16")), "cuda")
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


def write_sentences(root: Path, *entries: dict) -> None:
    """docs/chapter/sentences.yaml under ``root``: one seed of ``entries``."""
    path = root / claims.SENTENCES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "seeds": [
        {"name": "chapter", "seed": "s", "copy": "c", "sentences": list(entries)}]}))


def write_claims(tmp_path: Path, *items: dict) -> Path:
    """claims.yaml of ``items``, each claim's sentence "A sentence." beside it."""
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"version": 3, "fp16_stand_in": {"cuda": "float16",
                                                                    "cpu": "float32"},
                                    "claims": list(items)}))
    ids = [c.get("id") for c in items if isinstance(c.get("id"), str)]
    write_sentences(tmp_path, {"text": "A sentence.", "claims": ids})
    return path


def claim(cid: str, check: dict | None = None, kind: str | None = None, **extra) -> dict:
    base = {"id": cid, "chapter_value": "v",
            "kind": kind or ("measured" if check else "reported"),
            "reading": {"quantity": "a quantity", "why": "a reason"}}
    return {**base, **({"check": check} if check else {"source": "someone"}), **extra}


BEST = {"by": ["T", "dtype", "causal"], "lowest": "median_ms"}
SPEEDUP = {"stage": "prefill", "scope": {"causal": [True]}, "where": {"fused_sdpa": True},
           "best": BEST, "value": {"column": "ratio", "invert": True, "stat": "range"},
           "expect": {"between": [7.8, 13.5], "printed": True}}


def expect(spec: dict) -> dict:
    """A claim's change: SPEEDUP with ``spec`` as its expectation."""
    return {"check": {**SPEEDUP, "expect": spec}}


def one(tmp_path: Path, root: Path, machine: str, check: dict | None, kind=None) -> Rendered:
    path = write_claims(tmp_path, claim("C13-01", check, kind))
    return Rendered(evaluate_key(root, machine, path)["claims"][0],
                    claims.load(path).claims[0], machine)


# ---------------------------------------------------------------- claims.yaml


def test_every_claim_in_claims_yaml_loads_and_validates():
    """Loading refuses repeated ids (test_a_file_level_error_is_located), so these are unique."""
    loaded = claims.load()
    assert len(loaded.claims) >= 50 and loaded.fp16_stand_in == {"cuda": "float16",
                                                                  "cpu": "float32"}
    for c in loaded.claims:
        assert (c.check is None) == (c.kind == "reported"), c.id
        assert c.sentence and c.chapter_value and "\n" not in c.sentence
    ids = [c.id for c in loaded.claims]
    assert any(i.startswith("C13-") for i in ids) and any(i.startswith("Q13-") for i in ids)


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"kind": "measured", "source": "x"}, "check", "a measured claim has a check and no "
     "source"),
    ({"kind": "reported"}, "source", "a reported claim names its source and has no check"),
    ({"kind": "guess"}, "kind", "'guess' is not one of measured, model"),
    ({"chapter_value": " "}, "chapter_value", "expected some text"),
    ({"reading": {"quantity": "q"}}, "reading", "'why' is required"),
    ({"figures": []}, "figures", "a list of the figures as printed"),
    ({"sentence": "A sentence."}, "(claim)", "unknown key 'sentence'"),
    ({"check": {**SPEEDUP, "stage": "claims"}}, "check.stage", "'claims' is not one of probe"),
    ({"check": {**SPEEDUP, "dtype": "half"}}, "check.dtype", "'half' is not one of fp16"),
    ({"check": {**SPEEDUP, "ratio": SPEEDUP["value"]}}, "check", "exactly one of value"),
    ({"check": {**SPEEDUP, "value": {"column": "ratio", "stat": "loglog_slope"}}},
     "check.value", "stat loglog_slope needs x"),
    ({"check": {**SPEEDUP, "value": {"column": "ratio", "stat": "mean"}}},
     "check.value.stat", "'mean' is not one of max, min, median"),
    ({"check": {**SPEEDUP, "where": {"T": {"least": 1}}}}, "check.where.T",
     "unknown key 'least'"),
    ({"check": {**SPEEDUP, "scope": {"T": 1024}}}, "check.scope.T", "a list of the "
     "sentence's values"),
    ({"check": {**SPEEDUP, "best": {"by": ["T"]}}}, "check.best", "'lowest' is required"),
    ({"check": {**SPEEDUP, "value": {"column": "ratio", "stat": "max", "unit": "ms"}}},
     "check.value.unit", "'ms' is not one of MiB, us, s"),
    (expect({"approx": 3, "printed": True}), "check.expect.printed",
     "approx is the printed figure already"),
    (expect({"between": [1]}), "check.expect.between", "expected [low, high], got [1]"),
    (expect({"between": [2, 1]}), "check.expect.between", "low 2 is above high 1"),
    (expect({"nearly": 2}), "check.expect", "unknown key 'nearly'"),
    (expect({"max": 1, "rel": 0.1}), "check.expect", "unknown key 'rel'"),
    (expect({"finite": False}), "check.expect.finite", "finite: true is the only form"),
    (expect({"finite": True, "max": 2}), "check.expect", "give exactly one of between, max, "
     "min, approx, equals, direction, approx_at, finite; got max, finite"),
    (expect({"direction": ">2"}), "check.expect.direction", "'>2' is not one of >1, <1, >0"),
    (expect({"max": "1"}), "check.expect.max", "expected a finite number, got '1'"),
    (expect({"approx_at": [[1024]]}), "check.expect.approx_at", "expected [[at, figure], ...]"),
    (expect({"equals": True, "printed": True}), "check.expect.printed",
     "equals is no printed figure"),
])
def test_a_field_error_names_the_claim_the_field_and_what_is_right(tmp_path, change, field,
                                                                   says):
    """The second claim is the bad one: the message names it, not the first."""
    raw = {**claim("C13-05", SPEEDUP), **change}
    if change.get("kind") == "reported":
        raw["source"] = None
        del raw["source"]
    with pytest.raises(ValueError, match=rf"^claims\.yaml: claim C13-05, field {re.escape(field)}: "
                       ) as info:
        claims.load(write_claims(tmp_path, claim("C13-01"), raw))
    assert says in str(info.value)


def test_every_field_of_a_check_is_parsed_into_its_dataclass(tmp_path):
    check = {"stage": "prefill", "device": "cuda", "dtype": "each", "between_runs": True,
             "scope": {"T": [1024, 2048], "causal": [True]},
             "where": {"fused_sdpa": True, "T": {"min": 512, "max": 4096}, "impl": ["a", "b"]},
             "best": {"by": ["T", "dtype"], "lowest": "median_ms_new"},
             "value": {"column": "median_ms_spread", "over": "ratio_spread", "invert": True,
                       "valid_max": 3.5, "stat": "at", "by": ["causal"],
                       "at": "T"},
             "expect": {"max": 2.5, "printed": True}}
    loaded = claims.load(write_claims(tmp_path, claim("C13-01", check, "between-run",
                                                      note="  a\n  note ")))
    parsed = loaded.claims[0]
    assert parsed.note == "a note" and parsed.kind == "between-run"
    assert parsed.check == claims.Check(
        stage="prefill",
        rows=claims.Rows((claims.Condition("T", low=512, high=4096),  # safe_dump sorts keys
                          claims.Condition("fused_sdpa", values=(True,)),
                          claims.Condition("impl", values=("a", "b"))),
                         claims.Best(("T", "dtype"), "median_ms_new")),
        measure=claims.Measure(column="median_ms_spread", stat="at", over="ratio_spread",
                               invert=True, valid_max=3.5, by=("causal",), at="T"),
        expect=claims.Expect("max", target=2.5, printed=(True, True)), dtype="each",
        scope=(("T", (1024, 2048)), ("causal", (True,))), device="cuda", between_runs=True)


def test_a_ratio_check_and_the_defaults_are_parsed(tmp_path):
    check = {"stage": "prefill", "ratio": {
        "numerator": {"where": {"impl": "naive"}},
        "denominator": {"where": {"fused_sdpa": True}, "best": BEST},
        "join": ["T", "dtype"], "column": "peak_extra_bytes", "stat": "loglog_slope",
        "x": "T"}, "expect": {"min": 0.5}}
    parsed = claims.load(write_claims(tmp_path, claim("C13-02", check))).claims[0].check
    assert parsed == claims.Check(
        stage="prefill", rows=claims.Rows(),
        measure=claims.Measure(
            column="peak_extra_bytes", stat="loglog_slope", x="T", join=("T", "dtype"),
            numerator=claims.Rows((claims.Condition("impl", values=("naive",)),)),
            denominator=claims.Rows((claims.Condition("fused_sdpa", values=(True,)),),
                                    claims.Best(("T", "dtype", "causal"), "median_ms"))),
        expect=claims.Expect("min", target=0.5))
    assert parsed.dtype == "fp16" and parsed.scope == () and parsed.device is None
    assert parsed.between_runs is False and parsed.measure.is_ratio
    assert parsed.measure.over is None and parsed.measure.invert is False
    assert claims._measure({"value": {"column": "median_ms", "unit": "us", "stat": "max"}}) \
        == claims.Measure(column="median_ms", stat="max", unit="us")


@pytest.mark.parametrize(("spec", "parsed"), [
    ({"between": [1, 2]}, claims.Expect("between", bounds=(1, 2))),
    ({"between": [1, 2], "printed": True}, claims.Expect("between", bounds=(1, 2),
                                                         printed=(True, True))),
    ({"between": [1, 8], "printed": [False, True]},
     claims.Expect("between", bounds=(1, 8), printed=(False, True))),
    ({"min": 3, "printed": True}, claims.Expect("min", target=3, printed=(True, True))),
    ({"approx": 3}, claims.Expect("approx", target=3, printed=(True, True))),
    ({"equals": "flash"}, claims.Expect("equals", target="flash")),
    ({"direction": "<1"}, claims.Expect("direction", target="<1")),
    ({"direction": ">0"}, claims.Expect("direction", target=">0")),
    ({"finite": True}, claims.Expect("finite")),
    ({"approx_at": [[1024, 9.1], [2048, 10.3]]},
     claims.Expect("approx_at", points=((1024, 9.1), (2048, 10.3)), printed=(True, True))),
])
def test_each_expectation_is_parsed(spec, parsed):
    assert claims._expect(spec) == parsed
    assert claims._expect(spec).printed == parsed.printed


def test_the_file_level_fields_are_loaded(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({
        "version": 3, "chapter_hardware": "an A100", "chapter_gpu": {"multiprocessors": 34},
        "fp16_stand_in": {"cuda": "float16", "cpu": "bfloat16", "why": "because"},
        "claims": [claim("C13-01")]}))
    write_sentences(tmp_path, {"text": "Two   words\n  here.", "claims": ["C13-01"]})
    loaded = claims.load(path)
    assert loaded.hardware == "an A100" and loaded.chapter_gpu == {"multiprocessors": 34}
    assert loaded.fp16_stand_in == {"cuda": "float16", "cpu": "bfloat16"}
    assert loaded.claims[0].sentence == "Two words here."
    assert loaded.claims[0].source == "someone" and loaded.claims[0].check is None


def test_each_sentence_is_stored_once_and_a_claim_reads_every_sentence_naming_it(tmp_path):
    """A sentence lives in docs/chapter/sentences.yaml only; a claim checking two
    sentences of the seeds gets both, in their order."""
    path = write_claims(tmp_path, claim("C13-01"), claim("C13-02"))
    write_sentences(tmp_path, {"text": "First.", "claims": ["C13-02"]},
                    {"text": "Narrative.", "reason": "not_a_claim"},
                    {"text": "Second.", "claims": ["C13-01", "C13-02"]})
    loaded = {c.id: c.sentence for c in claims.load(path).claims}
    assert loaded == {"C13-01": "Second.", "C13-02": "First. Second."}
    assert "sentence:" not in layout.CLAIMS_FILE.read_text(encoding="utf-8")


def test_a_claim_no_sentence_names_and_a_missing_sentences_file_are_refused(tmp_path):
    path = write_claims(tmp_path, claim("C13-01"), claim("C13-02"))
    write_sentences(tmp_path, {"text": "First.", "claims": ["C13-02"]})
    with pytest.raises(ValueError) as info:
        claims.load(path)
    assert str(info.value) == ("claims.yaml: claim C13-01 checks no sentence of "
                               f"{tmp_path / claims.SENTENCES_FILE}; add C13-01 to the claims: "
                               "of the sentence it reads there")
    (tmp_path / claims.SENTENCES_FILE).unlink()
    with pytest.raises(ValueError, match="its sentences file .* does not exist; each claim's "
                                         "sentence is stored there"):
        claims.load(path)


def test_a_missing_or_broken_claims_file_is_named(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ValueError) as info:
        claims.load(missing)
    assert str(info.value) == (f"claims file {str(missing)!r} does not exist; expected a "
                               "claims.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("claims: [\n")
    with pytest.raises(ValueError, match=r"^broken\.yaml is not valid YAML: "):
        claims.load(broken)


@pytest.mark.parametrize(("data", "message"), [
    ({"version": 2}, "claims.yaml, field version: 2: this loader reads version 3"),
    ({"claims": None}, "claims.yaml, field (file): 'claims' is required"),
    ({"claims": []}, "claims.yaml, field claims: expected a list of claims"),
    ({"fp16_stand_in": {"cuda": "float16"}}, "claims.yaml, field fp16_stand_in: 'cpu' is "
     "required"),
    ({"fp16_stand_in": {"cuda": "float16", "cpu": "fp8"}}, "claims.yaml, field "
     "fp16_stand_in.cpu: 'fp8' is not one of float32, float16, bfloat16"),
    ({"extra": 1}, "claims.yaml, field (file): unknown key 'extra'; expected version, "
     "chapter_hardware, chapter_gpu, fp16_stand_in, rules, anchors, premises, claims"),
    ({"claims": [claim("C13-07"), claim("C13-07")]},
     "claims.yaml: claim ids must be unique; repeated: ['C13-07']"),
])
def test_a_file_level_error_is_located(tmp_path, data, message):
    path = write_claims(tmp_path, claim("C13-01"))
    raw = {**yaml.safe_load(path.read_text()), **data}
    path.write_text(yaml.safe_dump({k: v for k, v in raw.items() if v is not None}))
    with pytest.raises(ValueError) as info:
        claims.load(path)
    assert str(info.value) == message


BOUND = {"stage": "traffic", "where": {"tile": "assumed"},
         "value": {"column": "naive_intensity", "over": "machine_balance", "stat": "range"},
         "expect": {"direction": "<1"}}
REFUTED = {"says": "K and V re-read", "refuted_on": ["cuda-nvidia-h200"],
           "measured": "18.9 MB", "to_judge": "an ncu artifact"}


BOTH = {"bound": {"says": "bytes bound", "check": BOUND}, "reread": REFUTED}


def with_premises(tmp_path: Path, premises: dict, named: list, kind=None, **check) -> Path:
    path = write_claims(tmp_path, claim("C13-21", {**SPEEDUP, "premises": named, **check},
                                        kind=kind))
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "premises": premises}))
    return path


def test_a_check_s_premises_are_typed_from_the_file_s_premises(tmp_path):
    path = with_premises(tmp_path, BOTH, ["bound", "reread"])
    bound, reread = claims.load(path).claims[0].check.premises
    assert bound.name == "bound" and bound.says == "bytes bound"
    assert bound.check.measure.over == "machine_balance" and bound.refuted_on == ()
    assert reread.check is None and reread.refuted_on == ("cuda-nvidia-h200",)
    assert (reread.measured, reread.to_judge) == ("18.9 MB", "an ncu artifact")


@pytest.mark.parametrize(("premises", "named", "asks", "message"), [
    ({"bound": {"says": "s", "check": BOUND}}, ["bund"], {},
     "claims.yaml: claim C13-21, field check.premises: 'bund' is not a premise of the file's "
     "premises: (declared: bound)"),
    ({"both": {**REFUTED, "check": BOUND}}, ["both"], {}, "claims.yaml, field premises.both: "
     "give exactly one of check"),
    ({"bare": {"says": "s", "refuted_on": ["h200"]}}, ["bare"], {}, "claims.yaml, field "
     "premises.bare: 'measured' is required beside refuted_on"),
    ({"open": {"says": "s", "check": {k: v for k, v in BOUND.items() if k != "expect"}}},
     ["open"], {}, "claims.yaml, field premises.open.check: a premise's check needs an expect"),
    ({"typo": {"says": "s", "check": {**BOUND, "where": {"tiles": "assumed"}}}}, ["typo"], {},
     "claims.yaml: premise typo names column 'tiles', which traffic.csv does not have"),
    # a question asks only about a premise it rests on
    (BOTH, ["reread"], {"kind": "measured", "asks": "reread"}, "claims.yaml: claim C13-21, "
     "field check.asks: only a question asks about a premise; this claim is measured"),
    (BOTH, ["reread"], {"kind": "question", "asks": "bound"}, "claims.yaml: claim C13-21, "
     "field check.asks: expected one of the check's premises (reread), got 'bound'")])
def test_a_premise_that_cannot_decide_anything_is_refused_where_it_is(tmp_path, premises,
                                                                      named, asks, message):
    with pytest.raises(ValueError) as info:
        claims.load(with_premises(tmp_path, premises, named, **asks))
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("cid", [None, "C13-5", "C13-05\n", "c13-05"])
def test_a_claim_without_an_exact_id_is_located_by_its_place(tmp_path, cid):
    nameless = {k: v for k, v in claim("C13-01").items() if k != "id"}
    with pytest.raises(ValueError) as info:
        claims.load(write_claims(tmp_path, claim("C13-02"), {**nameless, "id": cid}))
    assert str(info.value) == (f"claims.yaml: claim #2 has id {cid!r}, which is not C13-NN or "
                               "Q13-NN (two digits, nothing before or after)")


def test_the_columns_a_check_may_name():
    between = claims._check({"stage": "decode", "between_runs": True,
                             "value": {"column": "median_ms_spread", "stat": "max"},
                             "expect": {"max": 1}})
    allowed = claims.artifact_columns(between)
    assert {"status", "impl", "cache_len", "splits", "median_ms_new", "median_ms_spread",
            "ratio_spread"} <= allowed
    # the series has no _old or _diff: a check naming them would fail only when judged
    assert not {"median_ms_old", "median_ms_diff", "ratio_old", "ratio_new"} & allowed
    assert "median_ms" not in allowed and "achieved_gbs" not in allowed
    probe = claims._check({"stage": "probe", "value": {"column": "ran", "stat": "max"},
                           "expect": {"equals": True}})
    assert {"backend", "ran", "can_run", "reason"} <= claims.artifact_columns(probe)
    plain = claims._check({"stage": "decode", "value": {"column": "median_ms", "stat": "max"},
                           "expect": {"max": 1}})
    assert claims.artifact_columns(plain) == set(artifacts.columns("decode"))


@pytest.mark.parametrize(("check", "named"), [
    ({"stage": "prefill", "scope": {"causal": [True]}, "where": {"impl": "naive"},
      "best": {"by": ["T"], "lowest": "flops"},
      "value": {"column": "median_ms", "over": "iqr_ms", "stat": "at", "at": "block_q",
                "by": ["dtype"]}, "expect": {"max": 1}},
     {"causal", "impl", "T", "flops", "median_ms", "iqr_ms", "block_q", "dtype"}),
    ({"stage": "prefill", "ratio": {
        "numerator": {"where": {"impl": "naive"}},
        "denominator": {"where": {"fused_sdpa": True}, "best": {"by": ["heads"],
                                                                 "lowest": "rounds"}},
        "join": ["batch"], "column": "peak_extra_bytes", "stat": "loglog_slope", "x": "d"},
      "expect": {"min": 0.5}},
     {"impl", "fused_sdpa", "heads", "rounds", "batch", "peak_extra_bytes", "d"}),
    # a per-tensor check names the tensor's shape columns and its own
    ({"stage": "prefill", "scope": {"T": [1024]}, "value": {
        "column": "peak_extra_bytes", "per": "score_matrix", "stat": "max"},
      "expect": {"max": 1}}, {"T", "peak_extra_bytes", "batch", "heads", "dtype"})])
def test_the_columns_a_check_names_include_every_part(check, named):
    assert claims.columns_named(claims._check(check)) == named


def test_find_a_claim_by_id_or_name_the_close_ones():
    known = [claims.Claim(f"C13-{i:02d}", "s", "v", "reported") for i in range(1, 9)]
    assert claims.find("C13-03", known) is known[2]
    with pytest.raises(ValueError) as info:
        claims.find("c13-0x", known)
    message = str(info.value)
    assert message.startswith("claim_id='c13-0x' is not in claims.yaml; did you mean C13-0")
    assert message.count("C13-") == 5  # five at most
    with pytest.raises(ValueError) as info:
        claims.find("13", known)  # half alike: still suggested
    assert str(info.value) == ("claim_id='13' is not in claims.yaml; did you mean C13-08, "
                               "C13-07, C13-06, C13-05, C13-04?")
    with pytest.raises(ValueError) as info:
        claims.find("Q99", known[:2])
    assert str(info.value) == ("claim_id='Q99' is not in claims.yaml; known ids: "
                               "C13-01, C13-02")


# ---------------------------------------------------------------- verdicts


def test_speedup_reproduced_with_the_planted_ratios(tmp_path, evidence):
    result = one(tmp_path, evidence, GPU, SPEEDUP)
    assert result["verdict"] == "reproduced", result.reason
    lo, hi = result["value"]
    assert 8.0 <= lo <= hi <= 12.0  # the fastest fused row, not the faster sdpa_math one
    assert result["unit"] == "×" and value_text(result).startswith(f"{lo:.3g}")
    assert "× (95 %: " in value_text(result)  # with the interval of the paired ratios
    assert result["judged_on"]["dtype"] == ["float16"]


def test_speedup_not_reproduced_reports_the_value_here_in_the_stand_in_dtype(tmp_path,
                                                                              evidence):
    """The CPU machine has fp32 (2-3x) and bf16 (20-30x) rows: only fp32 decides."""
    result = one(tmp_path, evidence, CPU, SPEEDUP)
    assert result["verdict"] == "not reproduced"
    lo, hi = result["value"]
    assert 2.0 <= lo <= hi <= 3.0  # no bf16 value pooled in
    assert "dtype=float32" in result.reason and "bfloat16" not in result.reason


@pytest.mark.parametrize(("bad", "verdict"), [(None, "reproduced"),
                                              (math.inf, "not reproduced"),
                                              (math.nan, "not reproduced")])
def test_does_not_overflow_is_every_precisions_output_finite(tmp_path, evidence, rnd, bad,
                                                             verdict):
    """C13-44 as claims.yaml reads it: every block-wise row at x40 finite, in each
    precision; bf16's error 4e-3 (far from fp32's) is no overflow, an inf or a NaN is."""
    rows = correctness_rows(rnd)
    for r in rows:
        if r.get("score_scale") == 30:
            r["score_scale"] = 40
    at40 = [r for r in rows if r.get("score_scale") == 40 and r["dtype"] == "bfloat16"]
    if bad is not None:
        at40[1]["max_abs_err"] = bad
    write_stage(evidence, CPU, "correctness", rows, "cpu")
    result = one(tmp_path, evidence, CPU, _claims_yaml("C13-44")[0])
    assert result["verdict"] == verdict and "bfloat16" in result.reason
    assert ("float32" in result.reason) == (bad is None)  # else the failing precision alone


def test_an_oom_row_inside_the_scope_is_named_and_the_subset_said(tmp_path, evidence, rnd):
    rows = prefill_rows(rnd, "float32", (8.0, 12.0), (14.0, 22.0),
                        lengths=(1024, 2048, 4096, 8192))
    for r in rows:
        if r["T"] == 8192:
            r.update({k: None for k in r if k.endswith(("_ms", "ratio", "_low", "_high"))},
                     status="oom", cause="memory", peak_extra_bytes=None)
    write_stage(evidence, CPU, "prefill", rows, "cpu")
    check = {**SPEEDUP, "scope": {"T": [1024, 2048, 4096, 8192], "causal": [True]}}
    result = one(tmp_path, evidence, CPU, check)
    assert result["verdict"] == "reproduced"
    assert result["judged"][0]["missing"][0] | {"statuses": None} == {
        "column": "T", "value": 8192, "kind": "device_cannot", "statuses": None}
    assert "1 value(s) of T not measured here: 8192: 6 row(s) out of memory (" \
        in result.reason


def test_probe_rows_are_checkable(tmp_path, evidence):
    check = {"stage": "probe", "device": "cuda", "dtype": "float16",
             "where": {"backend": "flash"},
             "value": {"column": "ran", "stat": "max"}, "expect": {"equals": False}}
    result = one(tmp_path, evidence, GPU, check, "device-specific")
    assert result["verdict"] == "reproduced" and result["value"] is False


@pytest.mark.parametrize(("machine", "check", "value"), [
    # the causal pair fraction, checked against the rows
    (CPU, {"stage": "correctness", "dtype": "any",
           "where": {"check": "causal_pairs", "block_q": 128},
           "value": {"column": "pair_fraction", "stat": "range"}, "expect": {"approx": 0.53}},
     pytest.approx(136 / 256)),
    # a memory ratio joins rows of two implementations: naive ~ T^2, fused ~ T, the ratio ~ T
    (GPU, {"stage": "prefill", "ratio": {
        "numerator": {"where": {"impl": "naive"}},
        "denominator": {"where": {"fused_sdpa": True}, "best": BEST},
        "join": ["T", "dtype", "causal"], "column": "peak_extra_bytes",
        "stat": "loglog_slope", "x": "T", "by": ["causal"]}, "expect": {"min": 0.5}},
     pytest.approx([1.0, 1.0], abs=0.3))])
def test_a_check_is_reproduced_with_the_planted_value(tmp_path, evidence, machine, check,
                                                      value):
    result = one(tmp_path, evidence, machine, check)
    assert result["verdict"] == "reproduced" and result["value"] == value


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
    assert "no longer matches register version 1" in result.reason
    assert result["verdict"] == "not measurable here" and "cannot be read" in result.reason


# ---------------------------------------------------------------- between runs


def test_a_between_run_claim_reads_the_spread_of_the_series(tmp_path, evidence, rnd):
    """Two runs made alike in the series: the fused time at 4096 differs by 60 % between
    them, the series' largest difference between two runs."""
    first = prefill_rows(rnd, "float16", (8.0, 12.0), (14.0, 22.0))
    second = [dict(r) for r in first]
    for r in second:
        if r["impl"] == "sdpa_flash" and r["T"] == 4096:
            r["median_ms"] *= 1.6
    write_stage(evidence, GPU, "series", series_rows(prefill=[first, second]), "cuda")
    check = {"stage": "prefill", "between_runs": True,
             "scope": {"T": [4096], "causal": [True]}, "where": {"fused_sdpa": True},
             "best": {"by": ["T", "dtype", "causal"], "lowest": "median_ms_new"},
             "value": {"column": "median_ms_spread", "stat": "max"},
             "expect": {"between": [0.5, 0.7]}}
    result = one(tmp_path, evidence, GPU, check, kind="between-run")
    assert result["value"] == pytest.approx(0.6)
    assert result["verdict"] == "reproduced"
    assert result["artifact"]["stage"] == "series"


def test_a_between_run_claim_with_one_run_is_not_measurable(tmp_path, evidence, rnd):
    rows = prefill_rows(rnd, "float32", (1.5, 3.0), (1.5, 2.5))
    write_stage(evidence, CPU, "series", series_rows(prefill=rows), "cpu")
    check = {"stage": "prefill", "between_runs": True,
             "value": {"column": "median_ms_spread", "stat": "max"}, "expect": {"max": 1}}
    result = one(tmp_path, evidence, CPU, check, kind="between-run")
    assert result["verdict"] == "not measurable here"
    assert result["cause"]["kind"] == "too_few_runs"


def map_row(case: str, can_run: bool, **cells) -> dict:
    row = {"case": case, "dtype": "float32", "causal": False, "T": 256, "heads": 4,
           "kv_heads": 4, "d": 64, "mask": None, "dropout_p": 0.0, "backend": "flash",
           "can_run": can_run, "ran": can_run, "reason": None if can_run else "head dim",
           "reason_source": "pytorch", "limit_kind": None if can_run else "input",
           "op": None, "error": None}
    return {**row, **cells}


@pytest.mark.parametrize(("refused", "verdict"), [(True, "reproduced"),
                                                   (False, "not reproduced")])
def test_a_check_reads_the_backend_map(tmp_path, evidence, refused, verdict):
    """C13-52 and Q13-16: "can disable the fast paths" holds where one case is refused."""
    probe = probe_json("cpu", [{"backend": "flash", "ran": True, "dtype": "float32"}])
    probe["backend_map"] = [map_row("d=64", True), map_row("d=256", not refused, d=256)]
    write_stage(evidence, CPU, "probe", probe, "cpu")
    check = {"stage": "probe", "table": "backend_map", "dtype": "each",
             "where": {"backend": "flash", "case": ["d=64", "d=256"]},
             "value": {"column": "can_run", "stat": "min"}, "expect": {"equals": False}}
    assert one(tmp_path, evidence, CPU, check)["verdict"] == verdict


def test_a_probe_without_a_backend_map_is_not_probed(tmp_path, evidence):
    check = {"stage": "probe", "table": "backend_map", "dtype": "any",
             "where": {"backend": "flash"}, "value": {"column": "can_run", "stat": "min"},
             "expect": {"equals": False}}
    result = one(tmp_path, evidence, CPU, check)
    assert result["verdict"] == "not measurable here"
    assert "backend_map: not probed" in result.reason
    with pytest.raises(ValueError, match="names column 'bogus'"):
        claims.load(write_claims(tmp_path, claim("C13-01", {
            **check, "where": {"bogus": 1}})))


MEDIAN_AT_MOST_1 = {"stage": "prefill", "value": {"column": "median_ms", "stat": "max"},
                   "expect": {"max": 1}}


@pytest.mark.parametrize(("check", "kind", "message"), [
    (MEDIAN_AT_MOST_1, "device-specific", "claim C13-04 is device-specific but names no device"),
    ({"stage": "correctness", "between_runs": True,
      "value": {"column": "max_abs_err", "stat": "max"}, "expect": {"max": 1}}, "between-run",
     "claim C13-04 compares runs of 'correctness', which times nothing"),
    ({**MEDIAN_AT_MOST_1, "value": {"column": "median_ms", "unit": "MiB", "stat": "max"}},
     "measured", "claim C13-04, field check.value.unit: unit='MiB' converts from a *_bytes "
     "column, not 'median_ms'"),
    # an unknown column, in each part of a check: its close matches, or none
    ({**SPEEDUP, "where": {"fused_sdpx": True}}, "measured", "claim C13-04 names column "
     "'fused_sdpx', which prefill.csv does not have; did you mean fused_sdpa?"),
    ({**SPEEDUP, "scope": {"tokens": [1024]}}, "measured", "claim C13-04 names column "
     "'tokens', which prefill.csv does not have; did you mean workers?"),
    ({**SPEEDUP, "best": {**BEST, "lowest": "median"}}, "measured", "claim C13-04 names "
     "column 'median', which prefill.csv does not have; did you mean median_ms?"),
    ({**SPEEDUP, "value": {**SPEEDUP["value"], "column": "ratios"}}, "measured", "claim "
     "C13-04 names column 'ratios', which prefill.csv does not have; did you mean ratio, "
     "ratio_to, ratio_run_sd?"),
    ({**SPEEDUP, "value": {**SPEEDUP["value"], "by": ["T", "kernal"]}}, "measured", "claim "
     "C13-04 names column 'kernal', which prefill.csv does not have; did you mean kernel?"),
    ({"stage": "prefill", "ratio": {
        "numerator": {"where": {"impl": "naive"}}, "denominator": {"where": {"impl": "x"}},
        "join": ["T", "dtype", "mask"], "column": "peak_extra_bytes", "stat": "range"},
      "expect": {"direction": "<1"}}, "measured",
     "claim C13-04 names column 'mask', which prefill.csv does not have"),
    ({**SPEEDUP, "where": {"ratio_ci": 1}}, "measured", "claim C13-04 names column "
     "'ratio_ci', which prefill.csv does not have; did you mean ratio_ci_low, ratio, "
     "ratio_ci_high?"),
    ({**SPEEDUP, "where": {"zzzz": True}}, "measured",
     "claim C13-04 names column 'zzzz', which prefill.csv does not have"),
    ({"stage": "prefill", "table": "backend_map",
      "value": {"column": "median_ms", "stat": "max"}, "expect": {"max": 1}}, "measured",
     "claim C13-04, field check.table: table='backend_map' names a list of probe.json; stage "
     "is 'prefill'"),
    ({"stage": "prefill", "value": {"column": "median_ms", "per": "output", "stat": "max"},
      "expect": {"max": 1}}, "measured",
     "claim C13-04, field check.value.per: per='output' counts a *_bytes column in tensors "
     "(no unit), not 'median_ms' with unit None"),
    ({"stage": "prefill", "value": {"column": "peak_extra_bytes", "unit": "MiB",
                                    "per": "output", "stat": "max"},
      "expect": {"max": 1}}, "measured",
     "claim C13-04, field check.value.per: per='output' counts a *_bytes column in tensors "
     "(no unit), not 'peak_extra_bytes' with unit 'MiB'"),
])
def test_a_check_that_cannot_be_judged_fails_to_load_saying_why(tmp_path, check, kind,
                                                                message):
    """Each message matched whole, after the file's name."""
    path = write_claims(tmp_path, claim("C13-04", check, kind))
    with pytest.raises(ValueError, match=f": {re.escape(message)}$"):
        claims.load(path)


def test_only_a_question_goes_without_an_expectation(tmp_path):
    """The schema asks every other kind for check.expect; the loader's own check says so
    too, for a Claim made in code."""
    import dataclasses

    loaded = claims.load(write_claims(tmp_path, claim("C13-04", MEDIAN_AT_MOST_1))).claims[0]
    bare = dataclasses.replace(loaded, check=dataclasses.replace(loaded.check, expect=None))
    with pytest.raises(ValueError, match=re.escape(
            "claims.yaml: claim C13-04 has no check.expect; only a question (kind: question) "
            "may be answered without one") + "$"):
        claims._check_claim(bare, "claims.yaml")
    claims._check_claim(dataclasses.replace(bare, kind="question"), "claims.yaml")


def test_the_backend_maps_derived_columns_take_the_max_over_backends():
    """base_can_run: the backend at the base case (d=64, no mask, MHA) in that dtype;
    fused_can_run: any fused backend on this case (the math path alone: False)."""
    from inferlab.judging.claims import FUSED_BACKENDS, map_base_case, map_derived
    from inferlab.measurement.backends import FUSED_SDPA

    assert FUSED_BACKENDS == FUSED_SDPA
    runs = {("d=64", "float16"): {"flash", "efficient", "math"},
            ("d=64", "float32"): {"efficient", "math"},
            ("d=32", "float16"): {"flash", "efficient", "math"},
            ("gqa 12:3", "float16"): {"flash", "math"},
            ("gqa 12:3", "float32"): {"math"}}
    shape = {"d=32": {"d": 32}, "gqa 12:3": {"kv_heads": 3}}
    rows = [map_row(case, b in ran, dtype=dtype, backend=b, **shape.get(case, {}))
            for (case, dtype), ran in runs.items() for b in ("flash", "efficient", "math")]
    assert map_base_case(rows) == "d=64"
    got = {(r["case"], r["dtype"], r["backend"]): (r["base_can_run"], r["fused_can_run"])
           for r in map_derived(rows)}
    # efficient runs the base case and not GQA: GQA disables a fast path in float16
    assert got[("gqa 12:3", "float16", "efficient")] == (True, True)
    # flash does not run the base case in float32: its refusal disables nothing there
    assert got[("gqa 12:3", "float32", "flash")] == (False, False)
    # in float32 GQA leaves only the math path
    assert got[("gqa 12:3", "float32", "math")][1] is False
    assert got[("d=32", "float16", "flash")] == (True, True)


@pytest.mark.parametrize("key,disables,only_math", [
    ("cuda-nvidia-h200", True, True), ("cpu-amd-epyc-avx512bf16-2c", False, False)])
def test_the_committed_backend_maps_answer_the_fast_path_questions(key, disables, only_math):
    """C13-52 (a case disables a fused backend that runs the base case) and Q13-16 (a case
    leaves only the math path) on the committed maps: on the H200, GQA refuses the
    efficient backend and a boolean mask flash, and fp32 GQA has no fused backend."""
    from inferlab.judging.claims import FUSED_BACKENDS, map_derived

    path = Path(__file__).resolve().parent.parent / "results" / key / "probe.json"
    if not path.is_file():
        pytest.skip(f"no committed {path}")
    cases = {"d=32", "d=80", "d=96", "d=128", "d=192", "d=256", "gqa 12:3", "bool mask",
             "causal"}
    rows = [r for r in map_derived(json.loads(path.read_text())["backend_map"])
            if r["case"] in cases]
    assert any(r["backend"] in FUSED_BACKENDS and r["base_can_run"] and not r["can_run"]
               for r in rows) is disables
    assert (not all(r["fused_can_run"] for r in rows)) is only_math


# ---------------------------------------------------------------- facts the readings state
#
# A why (or a premise's measurement) that states a fact about this code or its evidence
# states one a test holds: these read the committed files it cites.

ROOT_DIR = Path(__file__).resolve().parent.parent
NCU_BYTES = ROOT_DIR / "docs" / "gpu-runs" / "2026-12-04" / "call1" / "ncu-bytes.csv"
H200 = ROOT_DIR / "results" / "cuda-nvidia-h200"


def committed_h200(name: str) -> pd.DataFrame:
    if not (H200 / name).is_file():
        pytest.skip(f"no committed {H200 / name}")
    return pd.read_csv(H200 / name)


def c13_21_premise(name: str) -> claims.Premise:
    (premise,) = [p for p in claims.find("C13-21", claims.load().claims).check.premises
                  if p.name == name]
    return premise


def test_the_dram_count_the_refuted_premise_states_holds_on_the_committed_evidence():
    """The premise kv_read_per_query_tile states the H200's one Nsight Compute count (4,096
    tokens, full mask): each fused kernel read Q, K and V about once, against the model's
    415 and 818 MB; naive attention moved about 84 times their bytes (the model: 3.9), and
    the measured speed-ups there are a tenth or less of that. Each figure it prints is
    recomputed here from ncu-bytes.csv and traffic.csv."""
    premise = c13_21_premise("kv_read_per_query_tile")
    text = premise.measured
    ncu = pd.read_csv(NCU_BYTES).set_index("case")
    moved = ncu["dram_read_bytes"] + ncu["dram_write_bytes"]
    fused = moved.drop("naive")
    qkv = 3 * 12 * 4096 * 64 * 2  # Q, K and V once, fp16
    assert (ncu.loc[fused.index, "dram_read_bytes"].between(qkv, 1.01 * qkv)).all()
    assert f"moved {fused.min() / 1e6:.1f} to {fused.max() / 1e6:.1f} MB" in text
    model = ncu["model_bytes"]
    assert (f"the model counts {model['triton_flash block=128'] / 1e6:.0f} MB at B_q = 128 "
            f"and {model['triton_flash block=64'] / 1e6:.0f} MB at 64") in text
    assert (f"naive attention moved {moved['naive'] / 1e6:,.0f} MB (the model: "
            f"{model['naive'] / 1e6:,.0f} MB)") in text
    byte_ratio = moved["naive"] / fused
    assert f"about {byte_ratio.min():.0f} to {byte_ratio.max():.0f} times" in text
    traffic = committed_h200("traffic.csv")
    point = traffic[(traffic["T"] == 4096) & ~traffic["causal"]]
    assert f"the model's ratio is {point['model_ratio'].max():.1f}" in text
    speedups = {}
    for case in fused.index:
        impl, _, block = case.partition(" block=")
        rows = point[point["fused_impl"] == impl]
        rows = rows[rows["block_q_model"] == int(block)] if block else \
            rows[rows["tile"] == "assumed"]
        speedups[case] = float(rows["measured_ratio"].iloc[0])
    speedups = pd.Series(speedups)
    assert f"({speedups.min():.1f} to {speedups.max():.1f})" in text
    share = speedups / byte_ratio
    assert f"are {share.min():.2f} to {share.max():.2f} of" in text
    halved = claims.find("C13-45", claims.load().claims).reading.why
    read = ncu["dram_read_bytes"] / 1e6
    assert f"{read['triton_flash block=64']:.1f}" == f"{read['triton_flash block=128']:.1f}"
    assert f"the same {read['triton_flash block=64']:.1f} MB at B_q 64 and 128" in halved
    kernels = ncu["kernels"].str.count("; ") + 1
    assert kernels["naive"] == 3 and (kernels.drop("naive") == 1).all()  # sentences.yaml


def test_the_fused_kernels_bandwidth_the_refuted_premise_states_holds_on_the_evidence():
    """The premise fused_bytes_bound states how fast each fused kernel moved its bytes at
    the same point: its Nsight Compute bytes over its median time in prefill.csv, against
    the probe's copy ceiling. Each figure it prints is recomputed here."""
    premise = c13_21_premise("fused_bytes_bound")
    assert premise.refuted_on == ("cuda-nvidia-h200",)
    ncu = pd.read_csv(NCU_BYTES).set_index("case")
    moved = (ncu["dram_read_bytes"] + ncu["dram_write_bytes"]).drop("naive")
    prefill = committed_h200("prefill.csv")
    point = prefill[(prefill["T"] == 4096) & (prefill["dtype"] == "float16")
                    & ~prefill["causal"]]
    gbs = {}
    for case, moved_bytes in moved.items():
        impl, _, block = case.partition(" block=")
        rows = point[point["impl"] == impl]
        rows = rows[rows["block_q"] == int(block)] if block else rows
        gbs[case] = moved_bytes / (float(rows["median_ms"].iloc[0]) * 1e-3) / 1e9
    gbs = pd.Series(gbs)
    copy = json.loads((H200 / "probe.json").read_text())["ceilings"]["copy_gbs"]
    text = " ".join(premise.measured.split())
    assert f"its {moved.min() / 1e6:.1f} to {moved.max() / 1e6:.1f} MB" in text
    assert f"at {gbs.min():.0f} to {gbs.max():.0f} GB/s" in text
    assert (f"{100 * gbs.min() / copy:.1f} to {100 * gbs.max() / copy:.1f} % of the probe's "
            f"{copy:,.0f} GB/s copy ceiling") in text


def test_the_tiled_loop_keeps_its_tiles_in_float32_whatever_the_input_dtype():
    """C13-02's why: what the loop keeps alive at its peak beside the output is in float32
    for an fp16 input too, so its peak in outputs is not dtype-free."""
    import torch
    from torch.overrides import TorchFunctionMode

    from inferlab.algorithms.attention import tiled_attention

    class Tiles(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.dtypes: set = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in (torch.Tensor.__matmul__, torch.exp, torch.Tensor.sum):
                self.dtypes.add(out.dtype)
            return out

    g = torch.Generator().manual_seed(SEED)
    q, k, v = (torch.randn(1, 2, 300, 64, generator=g).to(torch.float16) for _ in range(3))
    with Tiles() as seen:
        out, _ = tiled_attention(q, k, v, causal=True, block_q=128, block_k=128)
    assert seen.dtypes == {torch.float32} and out.dtype == torch.float16


def test_what_a_fused_kernel_allocates_beside_its_output_varies_as_c13_04_says():
    """C13-04's why: on the H200 the flash backend allocated 9.2 outputs at 1,024 tokens and
    1.03 at 4,096 (a fused kernel's extra memory is not always one output)."""
    prefill = committed_h200("prefill.csv")
    flash = prefill[(prefill["impl"] == "sdpa_flash") & prefill["peak_extra_bytes"].notna()]
    outputs = (flash["peak_extra_bytes"] / (flash["batch"] * flash["heads"] * flash["T"]
                                            * flash["d"] * 2)).groupby(flash["T"]).max()
    why = claims.find("C13-04", claims.load().claims).reading.why
    assert (f"{outputs[1024]:.1f} outputs at 1,024 tokens and {outputs[4096]:.2f} at 4,096"
            in why)


def test_c13_46_s_chapter_value_names_the_spread_its_region_accepts():
    """C13-46's label names the bound its region accepts (the printed bounds at their
    rounding, 1,075 / 350), not the printed ratio (1,070 / 400)."""
    c46 = claims.find("C13-46", claims.load().claims)
    low, high = 400 - claims.printed_rounding(400), 1070 + claims.printed_rounding(1070)
    assert c46.check.expect.target == pytest.approx(high / low - 1, abs=0.005)
    assert f"at most {high / low:.2f}, {high:,.0f}/{low:.0f}" in c46.chapter_value


CPUS = ("cpu-amd-epyc-avx2-2c", "cpu-amd-epyc-avx512bf16-2c")


@pytest.mark.parametrize("key", CPUS)
def test_c13_40_on_the_cpus_the_loop_wins_only_under_causal_as_its_why_says(key):
    """C13-40's why: on both CPUs the tiled loop (blocks of 128, fp32) is slower than naive
    attention with the full mask at every length measured, and faster only under causal,
    where it skips the tiles above the diagonal (not for its caches)."""
    path = ROOT_DIR / "results" / key / "series.csv"
    if not path.is_file():
        pytest.skip(f"no committed {path}")
    series = pd.read_csv(path)
    tiled = series[(series["stage"] == "prefill") & (series["impl"] == "tiled")
                   & (series["block_q"] == 128) & (series["dtype"] == "float32")
                   & (series["heads"] == 12)]
    per_point = tiled.groupby(["T", "causal"])["ratio"].median()
    full, causal = per_point.xs(False, level="causal"), per_point.xs(True, level="causal")
    assert (full > 1).all() and not full.empty
    assert (causal < 1).all() and not causal.empty
    why = claims.find("C13-40", claims.load().claims).reading.why
    assert "faster than naive attention only under causal, by that skip" in why
    assert "slower with the full mask" in why


@pytest.mark.parametrize("block", [64, 128])
@pytest.mark.parametrize("d", [32, 64])
def test_q13_07_the_loop_s_excess_flops_are_its_scale_multiply_and_its_rescale(block, d):
    """Q13-07's why: over naive attention's 4·T²·d (per head), the profiler counts for the
    loop T² more for its separate multiply by the scale (1/(4d): naive attention folds the
    scale into its product) and 2·T·d per key tile for the accumulator's rescale and add
    (1/(2B_k)), plus 2·T per key tile for the normaliser's ('only the rescale, about
    1/B_k' would match at d = 64 and B_k = 128 by coincidence alone)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from inferlab.algorithms.attention import naive_attention, tiled_attention

    B, H, T = 1, 2, 2 * block
    g = torch.Generator().manual_seed(SEED)
    q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
    counted = []
    for fn in (lambda: tiled_attention(q, k, v, False, block, block),
               lambda: naive_attention(q, k, v)):
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            fn()
        counted.append(sum(e.flops or 0 for e in prof.events()))
    tiles = T // block
    assert counted[1] == B * H * 4 * T * T * d
    assert counted[0] - counted[1] == B * H * (T * T + 2 * T * d * tiles + 2 * T * tiles)
    why = claims.find("Q13-07", claims.load().claims).reading.why
    assert "1/(4d) from its separate multiply of each score tile by the scale" in why
    assert "1/(2B_k) from the accumulator's rescale and add once per key tile" in why
