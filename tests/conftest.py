"""Shared test set-up: offline model access everywhere; no time limit per Hypothesis example."""

import os

from hypothesis import settings

# Hypothesis fails an example that takes over 200 ms by default: a timed assertion, which
# the tests do not make (shared, noisy machines; two pytest-xdist workers share the cores).
settings.register_profile("serveout", deadline=None)
settings.load_profile("serveout")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# The direct mode needs Serve's HAProxy ingress settings in every Ray process, read when
# Ray Serve is first imported: set them before any test module imports it.
from serving.cluster.ingress_env import apply_direct_ingress_env  # noqa: E402

apply_direct_ingress_env()
