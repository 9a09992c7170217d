"""Snakemake glue for the report rule: report/index.html from every machine's results."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # noqa: F821 - set by Snakemake

from inferlab.pipeline import report_from_snakemake  # noqa: E402

report_from_snakemake(snakemake)  # noqa: F821
