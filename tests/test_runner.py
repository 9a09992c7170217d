"""The runner's messages when a stage cannot run (issue 23, items 15 and 16): a bad
claims file is named as it is, never blamed on the inputs' values; a registered artifact
that its schema refuses is named by its file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from inferlab.core import layout
from inferlab.evidence.register import write_artifact
from inferlab.workflow.cli import main as cli_main
from inferlab.workflow.runner import hold_before_write
from tests.pipeline_repo import commit

BOOK = "cpu-amd-epyc-avx512bf16-2c"  # the committed evidence's key


@pytest.fixture
def book(tmp_path) -> Path:
    """The committed evidence (its correctness.csv holds NaN: no_running_max rows), in a
    repository of its own with config.yaml beside it."""
    if not layout.register_path(layout.REPO_ROOT, BOOK).is_file():
        pytest.skip(f"no committed evidence of {BOOK} in this checkout")
    root = tmp_path / "book"
    for folder in (f"results/{BOOK}", f"evidence/{BOOK}"):
        shutil.copytree(layout.REPO_ROOT / folder, root / folder)
    shutil.copy2(layout.REPO_ROOT / "config.yaml", root / "config.yaml")
    commit(root)
    return root


def test_a_typo_in_the_claims_file_is_named_and_not_blamed_on_nonfinite_inputs(
        book, monkeypatch, capsys):
    text = layout.CLAIMS_FILE.read_text(encoding="utf-8")
    assert "{column: ratio," in text
    typo = book / "claims.yaml"
    typo.write_text(text.replace("{column: ratio,", "{column: ratoi,", 1), encoding="utf-8")
    monkeypatch.setattr(layout, "CLAIMS_FILE", typo)
    assert cli_main(["stage", "claims", "--root", str(book), "--machine", BOOK]) == 2
    err = capsys.readouterr().err
    assert "ratoi" in err
    assert "not finite" not in err and "likely cause" not in err, err


def test_a_malformed_registered_input_is_refused_naming_its_file(tmp_path, capsys):
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(layout.REPO_ROOT / "config.yaml", root / "config.yaml")
    # consistent in the register (written through the one writer), refused by its schema
    write_artifact(root, "cpu-test-1c", "prefill", b"impl,T\nnaive,many\n", config={},
                   code_files=[], inputs=[], seed=0, command="x", environment={})
    commit(root)
    assert cli_main(["stage", "series", "--root", str(root), "--machine", "cpu-test-1c"]) == 2
    err = capsys.readouterr().err
    assert "results/cpu-test-1c/prefill.csv" in err, err
    assert "version 1" in err and "--forcerun prefill" in err


def test_a_refused_stage_says_why_once_without_a_traceback(tmp_path, capsys):
    """R8-18: every refusal of ``inferlab stage`` printed a full traceback before its one
    clear line; the traceback now goes to the stage's log file only."""
    shutil.copy2(layout.CONFIG_FILE, tmp_path / "config.yaml")
    assert cli_main(["stage", "prefill", "--root", str(tmp_path), "--machine", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("results/nosuch/probe.json does not exist") == 1, err
    logs = list((tmp_path / "logs").rglob("*.log"))
    assert any("Traceback" in p.read_text() for p in logs), logs


def test_the_hold_point_holds_only_the_stage_it_names(tmp_path):
    """tests/test_pipeline.py interrupts a stage held here (runner.hold_before_write); unset, or
    naming another stage, it returns at once."""
    hold_before_write("prefill", {})
    hold_before_write("prefill", {"INFERLAB_HOLD": f"decode:{tmp_path / 'held'}"})
    assert not (tmp_path / "held").exists()
    with pytest.raises(ValueError, match=r"INFERLAB_HOLD='prefill:': give <stage>:<file>"):
        hold_before_write("prefill", {"INFERLAB_HOLD": "prefill:"})

