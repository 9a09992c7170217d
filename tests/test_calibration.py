"""benchmarks/calibration.py: a saved run reanalysed as the harness makes its intervals,
and the command line's refusals (a benchmark measures nothing here: its analysis does)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from inferlab.measurement.intervals import between_share, process_interval

ROOT = Path(__file__).resolve().parents[1]


def _calibration():
    path = ROOT / "benchmarks" / "calibration.py"
    spec = importlib.util.spec_from_file_location("calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _main(monkeypatch, *argv) -> None:
    monkeypatch.setattr(sys, "argv", ["calibration.py", *argv])
    _calibration().main()


GROUPS = [[1.00, 1.02, 0.98], [1.10, 1.12, 1.30], [0.95, 0.96, 0.90], [1.20, 1.00, 1.05]]


def test_a_saved_run_is_reanalysed_from_its_first_workers_and_rounds():
    cal = _calibration()
    full = cal.intervals_of({"p|c": GROUPS})["p|c"]
    assert full == (*process_interval(GROUPS), between_share(GROUPS))
    smaller = cal.intervals_of({"p|c": GROUPS}, workers=3, rounds=2)["p|c"]
    first = [g[:2] for g in GROUPS[:3]]
    assert smaller == (*process_interval(first), between_share(first))
    assert smaller != full
    assert cal.intervals_of({"p|c": [[], []]}) == {}  # a case with no process is skipped


def test_coverage_counts_each_run_inside_the_others_interval():
    cal = _calibration()
    runs = [{"k": (1.0, 0.9, 1.1, None)}, {"k": (1.05, 1.04, 1.06, None)}]
    s = cal._summary(runs)  # 1.05 is inside [0.9, 1.1]; 1.0 is not inside [1.04, 1.06]
    assert (s["pairs"], s["coverage"]) == (2, 0.5)
    assert s["median_diff"] == pytest.approx((0.05 + (1 - 1 / 1.05)) / 2)
    assert s["max_diff"] == pytest.approx(0.05)
    assert s["median_halfwidth"] == pytest.approx((0.1 + 0.01 / 1.05) / 2)
    assert s["median_between_share"] is None


def test_load_reports_the_coverage_of_saved_runs(monkeypatch, tmp_path, capsys):
    other = [[x * 1.01 for x in g] for g in GROUPS]
    saved = tmp_path / "raw.json"
    saved.write_text(json.dumps({"args": {"runs": 2}, "runs": [{"p|c": GROUPS}, {"p|c": other}]}))
    _main(monkeypatch, "--load", str(saved), "--workers", "4")
    out = capsys.readouterr().out
    assert "2 runs from" in out and "coverage 100% of 2 (run, other run) pairs" in out
    assert "median |diff| 1.0%" in out


def _refused(monkeypatch, capsys, *argv) -> str:
    """calibration.py's error on ``argv``; measuring would fail the test: they are refused."""
    module = _calibration()

    def measured(args):
        raise AssertionError(f"measured with {args}: the arguments should have been refused")

    monkeypatch.setattr(module, "_measure", measured)
    monkeypatch.setattr(sys, "argv", ["calibration.py", *argv])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--runs", "1"], "--runs 1: coverage needs at least 2 runs"),
    (["--runs", "0"], "--runs 0: must be at least 1"),
    (["--load", "x.json", "--workers", "0"], "--workers 0: must be at least 1"),
    (["--heads", "0"], "--heads 0: must be at least 1"),
    (["--threads", "-1"], "--threads -1: must be at least 1"),
    (["--min-run-ms", "nan"], "--min-run-ms nan: must be a number of milliseconds > 0"),
    (["--min-run-ms", "-5"], "--min-run-ms -5.0: must be a number of milliseconds > 0")])
def test_calibration_refuses_bad_arguments_by_name_before_anything_is_timed(
        monkeypatch, capsys, argv, message):
    assert message in _refused(monkeypatch, capsys, *argv)


@pytest.mark.parametrize(("saved", "message"), [
    (None, "not a file --save wrote"), ("not json", "not a file --save wrote"),
    ({"runs": 3}, "not a file --save wrote"), ({"other": []}, "not a file --save wrote"),
    ([1, 2], "not a file --save wrote"),
    ({"runs": [{"p|c": GROUPS[:2]}, {"p|c": GROUPS[:2]}]}, "no 'args'"),
    ({"args": {}, "runs": [{"p|c": [[1.0, "a"]]}, {"p|c": GROUPS[:2]}]},
     "run 1, 'p|c', process 1: 'a' is not a ratio"),
    ({"args": {}, "runs": [{"p|c": [[-1.0, 2.0]]}, {"p|c": GROUPS[:2]}]},
     "run 1, 'p|c', process 1: -1.0 is not a ratio"),
    ({"args": {}, "runs": [{"p|c": 5}, {"p|c": GROUPS[:2]}]},
     "run 1, 'p|c': 5 is not a list of processes"),
    ({"args": {}, "runs": [{"p|c": [[math.inf]]}, {"p|c": GROUPS[:2]}]},
     "run 1, 'p|c', process 1: inf is not a ratio")])
def test_calibration_load_of_a_malformed_file_is_named(monkeypatch, capsys, tmp_path,
                                                       saved, message):
    path = tmp_path / "raw.json"
    if saved is not None:
        path.write_text(saved if isinstance(saved, str) else json.dumps(saved))
    err = _refused(monkeypatch, capsys, "--load", str(path))
    assert f"--load {path}: " in err and message in err, err


def test_one_saved_run_cannot_give_a_coverage(monkeypatch, tmp_path):
    path = tmp_path / "raw.json"
    path.write_text(json.dumps({"args": {}, "runs": [{"p|c": GROUPS}]}))
    with pytest.raises(SystemExit, match="1 run\\(s\\): coverage needs at least 2 runs"):
        _main(monkeypatch, "--load", str(path))
