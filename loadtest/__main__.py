"""``python -m loadtest``: the ``loadtest`` command."""

import sys

from loadtest.cli import main

sys.exit(main())
