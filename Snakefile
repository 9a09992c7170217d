# Inference Lab: the chapter's evidence for the machine at hand.
#   snakemake --cores 1                      every stage, claims and the report
#   snakemake --cores 1 prefill              one stage (and what it needs)
#   snakemake --cores 1 --config machine=ID  override the detected machine id
# Each stage is a library module (inferlab/stages/); scripts/ is glue only.
import json
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")


# Snakemake does not quote the interpreter's path in a job's command: where it or this
# folder holds a space, every job exits 127 after removing its outputs. Refused first.
for _path in (sys.executable, workflow.basedir, os.getcwd()):
    if any(c.isspace() for c in _path):
        raise WorkflowError(
            f"the path {_path!r} holds a space: Snakemake does not quote it in the commands it "
            "runs, so every job would fail with exit status 127 after removing its outputs; "
            "move or clone the repository (and make its venv) in a path without spaces"
        )


configfile: "config.yaml"


include: "rules/common.smk"


onstart:
    # On a cluster every job reads this file again on its own node, and only what was
    # given at submission (--config, --configfile) reaches it: an id detected there could
    # differ from the one this process planned the paths with (docs/slurm.md).
    if workflow.non_local_exec and config["machine"] == "auto":
        raise WorkflowError(
            f"a run through --executor {workflow.executor_plugin.name} needs the machine id "
            f"fixed at submission, e.g. --config machine={MACHINE} (the id detected here; "
            "give the compute nodes' id if they differ from this host)"
        )


include: "rules/stages.smk"
include: "rules/report.smk"


# Every stage's artifact is a target, not only the report: Snakemake does not rerun a job
# for a missing intermediate file while its downstream outputs exist, so an artifact
# deleted by an interrupted forced run would otherwise stay missing ("Nothing to be done").
rule all:
    input:
        layout.report_path(".").as_posix(),
        [artifact(name) for name in STAGES],
