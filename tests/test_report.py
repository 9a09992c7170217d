"""The report: every section and claim present, well-formed HTML, artifact strings escaped,
missing stages said, noisy rows marked, nothing external."""

from __future__ import annotations

import random
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from test_claims import CPU, GPU, SEED, build_evidence, probe_json, write_stage

from inferlab import claims, layout
from inferlab.audit import evaluate_key
from inferlab.report import NOT_MEASURED, SECTIONS, render_report

EVIL = "<script>alert(1)</script>"
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr"}


def decode_frame(rnd: random.Random) -> pd.DataFrame:
    rows = []
    for cache_len in (1024, 4096, 16384):
        for batch in (1, 8):
            for impl, splits in [("splitkv", s) for s in (1, 4, 16)] + [("sdpa_flash", None)]:
                ms = rnd.uniform(0.2, 2.0) * cache_len / 4096
                cache_bytes = 2 * batch * 12 * cache_len * 64 * 4
                rows.append(dict(impl=impl, fused_sdpa=impl == "sdpa_flash",
                                 cache_len=cache_len, batch=batch, heads=12, d=64,
                                 dtype="float32", splits=splits, median_ms=ms, iqr_ms=ms / 50,
                                 n_timings=9, round_spread=rnd.uniform(0, 0.4),
                                 noisy=rnd.random() < 0.3, cache_bytes=cache_bytes,
                                 achieved_gbs=cache_bytes / ms / 1e6, frac_copy_ceiling=0.3,
                                 floor_ms=cache_bytes / 20e9 * 1e3, kernel="bmm", status="ok"))
    return pd.DataFrame(rows)


def traffic_frame(rnd: random.Random) -> pd.DataFrame:
    return pd.DataFrame([dict(T=T, d=64, causal=True, dtype="float32", block_q_model=128,
                              model_ratio=rnd.uniform(9, 12), naive_ms=rnd.uniform(5, 50),
                              fused_ms=rnd.uniform(1, 5), fused_impl="sdpa_flash",
                              measured_ratio=rnd.uniform(2, 10), implied_block_q=64.0,
                              cpu_kernel_q_split=None, cpu_kernel_kv_split=None, note="")
                         for T in (512, 1024, 2048)])


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> tuple[str, Path]:
    """Evidence for two machines (decode and traffic only on the CPU one, and a malicious
    string in its probe reason and a kernel name), claims.json for both, then the report."""
    root = build_evidence(tmp_path_factory.mktemp("root"))
    rnd = random.Random(SEED)
    write_stage(root, CPU, "decode", decode_frame(rnd), "cpu")
    write_stage(root, CPU, "traffic", traffic_frame(rnd), "cpu")
    probe = probe_json("cpu", [{"backend": "cudnn", "dtype": "float32", "reason": EVIL,
                                "limit_kind": "build"}])
    write_stage(root, CPU, "probe", probe, "cpu")
    prefill = pd.read_csv(layout.artifact_path(root, CPU, "prefill"))
    prefill.loc[0, "kernel"], prefill.loc[1, "noisy"] = EVIL, True
    write_stage(root, CPU, "prefill", prefill, "cpu")
    for machine in (CPU, GPU):
        write_stage(root, machine, "claims", evaluate_key(root, machine), "cpu")
    path = render_report(root, layout.report_path(root), [CPU, GPU])
    return path.read_text(encoding="utf-8"), path


class TagChecker(HTMLParser):
    """Collects tags and reports any end tag that does not close the open one."""

    def __init__(self):
        super().__init__()
        self.stack, self.problems, self.tags, self.ids = [], [], [], set()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.ids.update(v for k, v in attrs if k == "id")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def test_report_is_written_where_asked(report_html):
    _, path = report_html
    assert path == layout.report_path(path.parent.parent)


def test_report_parses_with_balanced_tags(report_html):
    checker = TagChecker()
    checker.feed(report_html[0])
    checker.close()
    assert checker.problems == [] and checker.stack == []


def test_report_has_every_section_and_every_claim(report_html):
    text = report_html[0]
    checker = TagChecker()
    checker.feed(text)
    assert {key for key, _ in SECTIONS} <= checker.ids
    for claim in claims.load().claims:
        assert claim.id in text
        assert f"prov-{claim.id}-{CPU}" in checker.ids  # each verdict's provenance anchor
        assert f'href="#prov-{claim.id}-{GPU}"' in text


def test_artifact_strings_are_escaped(report_html):
    text = report_html[0]
    assert EVIL not in text and "<script" not in text.lower()
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2  # probe reason, kernel


def test_missing_stage_says_not_measured_here(report_html):
    text = report_html[0]
    decode = text[text.index('<section id="decode">'):text.index('<section id="traffic">')]
    assert f"{GPU}: {NOT_MEASURED}" in decode and f"{CPU}: {NOT_MEASURED}" not in decode


def test_noisy_rows_are_marked(report_html):
    assert 'class="noisy"' in report_html[0]


def test_report_is_self_contained(report_html):
    checker = TagChecker()
    checker.feed(report_html[0])
    assert {"svg", "table", "style"} <= set(checker.tags)
    assert not {"script", "link", "iframe", "img"} & set(checker.tags)
    assert "http://" not in report_html[0].replace('xmlns="http://www.w3.org/2000/svg"', "") \
        .replace('xmlns:xlink="http://www.w3.org/1999/xlink"', "")
