"""``python -m simulator``: the simulator's command (also ``loadtest simulate``)."""

import sys

from simulator.cli import main

sys.exit(main())
