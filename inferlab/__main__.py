"""``python -m inferlab``: the command line (inferlab.workflow.cli)."""

import sys

from inferlab.workflow.cli import main

sys.exit(main())
