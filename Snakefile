# Inference Lab: the chapter's evidence for the machine at hand.
#   snakemake --cores 1                      every stage, claims and the report
#   snakemake --cores 1 prefill              one stage (and what it needs)
#   snakemake --cores 1 --config machine=ID  override the detected machine id
# Each stage is a library function (inferlab/stages/); scripts/ is glue only.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, "schemas/config.schema.json", set_default=False)

from inferlab.config import resolve_machine
from inferlab.layout import STAGES, artifact_path, benchmark_path, log_path, sidecar_path
from inferlab.pipeline import (
    report_machines,
    reproduce_command,
    stage_code_files,
    stage_config,
    upstream_artifacts,
)

# Results of this run go to results/{MACHINE}/ only: rules name this one folder, never a
# wildcard, so a run can never write into another machine's folder.
MACHINE = resolve_machine(config)
# More threads than any machine has: Snakemake lowers a rule's threads to --cores.
ALL_CORES = 1024


include: "rules/stages.smk"
include: "rules/report.smk"


rule all:
    input:
        "report/index.html",
