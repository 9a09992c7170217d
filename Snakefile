# Inference Lab: the chapter's evidence for the machine at hand.
#   snakemake --cores 1                      every stage, claims and the report
#   snakemake --cores 1 prefill              one stage (and what it needs)
#   snakemake --cores 1 --config machine=ID  override the detected machine id
# Each stage is a library module (inferlab/stages/); scripts/ is glue only.
import json
import os

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, "schemas/config.schema.json", set_default=False)


include: "rules/common.smk"
include: "rules/stages.smk"
include: "rules/report.smk"


# Every stage's artifact is a target, not only the report: Snakemake does not rerun a job
# for a missing intermediate file while its downstream outputs exist, so an artifact
# deleted by an interrupted forced run would otherwise stay missing ("Nothing to be done").
rule all:
    input:
        layout.report_path(".").as_posix(),
        [artifact(name) for name in STAGES],
