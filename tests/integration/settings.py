"""What the integration tests share: the model they serve and the gateway's port."""

import os

MODEL = "smollm2-135m-instruct"
PORT = int(os.environ.get("SERVEOUT_TEST_PORT", "8000"))

# The base configuration most integration tests share: two replicas (one core each).
BASE = {"replicas": {"num_replicas": 2}, "gateway": {"max_in_flight": 24, "port": PORT}}
