"""A stage that runs nothing on the device (series, traffic, claims, manuscript) derives
another machine's evidence on this host: the GPU call's measured stages, merged here, are
pooled and judged for the GPU they were measured on, never for this CPU.

Found on 4 December 2026: the H200's runs 2 and 3 came back from a call that ran only
prefill and decode, and ``inferlab stage series --machine cuda-nvidia-h200 --configfile
profiles/book.yaml`` was refused here ("device: 'cuda' but torch.cuda.is_available() is
False"); once it ran, its provenance recorded this CPU, and the claims read the device from
there: 22 claims of the H200 "not measurable here" (fp16's stand-in taken as float32).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from inferlab.core.layout import REPO_ROOT
from inferlab.evidence.register import Register
from inferlab.workflow.config import load_config, resolve
from tests.pipeline_repo import copy_repo, git, run

GPU_KEY = "cuda-nvidia-h200"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="this host has CUDA: the stages would run on it")


@pytest.fixture(scope="module")
def gpu_repo(tmp_path_factory):
    """A git repository of this project holding the committed H200 evidence (anchored)."""
    if not (REPO_ROOT / "evidence" / GPU_KEY / "register.jsonl").is_file():
        pytest.skip(f"no committed evidence of {GPU_KEY}")
    repo = copy_repo(tmp_path_factory.mktemp("gpu") / "repo")
    for folder in ("results", "evidence"):
        shutil.copytree(REPO_ROOT / folder / GPU_KEY, repo / folder / GPU_KEY)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "code and the H200's evidence")
    return repo


def _stage(repo, name, *more):
    return run(repo, "stage", name, "--machine", GPU_KEY, "--configfile", "profiles/book.yaml",
               *more, module="inferlab", timeout=300)


def test_a_gpu_keys_derived_stages_run_here_and_judge_the_gpus_dtype(gpu_repo):
    before = len(Register(gpu_repo, GPU_KEY).history("claims"))
    for name in ("series", "traffic", "claims"):
        done = _stage(gpu_repo, name)
        assert done.returncode == 0, done.stderr[-3000:]
    entry = Register(gpu_repo, GPU_KEY).latest("claims")
    assert entry["version"] == before + 1
    provenance = entry["provenance"]
    assert provenance["config"]["device"] == "cuda"      # what it is about
    assert provenance["environment"]["device"] == "cpu"  # where it was derived
    claims = json.loads((gpu_repo / "results" / GPU_KEY / "claims.json").read_text())["claims"]
    by_id = {c["id"]: c for c in claims}
    # C13-09 reads the fp16 stand-in: float16 on the GPU (float32 only on a CPU)
    assert by_id["C13-09"]["device"] == "cuda"
    assert by_id["C13-09"]["judged"][0]["dtype"] == "float16"
    assert not any((c.get("cause") or {}).get("stand_in") for c in claims)


def test_a_stage_that_runs_on_the_device_is_still_refused_here(gpu_repo):
    refused = _stage(gpu_repo, "prefill")
    assert refused.returncode != 0
    assert "torch.cuda.is_available() is False" in refused.stderr


def test_a_device_free_stage_with_no_machine_named_still_needs_the_device():
    raw = load_config([REPO_ROOT / "profiles" / "book.yaml"])
    with pytest.raises(ValueError, match="torch.cuda.is_available"):
        resolve(raw, check_device=False)  # the machine id would be detected: needs the GPU
    assert resolve(raw, machine=GPU_KEY, check_device=False).device == "cuda"


def test_a_gpu_keys_stage_derived_with_this_cpus_config_is_refused(gpu_repo):
    """Without the GPU's config the series would pool the H200's runs under the CPU's
    blocks and the claims judge its fp16 as the CPU's float32 stand-in: refused, naming
    the device and the fix, and nothing is written."""
    before = len(Register(gpu_repo, GPU_KEY).history("series"))
    refused = run(gpu_repo, "stage", "series", "--machine", GPU_KEY, module="inferlab",
                  timeout=300)
    assert refused.returncode != 0
    assert "was computed for device 'cuda'; this run's config says 'cpu'" in refused.stderr
    assert "--configfile profiles/book.yaml" in refused.stderr
    assert len(Register(gpu_repo, GPU_KEY).history("series")) == before

