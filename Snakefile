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


rule all:
    input:
        layout.report_path(".").as_posix(),
