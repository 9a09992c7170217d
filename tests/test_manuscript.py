"""The manuscript stage (the values of the chapter's four tables and its numbers, rendered
as Markdown, LaTeX and JSON) on synthetic evidence of two machines
(tests/report_evidence.py). The report's "For the manuscript" section is
tests/test_report.py's, ``inferlab manuscript check`` tests/test_manuscript_check.py's."""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from report_evidence import traffic_rows, two_machines
from test_claims import CPU, GPU, SEED, write_stage

from inferlab.core import layout
from inferlab.core.pipeline import stage
from inferlab.evidence import artifacts
from inferlab.evidence.register import load_evidence
from inferlab.judging.claims import load
from inferlab.presentation.manuscript import (
    backends_table,
    decode_table,
    latex_text,
    macro_name,
    numbers_file,
    numbers_tex,
    tables_of,
)
from inferlab.stages import manuscript as manuscript_stage
from inferlab.workflow.runner import StageContext, write_derived

CHAPTER_DIR = layout.REPO_ROOT / "docs" / "chapter"
SEEDS = ("chapter.txt", "qa.txt")
DEVICE = {CPU: "cpu", GPU: "cuda"}


def make_manuscript(root: Path, key: str) -> dict:
    """Run the manuscript stage on ``key`` as the runner does; write it and its files."""
    reads = stage("manuscript").reads
    ctx = StageContext("manuscript", root, key, DEVICE[key], 1, SEED,
                       {name: load_evidence(root, key, name) for name in reads})
    params = manuscript_stage.Params(128, (1024, 2048, 4096, 8192))
    content = artifacts.encode("manuscript", manuscript_stage.run(params, ctx))
    write_stage(root, key, "manuscript", json.loads(content), DEVICE[key])
    write_derived(root, key, "manuscript", manuscript_stage, content)
    return json.loads(content)


@pytest.fixture(scope="module")
def two_keys(tmp_path_factory) -> Path:
    root = two_machines(tmp_path_factory.mktemp("manuscript"))
    gpu_series = artifacts.read(layout.artifact_path(root, GPU, "series"), "series").frame
    write_stage(root, GPU, "traffic", traffic_rows(gpu_series, "cuda"), "cuda")
    for key in (CPU, GPU):
        make_manuscript(root, key)
    return root


def manuscript(root: Path, key: str) -> dict:
    return artifacts.read(layout.artifact_path(root, key, "manuscript"), "manuscript")


def by_name(data: dict, name: str) -> dict:
    """A table as people read it, rendered from the artifact's values."""
    return next(t for t in tables_of(data) if t["name"] == name)


# ------------------------------------------------------------------ the stage


@pytest.mark.parametrize("key", [CPU, GPU])
def test_every_key_gets_the_four_tables_a_number_per_claim_and_its_files(two_keys, key):
    """The derived files are the ones the artifact records, by sha256."""
    data = manuscript(two_keys, key)
    assert list(data["tables"]) == ["traffic", "prefill", "backends", "decode"]
    assert [t["name"] for t in tables_of(data)] == list(data["tables"])
    claims = artifacts.read(layout.artifact_path(two_keys, key, "claims"), "claims")
    assert [n["claim"] for n in data["numbers"]] == [c["id"] for c in claims["claims"]]
    assert data["dtype"] == {CPU: "float32", GPU: "float16"}[key]
    assert sorted(data["files"]) == sorted(stage("manuscript").derived)
    for name, sha in data["files"].items():
        path = layout.derived_path(two_keys, key, "manuscript", name)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


def test_a_length_a_machine_did_not_measure_says_so_and_why(two_keys):
    cpu = {row[0]: row for row in by_name(manuscript(two_keys, CPU), "prefill")["rows"]}
    gpu = {row[0]: row for row in by_name(manuscript(two_keys, GPU), "prefill")["rows"]}
    assert list(cpu) == ["1,024", "2,048", "4,096", "8,192"]
    assert cpu["8,192"][1].startswith("not measured here: ") and "grid" in cpu["8,192"][1]
    assert not cpu["1,024"][1].startswith("not measured")
    assert all(not cell.startswith("not measured") for cell in gpu["8,192"][1:])


