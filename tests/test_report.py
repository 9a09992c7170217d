"""The report: first screen, claims matrix, figures, raw data and provenance, read from
the HTML (well-formed, escaped, self-contained); the browser's view is tests/test_browser.py.
Evidence: two machines at the book's sizes (report_evidence.py)."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import torch
from markupsafe import escape
from report_evidence import CUDA_ONLY, EVIL, traffic_rows, two_machines
from test_claims import CPU, GPU, write_stage
from test_manuscript import make_manuscript

from inferlab.core import layout
from inferlab.core.pipeline import stage
from inferlab.evidence import artifacts
from inferlab.judging import claims
from inferlab.measurement.backend_map import cell, map_cases, map_rows
from inferlab.presentation import formats
from inferlab.presentation.claim_text import judged_on_brief, judged_on_text
from inferlab.presentation.formats import NOT_MEASURED, value_text
from inferlab.presentation.report import SECTIONS, figure_of, render_report, value_words
from inferlab.presentation.views.model import MODEL_WORDS

VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "path",
        "use", "rect", "circle", "line", "polyline", "polygon", "stop", "ellipse"}
FIGURE_IDS = {"backends", "exactness", "comparison", "decode", "traffic"}


class Page(HTMLParser):
    """Tags, ids (with repeats), the open tags at each table, and text per section."""

    def __init__(self, text: str):
        super().__init__()
        self.stack, self.problems, self.tags, self.ids = [], [], [], []
        self.tables: list[tuple[dict, list[str]]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if "id" in attrs:
            self.ids.append(attrs["id"])
        if tag == "table":
            self.tables.append((attrs, list(self.stack)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


@pytest.fixture(scope="module")
def evidence_root(tmp_path_factory) -> Path:
    return two_machines(tmp_path_factory.mktemp("root"))


@pytest.fixture(scope="module")
def report_html(evidence_root) -> tuple[str, Path]:
    path = render_report(evidence_root, layout.report_path(evidence_root), [CPU, GPU])
    return path.read_text(encoding="utf-8"), path


@pytest.fixture(scope="module")
def page(report_html) -> Page:
    return Page(report_html[0])


def recorded(root: Path, key: str) -> dict:
    return artifacts.read(layout.artifact_path(root, key, "claims"), "claims")


def section(text: str, section_id: str) -> str:
    start = text.index(f'<section id="{section_id}"')
    return text[start:text.index("</section>", start)]


def without_svg(text: str) -> str:
    return re.sub(r"<svg.*?</svg>", "", text, flags=re.S)


# ---------------------------------------------------------------- page


def test_the_page_is_well_formed_self_contained_and_its_figures_text(page, report_html):
    assert page.problems == [] and page.stack == []
    assert [i for i, n in Counter(page.ids).items() if n > 1] == []  # inside figures too
    assert {"svg", "text", "table", "style"} <= set(page.tags)
    assert not {"script", "link", "iframe", "img"} & set(page.tags)
    text = report_html[0]
    assert "DejaVuSans" not in text.replace("font-family", "")  # text, not outlined glyphs
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") \
        .replace('xmlns:xlink="http://www.w3.org/1999/xlink"', "")


def test_report_has_every_section_figure_and_claim(report_html, page):
    text = report_html[0]
    assert {key for key, _ in SECTIONS} | FIGURE_IDS <= set(page.ids)
    for claim in claims.load().claims:
        assert f"claim-{claim.id}" in page.ids
        for key in (CPU, GPU):
            assert f"prov-{claim.id}-{key}" in page.ids
            assert f'href="#prov-{claim.id}-{key}"' in text


def test_artifact_strings_are_escaped(report_html):
    text = report_html[0]
    assert EVIL not in text and "<script" not in text.lower()
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2  # probe reason, kernel


# ---------------------------------------------------------------- first screen, matrix


def test_claims_matrix_has_a_row_per_sentence_saying_verdict_value_and_basis(report_html,
                                                                            evidence_root):
    loaded = claims.load().claims
    by_id = {c.id: c for c in loaded}
    matrix = re.findall(r"<tr>.*?</tr>", section(report_html[0], "claims").split("</thead>")[1],
                        flags=re.S)
    assert len(matrix) == len({c.sentence for c in loaded}) < len(loaded)
    # claim id -> the row (a sentence of the chapter) that holds it
    rows = {m: row for row in matrix for m in re.findall(r'<li id="claim-([CQ]13-\d\d)"', row)}
    assert set(rows) == set(by_id)
    for claim in loaded:  # claims that share a sentence share its row
        assert str(escape(formats.plain_text(claim.sentence))) in rows[claim.id]
        assert str(escape(formats.plain_text(claim.chapter_value))) in rows[claim.id]
    for key in (CPU, GPU):
        for result in recorded(evidence_root, key)["claims"]:
            row = rows[result["id"]]
            slug = escape(result["verdict"].replace(" ", "-"))  # "author's": &#39;
            item = row[row.index(f'href="#prov-{result["id"]}-{key}"'):]
            item = item[:item.index("</li>")]
            assert f'<span class="verdict {slug}">{escape(result["verdict"])}</span>' in item
            words = value_words(by_id[result["id"]], result)
            if words != "—":  # the report makes the text, with words for a bare number
                assert str(escape(words)) in item
            figure = figure_of(by_id[result["id"]])
            if figure:
                assert f'href="#{figure}"' in item
            if result["judged_on"] and words != "—":  # claims.json holds {column: values};
                # the page says it: briefly on the value, whole in the claim's provenance
                assert str(escape(judged_on_brief(result["judged_on"]))) in item
                assert str(escape(judged_on_text(result["judged_on"]))) in report_html[0]


def test_a_value_without_a_unit_says_what_it_is_in_words(evidence_root):
    """'0.115 decode_intensity_over_balance' named a column, not what the number is."""
    by_id = {c.id: c for c in claims.load().claims}
    bare = 0
    for key in (CPU, GPU):
        for result in recorded(evidence_root, key)["claims"]:
            claim = by_id[result["id"]]
            if result["unit"] or value_text(result) == "—" or claim.check is None:
                continue
            bare += 1
            words = value_words(claim, result)
            assert words != value_text(result) and "_" not in words, (result["id"], words)
    assert bare > 0


def test_every_model_quantity_has_words_that_start_with_its_unit():
    """MODEL_WORDS against the committed model.csv of every machine: a quantity the model
    stage writes has words, and they carry the unit the stage gives it."""
    quantities = {}
    for path in sorted(layout.REPO_ROOT.glob("results/*/model.csv")):
        for row in pd.read_csv(path).to_dict("records"):
            quantities[row["quantity"]] = row["unit"]
    if not quantities:
        pytest.skip("no committed model.csv")
    unit_words = {"ops": "operations", "FLOP/B": "FLOP per byte"}  # the rest as written
    for quantity, unit in quantities.items():
        assert (MODEL_WORDS[quantity] + " ").startswith(unit_words.get(unit, unit) + " "), quantity


def test_each_machines_card_counts_its_verdicts_and_says_runs_and_what_holds(report_html,
                                                                              evidence_root):
    """Per machine: each verdict counted (0 too), the runs its series pools, and "of the N
    claims that can be judged here, M hold; these do not: ..." linked to the claims."""
    summary = section(report_html[0], "summary")
    for key in (CPU, GPU):
        results = recorded(evidence_root, key)["claims"]
        card = summary[summary.index(f'data-key="{key}"'):]
        card = card[:card.index("</div>")]
        counts = Counter(c["verdict"] for c in results)
        for verdict in ("reproduced", "not reproduced", "within noise here", "answered here",
                        "not measurable here", "not checkable"):
            assert f'data-verdict="{verdict}" data-count="{counts[verdict]}"' in card
        judged = [r for r in results if r["verdict"] in
                  ("reproduced", "not reproduced", "within noise here")]
        hold = sum(r["verdict"] == "reproduced" for r in judged)
        assert f"Of the <b>{len(judged)}</b> claims that can be judged here, <b>{hold} hold</b>" \
            in card
        for r in judged:
            if r["verdict"] != "reproduced":
                assert f'<a href="#claim-{r["id"]}">{r["id"]}</a>' in card
        frame = artifacts.read(layout.artifact_path(evidence_root, key, "series"),
                               "series").frame if layout.artifact_path(
                                   evidence_root, key, "series").is_file() else None
        if frame is not None:
            runs = int(frame.loc[frame["kind"] == "pooled", "runs"].max())
            assert f"{runs} run" in card
        else:
            assert "no series of runs" in card
    assert escape(claims.load().hardware) in summary  # the chapter's GPU, named first
    assert "not that" in summary  # what "not reproduced" means
    assert "2.13.0" in summary and "Synthetic GPU" in summary and "Synthetic CPU" in summary


