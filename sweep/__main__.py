"""``python -m sweep``: the ``sweep`` command."""

import sys

from sweep.cli import main

sys.exit(main())
