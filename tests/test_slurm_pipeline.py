"""The real pipeline through the real Slurm executor, on a local single-node cluster.

The smoke grid runs with ``profiles/slurm`` (only scaled down to this node: 1 CPU and
small memory per job, quick status checks, the local account), the machine id fixed at
submission. Then: every stage and the report ran as its own Slurm job, completed in
``sacct`` on the partition the profile names, and wrote its artifact inside that job;
the register is intact; and the results have the shape of a local run's.

Skipped (with the reason) without Slurm, munge, MariaDB or snakemake-executor-plugin-slurm
(docs/slurm.md says what a machine needs); about two minutes when it runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from inferlab.core import layout
from inferlab.core.layout import REPO_ROOT
from inferlab.core.pipeline import STAGES
from inferlab.evidence import artifacts
from inferlab.evidence.register import Register
from tests.pipeline_repo import copy_repo, run
from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slurm

MACHINE = "test-slurm"
LOCAL = "test-local"
SMOKE = ["--configfile", "profiles/smoke.yaml"]
JOBS = {*STAGES, "report"}


def local_profile(dest: Path) -> Path:
    """profiles/slurm as it ships, scaled to the local node (2 CPUs, ~20 GB, one fake GPU)
    and its accounting (account "inferlab"), with status checks every few seconds."""
    profile = yaml.safe_load((REPO_ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    # The plugin checks a job first after the init seconds, then 10 s later for each check
    # that found nothing finished (8, 26, 54 s...). A smoke job takes 10-13 s from sbatch
    # to its end here, so 8 s missed every one and waited 26 s; 15 s sees most at once.
    profile |= {"seconds-between-status-checks": 2,
                "slurm-init-seconds-before-status-checks": 15, "latency-wait": 5}
    profile["default-resources"] |= {"slurm_account": "inferlab", "mem_mb": 1000}
    for resources in profile["set-resources"].values():
        resources |= {"mem_mb": 1000, "cpus_per_task": 1}
    dest.mkdir(parents=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile))
    return dest


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster: SlurmCluster, tmp_path_factory):  # noqa: F811
    repo = copy_repo(tmp_path_factory.mktemp("slurm") / "repo")
    profile = local_profile(repo.parent / "profile")
    run = slurm_cluster.run_snakemake(repo, profile, *SMOKE, "--config", f"machine={MACHINE}")
    print(f"smoke pipeline through Slurm: {run.wall_s:.1f} s")
    assert run.returncode == 0, run.describe()
    jobs = run.slurm_jobs()
    for rule, ids in sorted(jobs.items()):  # the lines the issue asks to see
        print(f"slurm job {', '.join(ids)}: rule {rule}")
    return slurm_cluster, run, repo, profile


def test_every_stage_ran_as_one_completed_slurm_job(slurm_run):
    cluster, run, repo, profile = slurm_run
    jobs = run.slurm_jobs()
    assert jobs.keys() == JOBS, run.describe()
    assert all(len(ids) == 1 for ids in jobs.values()), jobs
    records = cluster.job_records([ids[0] for ids in jobs.values()])
    partitions = yaml.safe_load((profile / "config.yaml").read_text())["set-resources"]
    for rule, (job_id,) in jobs.items():
        record = records.get(job_id)
        assert record is not None, f"job {job_id} of {rule} unknown to Slurm: {records}"
        assert record["State"] == "COMPLETED", (rule, record)
        assert record["Partition"] == partitions[rule].get("slurm_partition", "cpu"), record
        if partitions[rule].get("gres") and "AllocTRES" in record:
            assert "gres/gpu=1" in record["AllocTRES"], (rule, record)


def test_each_artifact_was_written_inside_its_job(slurm_run):
    _, run, repo, _ = slurm_run
    key = layout.results_key(MACHINE, "smoke")
    for stage in STAGES:
        (job_id,) = run.slurm_jobs()[stage]
        job_log = (repo / "logs" / "slurm" / f"rule_{stage}" / f"{job_id}.log").read_text()
        assert f"[{stage}] wrote results/{key}/" in job_log, job_log[-2000:]
        sidecar = json.loads(layout.sidecar_path(layout.artifact_path(repo, key, stage))
                             .read_text())
        assert sidecar["provenance"]["machine"] == MACHINE  # fixed at submission


def test_the_register_is_intact(slurm_run):
    _, _, repo, _ = slurm_run
    key = layout.results_key(MACHINE, "smoke")
    register = Register(repo, key)
    assert register.problems() == []
    assert {s: len(register.history(s)) for s in STAGES} == {
        s: int(STAGES[s].measured) for s in STAGES}
    assert run(repo, "verify", module="inferlab").returncode == 0


def _shape(repo: Path, machine: str, stage: str):
    """What a run's artifact looks like regardless of its timings: the columns and the
    rows' identifying cells of a table, the keys and claim ids of a JSON artifact."""
    data = artifacts.read(layout.artifact_path(repo, layout.results_key(machine, "smoke"),
                                               stage), stage)
    if isinstance(data, artifacts.Table):
        ids = [c for c in ("check", "impl", "T", "cache_len", "batch", "dtype", "causal",
                           "block_q", "splits", "score_scale") if c in data.frame.columns]
        rows = data.frame[ids].map(str).to_numpy().tolist()
        return list(data.frame.columns), sorted(map(tuple, rows))
    if stage == "claims":
        return sorted(c["id"] for c in data["claims"])
    return sorted(data)


def test_the_results_have_the_shape_of_a_local_run(slurm_run):
    _, _, repo, _ = slurm_run
    local = run(repo, "--cores", "1", *SMOKE, "--config", f"machine={LOCAL}")
    assert local.returncode == 0, local.stderr[-3000:]
    for stage in STAGES:
        assert _shape(repo, MACHINE, stage) == _shape(repo, LOCAL, stage), stage


def test_a_cluster_run_without_a_fixed_machine_id_is_refused(slurm_run):
    cluster, _, repo, profile = slurm_run
    refused = cluster.run_snakemake(repo, profile, *SMOKE, "--forcerun", "probe")
    assert refused.returncode != 0
    assert re.search(r"needs the machine id fixed at submission, e.g. --config machine=\S+",
                     refused.log), refused.describe()
    assert "has been submitted with SLURM jobid" not in refused.log