def test_claim_sentences_are_plain_unicode(report_html):
    text = report_html[0]
    assert "\\(" not in text and "\\times" not in text
    assert "O(S²)" in text and "4.7 × 10⁻⁵" in text and "1×S" in text


# ---------------------------------------------------------------- raw data, provenance


def test_raw_tables_are_collapsed_and_scroll(page):
    raw = [stack for attrs, stack in page.tables if "raw" in attrs.get("class", "")]
    assert raw and all("details" in stack for stack in raw)
    assert all("div" in stack for stack in raw)  # inside the horizontal scroll wrapper


def test_unavailable_rows_collapse_to_one_line_per_backend(report_html):
    prefill = without_svg(section(report_html[0], "prefill"))
    for backend in ("efficient", "cudnn"):  # 12 unavailable rows each on the CPU key
        assert prefill.count(CUDA_ONLY.format(backend)) == 1


def test_numbers_carry_units_not_exponents_of_bytes(report_html):
    text = without_svg(report_html[0])
    assert "e+0" not in text
    for unit in ("(MiB)", "(ms)", "(GB/s)"):
        assert unit in section(text, "prefill") + section(text, "decode")


def test_provenance_block_per_claim_and_machine(report_html, evidence_root):
    text = section(report_html[0], "provenance")
    for key in (CPU, GPU):
        for result in recorded(evidence_root, key)["claims"]:
            start = text.index(f'id="prov-{result["id"]}-{key}"')
            block = text[start:text.index("</details>", start)]
            assert f'href="#claim-{result["id"]}"' in block
            if result["artifact"] and result["artifact"]["sha256"]:
                assert result["artifact"]["sha256"] in block and "sha256 OK" in block
    assert text.count(escape(claims.load().hardware)) == 1  # the shared caveat, said once


