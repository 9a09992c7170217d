"""Snakemake through the real Slurm executor, on a local single-node cluster: first a toy
workflow (tests/slurm_toy: which partition, CPUs and GPU a job gets), then this project's
pipeline.

The smoke grid runs with ``profiles/slurm`` (only scaled down to this node: 1 CPU and
small memory per job, quick status checks, the local account), the machine id fixed at
submission. Then: every stage and the report ran as its own Slurm job, completed in
``sacct`` on the partition the profile names, and wrote its artifact inside that job;
the register is intact; and the results have the shape of a local run's.

One file, so that one pytest-xdist worker (``--dist loadfile``) holds the cluster. Skipped
(with the reason) without Slurm, munge, MariaDB or snakemake-executor-plugin-slurm
(docs/slurm.md says what a machine needs); a few minutes when it runs.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
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
TOY = Path(__file__).resolve().parent / "slurm_toy"
RULES = {"prepare": "cpu", "gpu_step": "gpu", "summarize": "cpu"}  # rule -> partition


def read_report(path: Path) -> dict[str, str]:
    """The KEY=VALUE lines a toy rule wrote about its job (the first block only)."""
    report: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key in report:  # summarize appends its inputs' reports after its own
            break
        report[key] = value
    return report


@pytest.fixture(scope="module")
def toy_run(slurm_cluster: SlurmCluster, tmp_path_factory):  # noqa: F811
    """The toy, copied to a fresh folder, run once with a machine id fixed at submission."""
    workdir = tmp_path_factory.mktemp("slurm_toy")
    shutil.copytree(TOY, workdir, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("out", "logs", ".snakemake"))
    machine = f"toy-{uuid.uuid4().hex[:8]}"
    run = slurm_cluster.run_snakemake(workdir, workdir / "profile",
                                      "--config", f"machine={machine}")
    print(f"toy workflow through Slurm: {run.wall_s:.1f} s")
    assert run.returncode == 0, run.describe()
    return slurm_cluster, run, workdir, machine


def assert_completed(cluster: SlurmCluster, jobs: dict[str, list[str]],
                     partitions: dict[str, str], gpu_rules: set[str]) -> None:
    """Each rule in ``jobs`` ran as one Slurm job, COMPLETED on its partition, with the GPU
    it asked for."""
    assert all(len(ids) == 1 for ids in jobs.values()), jobs
    records = cluster.job_records([ids[0] for ids in jobs.values()])
    for rule, (job_id,) in jobs.items():
        record = records.get(job_id)
        assert record is not None, f"job {job_id} of {rule} unknown to Slurm: {records}"
        assert record["State"] == "COMPLETED", (rule, record)
        assert record["Partition"] == partitions[rule], (rule, record)
        if rule in gpu_rules and "AllocTRES" in record:  # sacct answered (scontrol does not)
            assert "gres/gpu=1" in record["AllocTRES"], (rule, record)


def test_every_rule_ran_as_one_completed_slurm_job(toy_run):
    cluster, run, _, _ = toy_run
    jobs = run.slurm_jobs()
    assert jobs.keys() == RULES.keys(), run.describe()
    assert_completed(cluster, jobs, RULES, {"gpu_step"})
    assert len({ids[0] for ids in jobs.values()}) == len(jobs), jobs


def test_outputs_were_written_inside_those_jobs(toy_run):
    _, run, workdir, machine = toy_run
    jobs = run.slurm_jobs()
    outputs = {"prepare": "prepare.txt", "gpu_step": "gpu_step.txt",
               "summarize": "summary.txt"}
    reports = {}
    for rule, name in outputs.items():
        path = workdir / "out" / machine / name
        assert path.is_file(), f"{rule} wrote no {path}"
        reports[rule] = read_report(path)
        assert reports[rule]["rule"] == rule
        assert reports[rule]["slurm_job_id"] == jobs[rule][0], (rule, reports[rule])
        assert reports[rule]["partition"] == RULES[rule], (rule, reports[rule])
        # --config machine=ID given at submission reached the job's own Snakemake.
        assert reports[rule]["machine"] == machine, (rule, reports[rule])


def test_threads_cpus_and_gpu_requests_reach_the_job(toy_run):
    _, _, workdir, machine = toy_run
    prepare, gpu, summary = (read_report(workdir / "out" / machine / name)
                             for name in ("prepare.txt", "gpu_step.txt", "summary.txt"))
    # threads: 2 and no cpus_per_task -> --cpus-per-task=2
    assert (prepare["threads"], prepare["cpus_per_task"]) == ("2", "2")
    # threads: 2 but cpus_per_task: 1 -> one CPU, and Snakemake scales threads down to it
    assert (summary["threads"], summary["cpus_per_task"]) == ("1", "1")
    # gres: gpu:1 on partition gpu -> the step sees the (fake) GPU 0
    assert (gpu["step_gpus"], gpu["cuda_visible_devices"]) == ("0", "0")
    assert prepare["cuda_visible_devices"] == "" and summary["cuda_visible_devices"] == ""


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
    for rule, ids in sorted(jobs.items()):  # which job ran which rule, in the test log
        print(f"slurm job {', '.join(ids)}: rule {rule}")
    return slurm_cluster, run, repo, profile


def test_every_stage_ran_as_one_completed_slurm_job(slurm_run):
    cluster, run, repo, profile = slurm_run
    jobs = run.slurm_jobs()
    assert jobs.keys() == JOBS, run.describe()
    resources = yaml.safe_load((profile / "config.yaml").read_text())["set-resources"]
    assert_completed(cluster, jobs, {r: v.get("slurm_partition", "cpu")
                                     for r, v in resources.items()},
                     {r for r, v in resources.items() if v.get("gres")})


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
