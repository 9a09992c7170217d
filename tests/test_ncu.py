"""inferlab.measurement.ncu: Nsight Compute's CSV read into bytes per kernel, and rows that say
why."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferlab.algorithms.traffic import naive_hbm_elements, tiled_hbm_elements
from inferlab.measurement import ncu

# ncu --csv --metrics dram__bytes_read.sum,dram__bytes_write.sum, as its documentation
# gives the format: the program's own output and ncu's notices first, then one row per
# (launch, metric), values with thousands separators, units as ncu scales them.
SAMPLE = (Path(__file__).parent / "ncu_sample.csv").read_text(encoding="utf-8")


def test_parse_reads_one_launch_per_id_in_bytes():
    launches = ncu.parse_csv(SAMPLE)
    assert [launch["id"] for launch in launches] == ["0", "1"]
    assert launches[0]["kernel"].startswith("fmha_cutlassF_f16")
    assert launches[0]["dram__bytes_read.sum"] == 25_296_384
    assert launches[0]["dram__bytes_write.sum"] == 6_291_456
    assert launches[1]["dram__bytes_read.sum"] == pytest.approx(1500)
    assert launches[1]["dram__bytes_write.sum"] == pytest.approx(2e6)


def test_parse_without_a_header_is_no_launches():
    assert ncu.parse_csv("==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n") == []


def test_an_unknown_unit_is_named():
    bad = SAMPLE.replace('"byte","6,291,456"', '"furlong","3"')
    with pytest.raises(ValueError, match="'furlong'"):
        ncu.parse_csv(bad)


def test_model_bytes_are_the_traffic_models_at_the_known_tile():
    T = 4096
    assert ncu.model_bytes("prefill", "naive", T) == 12 * naive_hbm_elements(T, 64) * 2
    assert ncu.model_bytes("prefill", "triton_flash block=128", T) == \
        12 * tiled_hbm_elements(T, 64, 128, ncu.TRITON_BLOCK_N) * 2
    assert ncu.model_bytes("prefill", "sdpa_flash", T) is None  # its tile is not ours to know


def test_decode_model_bytes_are_the_cache_read_once_whatever_the_case():
    # K and V, 12 heads x 16,384 keys x d 64 x fp16: the chapter's "48 MiB of cache"
    assert {ncu.model_bytes("decode", case, 16384) for case in ncu.CASES["decode"]} == \
        {48 * 2**20}


def test_the_longest_prefill_is_measured_first_then_every_decode_point():
    order = ncu.points([1024, 8192, 4096], [4096, 65536])
    assert [T for stage, _, T in order if stage == "prefill"][::len(ncu.CASES["prefill"])] == \
        [8192, 4096, 1024]
    assert order[-1] == ("decode", ncu.CASES["decode"][-1], 65536)
    assert len(order) == 3 * len(ncu.CASES["prefill"]) + 2 * len(ncu.CASES["decode"])


def test_without_ncu_every_row_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    out = tmp_path / "ncu-bytes.csv"
    ncu.main(["run", "--tokens", "64", "--cache-lens", "128", "--out", str(out)])
    lines = out.read_text().splitlines()
    assert lines[0].split(",") == list(ncu.FIELDS)
    assert len(lines) == 1 + len(ncu.CASES["prefill"]) + len(ncu.CASES["decode"])
    assert all(line.endswith("unavailable: ncu is not on the PATH") for line in lines[1:])


def test_a_failing_ncu_is_a_row_with_its_message(monkeypatch):
    class Done:
        returncode, stdout = 1, ""
        stderr = "==ERROR== Failed to initialize the profiler: LibraryNotLoaded"

    monkeypatch.setattr(ncu.subprocess, "run", lambda *a, **k: Done())
    row = ncu.measure("prefill", "naive", 64, "/usr/bin/ncu", timeout_s=5)
    assert row["status"].startswith("error: ncu exit 1, 0 kernels measured")
    assert "LibraryNotLoaded" in row["status"]


def test_under_gvisor_ncu_is_not_started_and_every_row_says_why(tmp_path, monkeypatch):
    # the lent machines under gVisor: "Failed to initialize the profiler: LibraryNotLoaded"
    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/usr/local/bin/ncu")
    monkeypatch.setattr(ncu.sandbox, "this_machine", lambda: {
        "runtime": "gvisor", "evidence": ["/proc/version: release 4.4.0 (gVisor's)"]})

    def no_ncu(*args, **kwargs):
        raise AssertionError(f"ncu was started under gVisor: {args}")

    monkeypatch.setattr(ncu.subprocess, "run", no_ncu)
    out = tmp_path / "ncu-bytes.csv"
    ncu.main(["run", "--tokens", "64", "--out", str(out)])
    rows = out.read_text().splitlines()[1:]
    assert len(rows) == len(ncu.CASES["prefill"])
    assert all("cannot read the hardware counters under gVisor" in row for row in rows)
    assert all("release 4.4.0" in row for row in rows)


def test_cases_past_the_limit_are_rows_that_say_so_and_the_rest_were_measured(tmp_path,
                                                                             monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 50.0])  # the run's start, then before each case
    monkeypatch.setattr(ncu.time, "monotonic", lambda: next(clock, 99.0))
    monkeypatch.setattr(ncu, "measure", lambda stage, case, T, *a: {
        "stage": stage, "case": case, "T": T, "status": "ok"})
    out = tmp_path / "ncu-bytes.csv"
    ncu.main(["run", "--tokens", "64", "--limit-s", "10", "--out", str(out)])
    statuses = [line.rsplit(",", 1)[1] for line in out.read_text().splitlines()[1:]]
    assert statuses[:2] == ["ok", "ok"]
    assert statuses[2:] == ["not measured: the step's 10 s ran out"] * 4
