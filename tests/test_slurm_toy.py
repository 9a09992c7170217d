"""The toy workflow in tests/slurm_toy runs through the real Slurm executor on a local cluster.

Skipped (with the reason) where Slurm, munge, MariaDB or snakemake-executor-plugin-slurm is
missing; see docs/slurm.md for what a machine needs to run it (about 35 s once it does).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from tests.slurm_cluster import SlurmCluster, slurm_cluster  # noqa: F401  (the fixture)

TOY = Path(__file__).resolve().parent / "slurm_toy"
RULES = {"prepare": "cpu", "gpu_step": "gpu", "summarize": "cpu"}  # rule -> partition

pytestmark = pytest.mark.slurm


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


def test_every_rule_ran_as_one_completed_slurm_job(toy_run):
    cluster, run, _, _ = toy_run
    jobs = run.slurm_jobs()
    assert jobs.keys() == RULES.keys(), run.describe()
    assert all(len(ids) == 1 for ids in jobs.values()), jobs
    ids = [ids[0] for ids in jobs.values()]
    assert len(set(ids)) == len(ids), jobs
    records = cluster.job_records(ids)
    for rule, partition in RULES.items():
        record = records.get(jobs[rule][0])
        assert record is not None, f"job {jobs[rule][0]} of {rule} unknown to Slurm: {records}"
        assert record["State"] == "COMPLETED", (rule, record)
        assert record["Partition"] == partition, (rule, record)
    gpu_record = records[jobs["gpu_step"][0]]
    if "AllocTRES" in gpu_record:  # sacct answered (scontrol, the fallback, does not say)
        assert "gres/gpu=1" in gpu_record["AllocTRES"], gpu_record


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