def test_the_traffic_tables_elements_give_the_models_ratio(two_keys):
    traffic = artifacts.read(layout.artifact_path(two_keys, CPU, "traffic"), "traffic").frame
    model = {int(r.T): r.model_ratio for r in traffic.itertuples()
             if r.causal and r.tile == "assumed"}
    rows = manuscript(two_keys, CPU)["tables"]["traffic"]
    assert [r["T"] for r in rows] == [1024, 2048, 4096, 8192]
    for row in rows:
        assert row["naive_elements"] / row["tiled_elements"] == \
            pytest.approx(model[row["T"]], rel=1e-9)
    text = by_name(manuscript(two_keys, CPU), "traffic")["rows"]
    assert [r[1] for r in text] == [f"{r['naive_elements']:,}" for r in rows]


def test_decode_table_gives_fused_over_split_kv_over_every_split_count():
    rnd = random.Random(SEED)
    fused_ms = rnd.uniform(0.5, 2.0)
    split = {s: fused_ms * rnd.uniform(0.4, 3.0) for s in (1, 4, 16)}
    rows = [dict(impl="sdpa_efficient", fused_sdpa=True, cache_len=4096, batch=1,
                 dtype="float16", splits=None, median_ms=fused_ms, ratio=1.0, status="ok"),
            dict(impl="sdpa_math", fused_sdpa=False, cache_len=4096, batch=1, dtype="float16",
                 splits=None, median_ms=fused_ms / 10, ratio=0.1, status="ok")]
    rows += [dict(impl="splitkv", fused_sdpa=False, cache_len=4096, batch=1, dtype="float16",
                  splits=s, median_ms=ms, ratio=ms / fused_ms, status="ok")
             for s, ms in split.items()]
    values = manuscript_stage.decode_values(pd.DataFrame(rows), "float16")
    assert values[0]["fused"]["impl"] == "sdpa_efficient" and values[0]["splits"] == [1, 16]
    (row,) = decode_table(values, "float16")["rows"]
    low, high = (float(x) for x in row[-1].rstrip("×").split("–"))
    assert low == pytest.approx(fused_ms / max(split.values()), rel=5e-3)
    assert high == pytest.approx(fused_ms / min(split.values()), rel=5e-3)
    assert "sdpa_efficient" in row[2]  # sdpa_math writes the score matrix: not "fused"
    assert row[4] == "1–16"


@pytest.mark.parametrize("same", [True, False])
def test_backends_table_gives_one_row_per_backend_when_the_masks_agree(same):
    reasons = {False: "needs sm80", True: "needs sm80" if same else "no causal mask here"}
    probe = {"availability": [
        {"dtype": "float16", "causal": causal, "T": 1024, "heads": 12, "d": 64,
         "backend": "flash", "can_run": False, "ran": False, "reason": reasons[causal],
         "reason_source": "pytorch", "limit_kind": "hardware"} for causal in (False, True)]}
    rows = backends_table(manuscript_stage.backends_values(probe, "float16"), "float16")["rows"]
    assert [r[1] for r in rows] == (["both"] if same else ["full", "causal"])
    assert {r[3] for r in rows} == set(reasons.values())


# ------------------------------------------------------------------ numbers.tex


NEWCOMMAND = re.compile(r"^\\newcommand\{\\([A-Za-z]+)\}\{(.*)\}$")


def parse_numbers_tex(text: str) -> dict[str, tuple[str, str]]:
    """macro -> (its body, the provenance comment above it); fails on anything else."""
    lines = text.splitlines()
    macros = {}
    for i, line in enumerate(lines):
        if line.startswith(("%", r"\providecommand{\ILcheck}")):
            continue
        match = NEWCOMMAND.match(line)
        assert match, f"line {i + 1} is neither a comment nor one \\newcommand: {line!r}"
        name, body = match.groups()
        assert name not in macros, f"\\{name} defined twice"
        assert body.count("{") == body.count("}"), f"unbalanced braces in \\{name}: {body}"
        assert lines[i - 1].startswith("% "), f"\\{name} has no provenance comment"
        macros[name] = (body, lines[i - 1])
    return macros


def test_numbers_tex_has_one_macro_per_claim_with_its_provenance(two_keys):
    data = {"numbers": numbers_file(manuscript(two_keys, CPU))}
    text = layout.derived_path(two_keys, CPU, "manuscript", "numbers.tex").read_text()
    macros = parse_numbers_tex(text)
    assert len(macros) == len(data["numbers"])
    for n in data["numbers"]:
        body, comment = macros[n["macro"]]
        assert comment.startswith(f"% {n['claim']} ") and n["verdict"] in comment
        if n["artifact"]:
            assert (n["sha256"] or "sha256 not recorded") in comment
            assert n["artifact"] in comment
            assert n["commit"] is None or n["commit"] in comment
        assert body.startswith(r"\ILcheck{") == (n["verdict"] != "reproduced")
    assert {n["marked"] for n in data["numbers"]} == {True, False}


