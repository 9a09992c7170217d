"""Snakemake glue for every stage rule: the rule's name is the stage's name.

inferlab.workflow.runner.from_snakemake takes snakemake.input (the upstream artifacts), .output,
.threads, .params (results key, effective config, reproduce command) and .log; nothing
else happens here.
"""

import sys
from pathlib import Path

# Snakemake runs a copy of this script from .snakemake/scripts/; the package is in the
# workflow's root, the parent of the original script's folder.
sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821 - set by Snakemake

from inferlab.workflow.runner import from_snakemake  # noqa: E402

from_snakemake(snakemake)  # noqa: F821
