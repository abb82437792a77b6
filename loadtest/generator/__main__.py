"""``python -m loadtest.generator JOB.json``: run one load-generator stage."""

import locust  # noqa: F401, I001  (gevent monkey-patching first)

import sys

from loadtest.generator.main import main

sys.exit(main())
