"""Issue 35, items 1-3 and 5: the history the series stage pools, attacked in a register of
real prefill and decode tables, committed to git (the anchor) as a machine's would be; and
the attacks of this round on the series itself (docs/attacks.md, "Round five").

Each test was run against the code before its fix where there was one (the value bounds,
the hardware of a timing stage's inputs, the reason a broken chain gives): it failed there.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from inferlab.core import layout
from inferlab.evidence import artifacts
from inferlab.evidence.history import OWN_WRITES, record_own, trusted_versions
from inferlab.evidence.provenance import write_artifact
from inferlab.evidence.register import Register
from inferlab.measurement.environment import fingerprint
from inferlab.stages import series
from inferlab.workflow.cli import main as cli_main
from tests.pipeline_repo import git
from tests.tampering import forge

KEY = "cpu-test-series-1c"
HERE = fingerprint("cpu", collect_env=False)
ELSEWHERE = {**HERE, "host": {**HERE["host"], "cpu_model": "Another CPU (a host of another id)"}}


def _prefill(shift: float, bad: float | None = None) -> bytes:
    """Two lengths, naive and tiled (tiled's ratio to naive), every run a few % apart."""
    rows = []
    for i, T in enumerate((1024, 2048)):
        common = {"fused_sdpa": False, "T": T, "batch": 1, "heads": 12, "d": 64,
                  "dtype": "float32", "causal": True, "block_q": 128, "block_k": 128,
                  "threads": 1, "flops": 1, "status": "ok", "workers": 3}
        naive = T / 100 * math.exp(shift)
        ratio = 2.0 * math.exp(shift / 2) if bad is None or i else bad
        rows += [{**common, "impl": "naive", "median_ms": naive, "ci_low_ms": naive * 0.98,
                  "ci_high_ms": naive * 1.02},
                 {**common, "impl": "tiled", "median_ms": naive / 2, "ci_low_ms": naive * 0.49,
                  "ci_high_ms": naive * 0.51, "ratio": ratio, "ratio_ci_low": ratio * 0.98,
                  "ratio_ci_high": ratio * 1.02, "ratio_to": "naive"}]
    return artifacts.encode("prefill", rows)


def _decode(shift: float) -> bytes:
    t = 1.0 * math.exp(shift)
    return artifacts.encode("decode", [{
        "impl": "sdpa_flash", "fused_sdpa": True, "cache_len": 1024, "batch": 1, "heads": 12,
        "d": 64, "dtype": "float32", "splits": 1, "status": "ok", "workers": 3,
        "cache_bytes": 3 * 2 ** 20, "median_ms": t, "ci_low_ms": t * 0.98,
        "ci_high_ms": t * 1.02}])


def _write(root: Path, stage: str, content: bytes, environment: dict = HERE) -> dict:
    code = root / "stage_code.py"
    if not code.exists():
        code.write_text("# the code that ran\n")
    return write_artifact(root, KEY, stage, content, config={"series": "alike"},
                          code_files=[code], inputs=[], seed=0,
                          command=f"python -m inferlab stage {stage}", environment=environment)


def _commit(root: Path) -> None:
    if not (root / ".git").is_dir():
        git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "evidence")


