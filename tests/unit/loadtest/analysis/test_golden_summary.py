"""A stage summary frozen before the columns rewrite of the summary path (commit 2b48bce),
rebuilt from the same records now: every figure must come out the same, to the last bit.

``golden/records.jsonl``: 50 records of a real `loadtest run` (Poisson 1 req/s against the
real stack, 32 -> 128 tokens), plus a 503, a timeout and a one-token answer inside the
measured window. ``golden/stage-summary.json``: :func:`build_stage` of them at 2b48bce.
"""

import json
from pathlib import Path

from loadtest.analysis.metrics import build_stage
from loadtest.analysis.records import read_records
from loadtest.analysis.slo import parse_slos
from loadtest.analysis.summary import GeneratorReport
from loadtest.profiles import parse_profile

GOLDEN = Path(__file__).parent / "golden"


def test_the_summary_of_a_real_run_is_the_one_frozen_before_the_rewrite():
    stage = build_stage(
        read_records(GOLDEN / "records.jsonl"),
        plan=parse_profile("poisson:rate=1").next_stage([]),
        window=(10.0, 70.0),
        timed=True,
        objectives=parse_slos("ttft_p95=1s,itl_p99=300ms,tpot_p50=400ms,e2e_p95=60s"),
        started_unix=1_796_000_000.0,
        offset_s=0.25,
        generator=GeneratorReport(cpu_seconds_load=1.5, cpu_percent_p90=20.0, saturated=False),
        duration_s=70.0,
    )
    frozen = json.loads((GOLDEN / "stage-summary.json").read_text())
    assert frozen["requests"]["errors"] == {"http_5xx": 1, "timeout": 1}  # the fixture covers the error paths
    now = json.loads(stage.model_dump_json())
    # Fields added since (issue 24), at their neutral values for a run without them:
    added = {("requests", "cancelled"): 0, ("requests", "cancel_planned"): 0, ("sessions",): None, ("gpu",): None, ("models",): [], ("tenants",): [], ("classes",): [],
             ("server", "in_flight_after"): None, ("server", "settled_after_s"): None, ("server", "settled"): None,
             ("generator", "cpu_wait_s"): None, ("generator", "cpu_wait_at_lag_max_s"): None,
             ("generator", "realtime"): None}
    for path, value in added.items():
        holder = now
        for key in path[:-1]:
            holder = holder[key]
        assert holder.pop(path[-1]) == value, path
    assert now == frozen
