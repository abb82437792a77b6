"""``python -m loadtest.generator JOB.json``: run one load-generator stage."""

import sys

from loadtest.generator.priority import claim_priority, priority_from_argv  # noqa: I001  (standard library only)

# Before any import that starts a thread (they inherit the policy; earlier ones would not).
claim_priority(priority_from_argv(sys.argv[1:]))

import locust  # noqa: E402, F401  (gevent monkey-patching before the other imports)

from loadtest.generator.main import main  # noqa: E402

sys.exit(main())