# ---------------------------------------------------------------- figures


def test_the_first_figure_is_the_chapters_comparison_and_the_claims_follow_the_figures(
        report_html):
    text = report_html[0]
    assert text.index("<figure") == text.index('<figure id="comparison"')
    assert text.index('<section id="claims"') > text.rindex("<figure")
    comparison = text[text.index('<figure id="comparison"'):]
    comparison = comparison[:comparison.index("</figure>")]
    assert comparison.count("<svg") == 2  # every machine, side by side


@pytest.mark.parametrize(("section_id", "drawn", "never"), [
    # the chapter's lengths as real numbers; 512 is measured, but outside its table
    ("prefill", [">1,024</text>", ">2,048</text>", ">4,096</text>", ">8,192</text>"],
     [">512</text>", "×10", "10^"]),
    ("decode", ["batch 1</text>", "batch 4</text>", "batch 8</text>"], []),  # every batch
    # noisy rows are marked, and the figures' caption says what a hollow marker is
    ("prefill", ['class="noisy"', "hollow"], []),
    # a stage a machine did not run says so
    ("traffic", [f"{GPU}: {NOT_MEASURED}"], [f"{CPU}: {NOT_MEASURED}"]),
    ("manuscript", [f"{CPU}: {NOT_MEASURED}: the manuscript stage did not run"], [])])