@pytest.fixture
def series_root(tmp_path) -> Path:
    """Three runs of prefill and of decode, made alike and committed."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(layout.REPO_ROOT / "config.yaml", root / "config.yaml")
    for shift in (0.0, 0.03, -0.02):
        _write(root, "prefill", _prefill(shift))
        _write(root, "decode", _decode(shift))
    _commit(root)
    return root


class _Ctx:
    """What the series stage reads of its context: the root, the key, its inputs' latest
    register entries, and a log (kept here)."""

    def __init__(self, root: Path, prefill: dict | None = None):
        register = Register(root, KEY)
        self.root, self.key, self.lines = root, KEY, []
        self.evidence = {s: SimpleNamespace(entry=register.latest(s))
                         for s in ("prefill", "decode")}
        if prefill is not None:
            self.evidence["prefill"] = SimpleNamespace(entry=prefill)

    def log(self, line: str) -> None:
        self.lines.append(line)


def _series(root: Path, max_runs: int = 8, prefill: dict | None = None
            ) -> tuple[int, str, list[dict]]:
    """The series stage on ``root``: 0 or 2 (refused), its log and error, its rows."""
    ctx = _Ctx(root, prefill)
    try:
        rows = series.run(series.Params(max_runs=max_runs), ctx)
    except ValueError as exc:
        return 2, "\n".join([*ctx.lines, str(exc)]), []
    return 0, "\n".join(ctx.lines), rows


def _pooled(rows: list[dict], stage: str = "prefill") -> list[dict]:
    return [r for r in rows if r["kind"] == "pooled" and r["stage"] == stage]


def _tiled_ratio(rows: list[dict], T: int = 1024) -> dict:
    return next(r for r in _pooled(rows) if r["impl"] == "tiled" and r["T"] == T)


# ------------------------------------------------------------------ item 1: tampered copies


def test_r4_01_a_tampered_earlier_copy_is_left_out_and_pools_nothing(series_root, capsys):
    rc, said, clean = _series(series_root)
    assert rc == 0 and _tiled_ratio(clean)["runs"] == 3, said
    register = Register(series_root, KEY)
    v1 = register.entry("prefill", 1)
    copy = register.copy_path(v1["sha256"])
    kept = copy.read_bytes()
    copy.chmod(0o644)
    copy.write_bytes(_prefill(0.0, bad=40.0))  # the run-level sd it would have raised
    found = trusted_versions(series_root, KEY, "prefill")
    assert [v.entry["version"] for v in found.found] == [2, 3]
    assert any("prefill v1: its retained copy does not hash" in n for n in found.left_out)
    rc, log, tampered = _series(series_root)
    assert rc == 0 and "left out" in log and "prefill v1" in log
    row = _tiled_ratio(tampered)
    assert row["runs"] == 2 and row["ratio_pi_high"] < 3  # 40 never reached the interval
    copy.write_bytes(kept)  # restored: read again, and the next series pools all three
    assert _tiled_ratio(_series(series_root)[2])["runs"] == 3


# ------------------------------------------------------------------ item 2: forged, unanchored


def test_r4_02_a_consistent_forged_version_nobody_here_wrote_is_not_pooled(series_root,
                                                                            capsys):
    forged = forge(series_root, KEY, "prefill", _prefill(0.0, bad=40.0))
    found = trusted_versions(series_root, KEY, "prefill")
    assert forged["version"] not in [v.entry["version"] for v in found.found]
    assert any(f"prefill v{forged['version']}: neither committed nor written by this "
               "checkout" in n for n in found.left_out)
    # the forgery is the latest: the series refuses it, saying why, rather than pool it
    rc, log, _ = _series(series_root)
    assert rc == 2 and "the latest prefill cannot be pooled" in log
    assert "neither committed nor written by this checkout" in log


def test_r5_a_torn_or_forged_own_writes_line_trusts_nothing_it_does_not_name(series_root):
    forged = forge(series_root, KEY, "prefill", _prefill(0.0))
    own = series_root / OWN_WRITES
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text('{"key": "' + KEY + '", "entry_hash": "' + forged["entry_hash"][:20]
                   + '\n[1, 2]\n{"key": "another-key", "entry_hash": "'
                   + forged["entry_hash"] + '"}\n')
    found = trusted_versions(series_root, KEY, "prefill")
    assert forged["version"] not in [v.entry["version"] for v in found.found]


# ------------------------------------------------------------------ item 3: values


@pytest.mark.parametrize(("bad", "said"), [
    (math.inf, "ratio=inf in an ok row: not a time or ratio"),
    (0.0, "ratio=0.0 in an ok row: not a time or ratio"),
    (1e300, "ratio=1e+300 in an ok row: outside [1e-16, 1e+16], which no clock measures"),
    (1e-300, "ratio=1e-300 in an ok row: outside"),
])
def test_r4_03_a_registered_value_no_clock_measures_leaves_its_version_out(tmp_path, bad,
                                                                            said):
    root = tmp_path / "repo"
    root.mkdir()
    _write(root, "prefill", _prefill(0.0))
    _write(root, "prefill", _prefill(0.01, bad=bad))  # the table's encoder takes them all
    _commit(root)
    found = trusted_versions(root, KEY, "prefill")
    assert [v.entry["version"] for v in found.found] == [1]
    assert any(n.startswith(f"{KEY} prefill v2: {said}") for n in found.left_out), found.left_out


def test_r4_03_a_nan_ratio_is_no_value_and_narrows_nothing(series_root, capsys):
    _write(series_root, "prefill", _prefill(0.01, bad=math.nan))
    _commit(series_root)
    rc, _, rows = _series(series_root)
    assert rc == 0
    # the NaN is no value of v4: its run row has none, and the ratio is pooled over v1-v3
    # with a run-level sd above 0 (max(0.0, nan) once set a pair's variance to 0)
    runs = {r["version"]: r.get("ratio") for r in rows if r["kind"] == "run"
            and r["stage"] == "prefill" and r["impl"] == "tiled" and r["T"] == 1024}
    assert set(runs) == {1, 2, 3, 4} and runs[4] is None
    row = _tiled_ratio(rows)
    assert row["ratio_run_sd"] > 0 and row["ratio_ci_low"] < row["ratio"] < row["ratio_ci_high"]


def test_r5_an_anchored_extreme_value_is_named_where_it_widens_every_interval(series_root):
    """Round five's open item: an anchored run with an extreme but plausible value (here
    naive's 1,024-token time 1e6 times its others) widens the run-level sd of every point.
    The statistics keep it (a hiccup at one point is evidence of hiccups at any: leaving
    such points out cost coverage, pooling.py); the point is named in its row and the log."""
    frame = artifacts.decode("prefill", _prefill(0.01)).frame
    frame.loc[(frame["impl"] == "naive") & (frame["T"] == 1024), "median_ms"] *= 1e6
    rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in frame.to_dict(orient="records")]
    _write(series_root, "prefill", artifacts.encode("prefill", rows))
    _commit(series_root)
    rc, log, rows = _series(series_root)
    assert rc == 0
    named = {(r["impl"], r["T"]): r.get("outlying") for r in _pooled(rows)}
    assert named == {("naive", 1024): "median_ms", ("naive", 2048): None,
                     ("tiled", 1024): None, ("tiled", 2048): None}
    assert "prefill: median_ms: the runs of impl=naive" in log and "T=1024" in log
    assert "widen every point's interval" in log


def test_r5_a_pooling_that_overflows_names_the_point_and_its_runs():
    """The series' own guard, behind the history's bounds: values that reach the pooling
    (here straight from tables, as tests/series_helper.py pools them) and overflow its
    interval's exp were a bare OverflowError after the whole timing run."""
    from tests.series_helper import series_rows

    runs = [artifacts.decode("prefill", _prefill(s, bad=b)) for s, b in ((0, 1e300), (0.01, None),
                                                                         (0.02, None))]
    with pytest.raises(ValueError, match=r"prefill \(impl=tiled.*T=1024.*1e\+300 \(v1\), "
                                         r"2.01 \(v2\).*beyond floating point"):
        series_rows(prefill=runs)


