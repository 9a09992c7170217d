"""Snakemake glue for every stage rule: the rule's name is the stage's name.

All the work is in inferlab.pipeline.run_from_snakemake, which reads snakemake.rule,
.config, .params (machine, command), .output and .log; nothing else happens here.
"""

import sys
from pathlib import Path

# Snakemake runs a copy of this script from .snakemake/scripts/; the package is in the
# workflow's root, the parent of the original script's folder.
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821 - set by Snakemake

from inferlab.pipeline import run_from_snakemake  # noqa: E402

run_from_snakemake(snakemake)  # noqa: F821