def test_each_section_draws_and_says_what_it_should(report_html, section_id, drawn, never):
    text = section(report_html[0], section_id)
    assert [t for t in drawn if t not in text] == [] and [t for t in never if t in text] == []


def test_traffic_figure_has_one_model_line_per_mask(report_html):
    traffic = section(report_html[0], "traffic")
    assert traffic.count(">model, full</text>") == traffic.count(">model, causal</text>") == 1


# ---------------------------------------------------------------- backend map, series, model

MODEL_ROWS = [
    {"quantity": "launches", "dtype": None, "value": 29120.0, "unit": "launches",
     "source": "counted here", "inputs": "2080 block pairs x 14 ops", "status": "ok"},
    {"quantity": "decode_floor_us", "dtype": None, "value": 427.4, "unit": "µs",
     "source": "measured here", "inputs": "48 MiB at <118> GB/s", "status": "ok"}]


@pytest.fixture(scope="module")
def map_rows_here() -> list[dict]:
    """A real backend map, made here on small inputs (every backend run on each case)."""
    return map_rows(map_cases((32, 80), 16, 4, 2, 0.1), (torch.float32,), 4, 16, "cpu", 0)


@pytest.fixture(scope="module")
def more(tmp_path_factory, evidence_root, map_rows_here) -> str:
    """The page with the CPU key's backend map and model rows, the GPU's traffic, both keys'
    manuscripts (the GPU's numbers.tex edited), no series of the GPU's, the GPU's
    claims.json rewritten and the CPU's prefill.csv edited after it was registered (one
    render for all of them: each changes what a different section says)."""
    root = Path(shutil.copytree(evidence_root, tmp_path_factory.mktemp("more") / "root"))
    probe = artifacts.read(layout.artifact_path(root, CPU, "probe"), "probe")
    write_stage(root, CPU, "probe", {**probe, "backend_map": map_rows_here}, "cpu")
    write_stage(root, CPU, "model", pd.DataFrame(MODEL_ROWS), "cpu")
    gpu_series = artifacts.read(layout.artifact_path(root, GPU, "series"), "series").frame
    write_stage(root, GPU, "traffic", traffic_rows(gpu_series, "cuda"), "cuda")
    for key in (CPU, GPU):  # the manuscript reads traffic
        make_manuscript(root, key)
    with open(layout.derived_path(root, GPU, "manuscript", "numbers.tex"), "a") as f:
        f.write("\\renewcommand{\\ILCThirteenFive}{13.5}\n")
    layout.artifact_path(root, GPU, "series").unlink()
    claims_json = layout.artifact_path(root, GPU, "claims")
    claims_json.write_text(json.dumps(json.loads(claims_json.read_text()), indent=1))
    prefill = layout.artifact_path(root, CPU, "prefill")
    pd.read_csv(prefill).drop(columns=["fused_sdpa"]).to_csv(prefill, index=False)
    return render_report(root, layout.report_path(root), [CPU, GPU]).read_text()


def test_backend_map_is_a_grid_with_the_reasons(more, report_html, map_rows_here):
    backends = section(more, "backends")
    grid = backends[backends.index('<details class="map">'):]
    grid = grid[:grid.index("</details>")]
    order = list(dict.fromkeys(r["backend"] for r in map_rows_here))
    assert re.search(r"<th>case</th><th>dtype</th>" + "".join(f"<th>{b}</th>" for b in order),
                     grid)
    for case in dict.fromkeys(r["case"] for r in map_rows_here):
        cells = [cell(next(r for r in map_rows_here if r["case"] == case and r["backend"] == b))
                 for b in order]
        assert f"<td>{case}</td><td>float32</td>" + "".join(f"<td>{c}</td>" for c in cells) \
            in grid, case
    refused = [r for r in map_rows_here if not r["ran"]]
    assert f"{len(map_rows_here) - len(refused)} ran, {len(refused)} refused" in grid
    for r in refused:  # every refusal's reason is on the page, escaped
        assert str(escape(r["reason"] or r["error"])) in grid
    # a probe.json without a map says so instead of an empty grid
    assert "No backend map" in section(report_html[0], "backends")