# ------------------------------------------------------------------ item 5: another machine


def test_r4_05_a_timing_stage_refuses_a_probe_measured_on_other_hardware(tmp_path, capsys):
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(layout.REPO_ROOT / "config.yaml", root / "config.yaml")
    probe = layout.REPO_ROOT / "results" / "cpu-amd-epyc-avx512bf16-2c" / "probe.json"
    if not probe.is_file():
        pytest.skip("no committed probe.json in this checkout")
    _write(root, "probe", probe.read_bytes(), environment=ELSEWHERE)
    _commit(root)
    assert cli_main(["stage", "prefill", "--root", str(root), "--machine", KEY]) == 2
    err = capsys.readouterr().err
    assert f"results/{KEY}/probe.json was measured on other hardware" in err, err
    assert "Another CPU" in err and "--forcerun probe" in err
    assert not layout.artifact_path(root, KEY, "prefill").exists()


def test_r4_05_runs_made_on_other_hardware_are_not_pooled_and_said(series_root, capsys):
    _write(series_root, "prefill", _prefill(0.5), environment=ELSEWHERE)
    _write(series_root, "decode", _decode(0.5), environment=ELSEWHERE)
    _commit(series_root)
    rc, log, rows = _series(series_root)
    assert rc == 0
    # the latest is the other host's: this host's three are the others, not pooled
    assert "prefill: 3 versions of 'cpu-test-series-1c' were made on other hardware" in log
    assert "made on other hardware than the latest (another machine under this id?)" in log
    assert _tiled_ratio(rows)["runs"] == 1  # the latest alone, with its prior


# ------------------------------------------------------------------ round five: the series