def test_new_verdicts_and_kinds_flow_through_and_are_marked():
    claims = {"claims": [
        {"id": "C13-77", "kind": "question", "verdict": "within noise here", "value": 1.5,
         "interval": [1.2, 1.9], "unit": "×",
         "artifact": {"stage": "prefill", "path": "results/k/prefill.csv", "version": 3,
                      "sha256": "a" * 64}},
        {"id": "Q13-12", "kind": "measured", "verdict": "reproduced", "value": 0.25,
         "interval": None, "unit": "", "artifact": None}]}
    values = manuscript_stage.named_numbers(claims, {"C13-77": ["1.5"]},
                                            {("prefill", 3): "c0ffee"})
    assert "text" not in values[0] and "macro" not in values[0]  # the artifact holds values
    numbers = numbers_file({"numbers": values})
    assert [(n["marked"], n["interval"], n["commit"], n["figures"]) for n in numbers] == \
        [(True, [1.2, 1.9], "c0ffee", ["1.5"]), (False, None, None, [])]
    macros = parse_numbers_tex(numbers_tex(numbers, "k"))
    assert macros["ILCThirteenSeventySeven"][0] == r"\ILcheck{1.50\ensuremath{\times}}"
    assert macros["ILQThirteenTwelve"][0] == "0.250"
    assert "within noise here" in macros["ILCThirteenSeventySeven"][1]


def test_every_claim_id_gets_its_own_letters_only_macro():
    names = [macro_name(c.id) for c in load().claims]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z]+", n) for n in names)


@pytest.mark.parametrize(("text", "latex"), [
    ("50 % of B_q & #1 {x} 3–4×", r"50 \% of B\_q \& \#1 \{x\} 3--4\ensuremath{\times}"),
    # <, > and | print as other glyphs in LaTeX's default encoding
    ("a < b > c | d", r"a \textless{} b \textgreater{} c \textbar{} d"),
    ("≥ 2", r"\ensuremath{\geq} 2"),  # pdflatex stops on a character it cannot map
    ("é ≤ 中 \u2028 “q”", r"e \ensuremath{\leq} \texttt{[U+4E2D]} \texttt{[U+2028]} ``q''")])
def test_latex_text_escapes_markup_and_maps_any_unicode_to_ascii(text, latex):
    assert latex_text(text) == latex


TEX_ENGINES = ("pdflatex", "lualatex", "xelatex")


def test_numbers_tex_and_tables_tex_build_into_a_latex_document(two_keys, tmp_path):
    engine = next(filter(None, map(shutil.which, TEX_ENGINES)), None)
    if engine is None:
        pytest.skip(f"no TeX engine on the PATH ({', '.join(TEX_ENGINES)}); numbers.tex is "
                    "still parsed as text by test_numbers_tex_has_one_macro_per_claim_...")
    folder = layout.derived_path(two_keys, GPU, "manuscript", "numbers.tex").parent
    macros = parse_numbers_tex((folder / "numbers.tex").read_text())
    shutil.copy(folder / "numbers.tex", tmp_path)
    shutil.copy(folder / "tables.tex", tmp_path)
    uses = " ".join(f"\\{m}" for m in macros)
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\\usepackage[utf8]{inputenc}\\usepackage{booktabs}"
        "\\usepackage{graphicx}\\input{numbers.tex}\\begin{document}" + uses
        + "\\resizebox{\\textwidth}{!}{x}\\input{tables.tex}\\end{document}\n")
    result = subprocess.run([engine, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]


def test_the_runner_refuses_derived_files_the_stage_does_not_declare(two_keys, tmp_path):
    class Module:
        @staticmethod
        def derived_files(data):
            return {"tables.md": b"x", "extra.txt": b"y"}

    content = layout.artifact_path(two_keys, CPU, "manuscript").read_bytes()
    with pytest.raises(ValueError, match="extra.txt"):
        write_derived(tmp_path, CPU, "manuscript", Module, content)
    assert not (tmp_path / "results").exists()
