"""``python -m inferlab``: the command line (inferlab.cli)."""

import sys

from inferlab.cli import main

sys.exit(main())
