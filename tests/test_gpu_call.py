"""The lent GPU's call (scripts/gpu-call.sh, docs/gpu-run.md): its seconds fit one command,
and it refuses what would waste the device's minutes before it runs anything.

Its rehearsal, the same script on the smoke profile for real (about a minute here), is not
run by the suite: the smoke pipeline's own tests run the same stages. These run the script
only where it stops within seconds (a refusal, or a stage that fails at once).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
import yaml

from inferlab.core.layout import REPO_ROOT
from inferlab.core.pipeline import STAGES, code_files
from tests.pipeline_repo import copy_repo

DEVICE_COMMAND_S = 600  # the device tool's limit on one command (its README, Limits)
SPARE = 0.10            # of the command: a slower start or pack than fixed_s counts
CALL_FILES = ("scripts/gpu-call.sh", "scripts/gpu-wheels.sh", "inferlab/measurement/ncu.py")


def test_every_step_at_its_limit_fits_one_command_with_a_tenth_spare():
    call = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())["gpu_call"]
    device_stages = [name for name, s in STAGES.items() if s.needs_device]
    assert sorted(call["stages"]) == sorted(device_stages), "a device stage without seconds"
    steps = [call["tune_s"]] + [call["stages"][name] for name in device_stages]
    worst = sum(steps) + call["grace_s"] * len(steps) + call["fixed_s"]
    assert call["command_s"] <= DEVICE_COMMAND_S
    assert worst <= (1 - SPARE) * call["command_s"], \
        f"{worst} s at the limits leaves less than {SPARE:.0%} of {call['command_s']} s"


def test_no_file_of_the_call_is_code_of_a_stage():
    # its edits must not make the evidence stale
    for name in STAGES:
        assert not set(CALL_FILES) & set(code_files(name)), name


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("gpu-call") / "repo")


def _call(repo: Path, out: str, **env: str) -> subprocess.CompletedProcess:
    settings = {k: v for k, v in os.environ.items() if k not in ("STEPS", "PROFILE")}
    settings.update(PYTHON=sys.executable, OUT=out, PYTHONDONTWRITEBYTECODE="1", **env)
    return subprocess.run(["bash", "scripts/gpu-call.sh"], cwd=repo, env=settings,
                          capture_output=True, text=True, timeout=120)


def test_a_relative_out_is_refused(repo):
    done = _call(repo, "out")
    assert done.returncode == 2 and "not an absolute path" in done.stderr
    assert not (repo / "out").exists()


def test_a_non_empty_out_is_refused_and_left_as_it_was(repo, tmp_path):
    (tmp_path / "results.tar.gz").write_text("from an earlier call")
    done = _call(repo, str(tmp_path))
    assert done.returncode == 2 and "is not an empty folder" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["results.tar.gz"]
    assert (tmp_path / "results.tar.gz").read_text() == "from an earlier call"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the call on a machine without CUDA")
def test_the_real_call_without_cuda_runs_nothing_and_says_why(repo, tmp_path):
    done = _call(repo, str(tmp_path))  # profiles/book.yaml: device cuda
    assert done.returncode == 2, done.stderr
    why = "device: 'cuda' but torch.cuda.is_available() is False here"
    assert why in done.stderr and why in (tmp_path / "call.log").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["call.log"]


def test_a_step_name_that_is_no_step_is_refused_before_any_step(repo, tmp_path):
    done = _call(repo, str(tmp_path), PROFILE="profiles/smoke.yaml", STEPS="probe prefil")
    assert done.returncode == 2
    assert "STEPS names 'prefil', which is no step" in done.stderr and "prefill" in done.stderr
    assert not (tmp_path / "results.tar.gz").exists()


def test_without_jsonschema_or_its_wheels_nothing_is_run(repo, tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "jsonschema.py").write_text("raise ImportError('not on the image')\n")
    out = tmp_path / "out"
    done = _call(repo, str(out), PROFILE="profiles/smoke.yaml", PYTHONPATH=str(hide))
    assert done.returncode == 2
    assert "gpu-wheels/*.whl did not install" in done.stderr
    assert [p.name for p in out.iterdir()] == ["call.log"]


def test_a_failing_stage_is_packed_and_the_next_steps_still_run(repo, tmp_path):
    # prefill without a probe fails at once; ncu (here: rows saying it is absent) runs after
    done = _call(repo, str(tmp_path), PROFILE="profiles/smoke.yaml", STEPS="prefill ncu")
    assert done.returncode == 1, done.stderr
    log = (tmp_path / "call.log").read_text()
    assert "prefill: exit 2" in log and "run the 'probe' stage" in log
    assert "ncu: exit 0" in log and log.rstrip().endswith("done, exit 1")
    with tarfile.open(tmp_path / "results.tar.gz") as tar:
        names = tar.getnames()
    assert {"logs/gpu-call/prefill.log", "logs/gpu-call/ncu-bytes.csv"} <= set(names)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["call.log", "results.tar.gz"]


def test_library_loads_without_jsonschema_and_a_check_says_how_to_install_it():
    # on the lent image jsonschema arrives as carried wheels, installed after the import
    code = """
import sys
sys.modules["jsonschema"] = None  # as on the lent GPU's image: not importable
from inferlab.evidence import artifacts
from inferlab.judging import claims
from inferlab.workflow import config  # noqa: F401  (no import at load)
try:
    config.validate_config({})
except ModuleNotFoundError as exc:
    print("ERROR", exc)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ERROR jsonschema is not importable" in done.stdout
    assert "gpu-wheels" in done.stdout