def test_r5_a_broken_chain_is_the_reason_the_latest_cannot_be_pooled(series_root):
    register = layout.register_path(series_root, KEY)
    lines = register.read_text().splitlines()
    entry = json.loads(lines[1])
    entry["provenance"]["seed"] = 7  # an earlier line edited: its hash no longer holds
    lines[1] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    register.write_text("\n".join(lines) + "\n")
    found = trusted_versions(series_root, KEY, "prefill")
    assert found.found == [] and "the register's chain is broken" in found.left_out[0]
    rc, said, _ = _series(series_root)
    assert rc == 2 and "the register's chain is broken" in said  # was: "not in the register"
    assert "not in the register" not in said


def test_r5_a_version_newer_than_the_latest_input_is_not_pooled(series_root):
    """A series is of the runs up to its input: a later version (registered after the
    input was read, by a stage run beside it) never joins it."""
    latest = Register(series_root, KEY).latest("prefill")
    _write(series_root, "prefill", _prefill(0.2))
    _commit(series_root)
    rc, _, rows = _series(series_root, prefill=latest)
    assert rc == 0 and all(r["runs"] == 3 for r in _pooled(rows))
    assert {r["version"] for r in rows if r["kind"] == "run" and r["stage"] == "prefill"} \
        == {1, 2, 3}


def test_r5_max_runs_keeps_the_latest_runs_only(series_root):
    rc, _, rows = _series(series_root, max_runs=2)
    assert rc == 0 and {r["runs"] for r in _pooled(rows)} == {2}
    assert {r["version"] for r in rows if r["kind"] == "run" and r["stage"] == "prefill"} \
        == {2, 3}


def test_r5_one_artifact_registered_twice_is_one_run(series_root):
    """The same bytes registered again (a copy put back and rerun through the writer, or
    the committed file re-added): one measurement, which pooled as two runs would count
    twice and narrow every interval."""
    again = Register(series_root, KEY).entry("prefill", 3)
    content = Register(series_root, KEY).copy_path(again["sha256"]).read_bytes()
    _write(series_root, "prefill", content)
    _commit(series_root)
    rc, said, rows = _series(series_root)
    assert rc == 0 and {r["runs"] for r in _pooled(rows)} == {3}, said
    assert "prefill v3: the same artifact as v4" in said


def test_r5_a_latest_run_nobody_vouches_for_says_how_to_fix_it(series_root):
    """`git clean -x` removes .inferlab/own-writes.jsonl: a run made here and not yet
    committed is then nobody's, and the series refuses it; the message says what to do."""
    record_own(series_root, KEY, _write(series_root, "prefill", _prefill(0.1)))
    assert _series(series_root)[0] == 0  # this checkout's own run (as the runner notes it)
    (series_root / OWN_WRITES).unlink()
    rc, said, _ = _series(series_root)
    assert rc == 2 and "neither committed nor written by this checkout" in said
    assert "snakemake --forcerun prefill" in said and "commit" in said


def test_r5_a_prior_is_never_drawn_from_runs_nobody_vouches_for(series_root):
    """A first run's prior comes from the committed series of machines of its kind: a
    series forged on another key of the same kind, not committed, lends it nothing."""
    other = "cpu-test-series-other-1c"
    for shift in (0.0, 0.5, -0.5):  # a wide run-level spread, to widen the first run's
        write_artifact(series_root, other, "prefill", _prefill(shift), config={"series": 1},
                       code_files=[series_root / "stage_code.py"], inputs=[], seed=0,
                       command="x", environment=HERE)
    (series_root / OWN_WRITES).unlink(missing_ok=True)  # merged from elsewhere: nobody's
    latest = [v for v in trusted_versions(series_root, KEY, "prefill").found][-1:]
    prior, notes = series.prior_of(series_root, KEY, "prefill", latest)
    assert all(other not in "; ".join(level.source) for level in prior.values()), prior
    assert any(f"{other} prefill v1: neither committed" in n for n in notes)


@pytest.mark.parametrize("value", [0, -1, "3", 2.5, None])
def test_r5_a_max_runs_that_is_no_count_of_runs_is_named(value):
    from inferlab.workflow.config import deep_merge, load_config, validate_config

    with pytest.raises(ValueError, match=r"series\.max_runs"):
        validate_config(deep_merge(load_config([]), {"series": {"max_runs": value}}))
