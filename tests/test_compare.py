"""Between runs: the latest timing version against the previous one made alike."""

from __future__ import annotations

import random

import pytest

from inferlab import artifacts
from inferlab.compare import comparable, compare_latest, format_differences
from inferlab.provenance import write_artifact
from inferlab.register import Register

KEY = "cpu-compare-1c"
ENV = {"device": "cpu", "build": {"cpu_capability": "AVX512"}, "host": {"cpu_model": "x"}}


def _rows(rng: random.Random, scale: float) -> list[dict]:
    rows = []
    for T in (1024, 2048):
        for impl in ("naive", "sdpa_flash"):
            ms = rng.uniform(10, 100) * scale
            rows.append({"impl": impl, "fused_sdpa": impl == "sdpa_flash", "T": T, "batch": 1,
                         "heads": 2, "d": 64, "dtype": "float32", "causal": True, "threads": 1,
                         "median_ms": ms, "ratio_to": "naive", "ratio": rng.uniform(0.1, 1),
                         "flops": 1, "status": "ok"})
    return rows


def _write(root, rows, config=None, env=ENV, code="a") -> dict:
    code_file = root / "code.py"
    code_file.write_text(code)
    return write_artifact(root, KEY, "prefill", artifacts.encode("prefill", rows),
                          config=config or {"seed": 0}, code_files=[code_file], inputs=[],
                          seed=0, command="x", environment=env)


def test_differences_per_point_against_the_previous_alike_version(tmp_path):
    rng = random.Random(3)
    first = _rows(rng, 1.0)
    second = [{**r, "median_ms": r["median_ms"] * f, "ratio": r["ratio"] * f}
              for r, f in zip(first, (1.1, 0.9, 1.0, 1.25), strict=True)]
    _write(tmp_path, first)
    _write(tmp_path, _rows(rng, 5.0), config={"seed": 1})  # another config: not compared
    _write(tmp_path, second)
    previous, latest, diffs = compare_latest(tmp_path, KEY, "prefill")
    assert (previous["version"], latest["version"]) == (1, 3)
    assert list(diffs["median_ms_diff"].round(6)) == [0.1, -0.1, 0.0, 0.25]
    assert list(diffs["ratio_diff"].round(6)) == [0.1, -0.1, 0.0, 0.25]
    text = format_differences(previous, latest, diffs, "prefill")
    assert "+25.0%" in text and "median |diff| 10.0%, max 25.0% over 4 points" in text


@pytest.mark.parametrize("change", ["config", "code", "hardware"])
def test_a_version_made_otherwise_is_not_comparable(tmp_path, change):
    rng = random.Random(4)
    _write(tmp_path, _rows(rng, 1.0))
    other = {"config": {"config": {"seed": 9}}, "code": {"code": "b"},
             "hardware": {"env": {**ENV, "build": {"cpu_capability": "AVX2"}}}}[change]
    _write(tmp_path, _rows(rng, 1.0), **other)
    assert comparable(Register(tmp_path, KEY), "prefill") is None
    with pytest.raises(ValueError, match="no earlier version made with the same"):
        compare_latest(tmp_path, KEY, "prefill")


def test_compare_is_for_timing_stages():
    with pytest.raises(ValueError, match="times nothing"):
        compare_latest(".", KEY, "traffic")
