"""What the integration tests share: the model they serve, the gateway's port, a short sweep."""

import os

from tests.paths import REPO

MODEL = "smollm2-135m-instruct"
PORT = int(os.environ.get("SERVEOUT_TEST_PORT", "8000"))



def replicas(count: int) -> dict:
    """``count`` engine replicas of one core each. The cores per rank are fixed, so a
    change of ``count`` alone restarts no running engine (Serve adds or stops replicas),
    and a sweep candidate of the same size reuses the engines already running."""
    return {"num_replicas": count, "cpus_per_rank": 1}


# The base configuration most integration tests share: two replicas (one core each).
BASE = {"replicas": replicas(2), "gateway": {"max_in_flight": 24, "port": PORT}}

# A short real sweep of the default model (1 and 2 replicas, TP 1): seconds per point,
# one sample each.
SWEEP_SPEC = {
    "name": "it-sweep",
    "model": "smollm2-135m-instruct",
    "prices": str(REPO / "sweeps" / "prices.yaml"),
    "traffic": {"profile": {"name": "poisson", "rate_rps": 1.0},
                "workload": {"name": "random", "input_tokens": 64, "output_tokens": 16},
                "duration_s": "6s", "warmup_s": "1s", "seed": 1},
    "slo": {"ttft_p95": "20s", "e2e_p95": "60s", "min_goodput_share": 0.5},
    "space": {"tensor_parallel": [1], "replicas": {"min": 1, "max": 2}},
    "budget": {"accelerator": "cpu", "nodes": 1, "accelerators_per_node": 2, "accelerators_per_rank": 1},
    "search": {"strategy": "grid", "max_samples": 1},  # resampling is unit-tested (sweep/measure)
}
