"""The field map from a load-test stage to a sweep load point."""

import pytest

from loadtest.analysis.metrics import build_stage
from loadtest.analysis.records import RequestRecord, TokenSource
from loadtest.analysis.summary import GeneratorReport
from loadtest.profiles import OpenLoad, StagePlan
from serving.config.model_spec import AcceleratorKind
from sweep.measure.load_test import load_point
from sweep.measure.verdicts import evaluate_point
from tests.unit.sweep.sweep_fakes import make_spec


def _request(i: int, start: float) -> RequestRecord:
    gaps = [0.02] * 9
    return RequestRecord(id=i, scheduled_s=start, start_s=start, start_unix=1_700_000_000 + start, ok=True,
                         status=200, ttft_s=0.1, e2e_s=0.1 + sum(gaps), itl_s=gaps, chunks=10, prompt_tokens=8,
                         output_tokens=10, token_source=TokenSource.USAGE)


def test_a_load_test_stage_becomes_a_point_with_its_validity_evidence_and_rates():
    """The field map from the load tester's own stage figures (built by its metrics)."""
    spec = make_spec(accelerator=AcceleratorKind.CPU, per_rank=1).model_copy(update={"model": "smollm2-135m-instruct"})
    plan = StagePlan(index=0, label="2 req/s", offered_rate=2.0,
                     load=OpenLoad(start_rate=2.0, end_rate=2.0, max_concurrency=8))
    records = [_request(i, i * 0.5) for i in range(40)]

    def stage(generator: GeneratorReport):
        return build_stage(records, plan=plan, window=(0.0, 20.0), timed=True,
                           objectives=spec.slo.per_request_objectives(), started_unix=1_700_000_000.0, offset_s=0.0,
                           generator=generator, duration_s=20.0)

    point = load_point(stage(GeneratorReport()), 2.0)
    assert point.valid and point.offered_rps == 2.0 and point.requests_good == point.requests_ok == 40
    assert point.arrival_rps == pytest.approx(2.0, rel=0.05) and point.completed_rps is not None
    assert point.tpot_p95_s == pytest.approx(0.02)
    assert set(point.evidence) == {"ttft_p95", "tpot_p95", "e2e_p95"}
    assert point.evidence["tpot_p95"].confidence == 1.0  # 20 ms against 50 ms: every resample
    saturated = load_point(stage(GeneratorReport(saturated=True)), 2.0)
    assert not saturated.valid and any("CPU-saturated" in r for r in saturated.invalid_reasons)
    assert not evaluate_point(saturated, spec.slo).passed
