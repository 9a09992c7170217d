"""Snakemake glue for the report rule: report/index.html from the keys the rule names."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821 - set by Snakemake

from inferlab.presentation.report import from_snakemake  # noqa: E402

from_snakemake(snakemake)  # noqa: F821