def test_the_series_section_draws_each_run_and_the_pooled_intervals(more, evidence_root):
    """Per machine a figure of every run's paired ratio beside the pooled value and its two
    intervals, and the pooled points in a collapsed table; a machine without one says so."""
    text = section(more, "series")
    assert text.count("<svg") == 1 and "prediction interval" in text
    series = artifacts.read(layout.artifact_path(evidence_root, CPU, "series"), "series").frame
    pooled = int((series["kind"] == "pooled").sum())
    assert f"{CPU}: the {pooled} rows of series.csv" in text
    assert f"{GPU}: {NOT_MEASURED} (series.csv is missing" in text


def test_model_rows_are_shown_with_units_and_sources(more):
    text = section(more, "model")
    assert "<td>launches</td><td>—</td><td>29120</td><td>launches</td><td>counted here</td>" \
        in text
    assert "<td>427</td><td>µs</td><td>measured here</td>" in text
    assert "&lt;118&gt;" in text  # an artifact's string is text
    assert f"{GPU}: {NOT_MEASURED} (model.csv is missing" in text


def test_tampered_claims_and_unreadable_artifact_are_shown(more):
    summary = section(more, "summary")
    gpu, cpu = (summary[summary.index(f'data-key="{k}"'):] for k in (GPU, CPU))
    assert "claims.json MISMATCH" in gpu[:gpu.index("</div>")]
    assert "claims.json" not in cpu[:cpu.index("</div>")]
    assert "MISMATCH): prefill.csv" in cpu[:cpu.index("</div>")]  # edited after registering
    head = section(more, "claims").split("</thead>")[0]
    assert head.count("MISMATCH") == 1 and head.index(GPU) < head.index("MISMATCH")
    assert f"{CPU}: prefill.csv cannot be read" in section(more, "prefill")
    assert "fused_sdpa" in section(more, "prefill")  # the reader's error names the column


def test_the_manuscript_section_shows_each_machines_tables_and_links_its_files_checked_now(
        more):
    text = section(more, "manuscript")
    for key in (CPU, GPU):
        assert f'id="manuscript-{key}"' in text
        for name in stage("manuscript").derived:
            assert f'href="../results/{key}/manuscript/{name}"' in text
    assert text.count("<h4>") == 8 and "(sha256 OK)" in text
    assert "not measured here: 8,192 tokens is not in this machine&#39;s grid" in text
    assert text.count("(changed since the stage wrote it)") == 1  # the edited file


def test_a_card_names_the_stages_made_by_other_code_than_this_checkouts(evidence_root):
    """Evidence merged from another machine at an older commit: the card says which
    stages this checkout's code would not compute so (only that machine can remake them),
    and names none once a stage's recorded code is today's."""
    import dataclasses

    from inferlab.core.pipeline import code_files
    from inferlab.evidence.register import file_hashes
    from inferlab.presentation.report import summary_card
    from inferlab.presentation.sections import load_key

    data = load_key(evidence_root, CPU)
    # the test's stages recorded one file as their code, not their stages' code files
    assert "prefill" in summary_card(data)["older_code"]
    today = {s: dataclasses.replace(e, entry={**e.entry, "provenance": {
        **e.provenance, "code_files": file_hashes(
            [layout.REPO_ROOT / f for f in code_files(s)], layout.REPO_ROOT)}})
        for s, e in data.evidence.items() if e.entry}
    current = dataclasses.replace(data, evidence={**data.evidence, **today})
    assert summary_card(current)["older_code"] == []


def test_the_card_says_when_the_evidence_was_measured_apart_from_derived():
    from inferlab.presentation.report import _when

    assert _when(["2026-12-02T01:01:00"], ["2026-12-02T01:01:30", "2026-12-03T10:11:00"]) == \
        "measured 2026-12-02 01:01 UTC (derived 2026-12-03 10:11 UTC)"
    assert _when(["2026-12-03T10:11:00"], ["2026-12-03T10:11:40"]) == "2026-12-03 10:11 UTC"
    assert _when([], []) == "no date"
