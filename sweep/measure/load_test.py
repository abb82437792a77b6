"""The load tester's side of every measurer (pure): the spec's traffic at one rate and
seed as a :class:`~loadtest.config.LoadTestConfig`, and one load-test stage's summary as
a sweep :class:`~sweep.measure.results.LoadPoint`. A real deployment runs the config with
:func:`~loadtest.run.orchestrator.run_load_test`; the simulator simulates the same config."""

from __future__ import annotations

import os
from pathlib import Path

from loadtest.analysis.summary import StageSummary
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from sweep.measure.results import Evidence, LoadPoint
from sweep.spec.sweep_spec import SweepSpec


def loadtest_config(spec: SweepSpec, url: str, rate: float, seed: int,
                    tokenizer: Path | None = None) -> LoadTestConfig:
    """One load test of the spec's traffic at ``rate`` req/s with arrival seed ``seed``:
    warm-up then the measured window, judged on the SLO's latency objectives, one
    generator worker process per core (as ``loadtest run`` does by default), the
    requests naming the models of the traffic's model mix."""
    t = spec.traffic
    return LoadTestConfig(
        target=TargetConfig(url=url, model=spec.model),
        profile=t.profile.loadtest_profile(rate, spec.max_concurrency()),
        workload=t.workload.loadtest_workload(),
        duration_s=t.duration_s + t.warmup_s,
        warmup_s=t.warmup_s,
        slos=spec.slo.per_request_objectives(),
        seed=seed,
        tokenizer=tokenizer,
        generator=GeneratorConfig(workers=os.cpu_count() or 1),
        model_mix=t.model_mix,
    )


def load_point(stage: StageSummary, offered_rps: float) -> LoadPoint:
    """A sweep load point from one load-test stage (field map in docs/loadtest.md)."""
    lat, req, slo = stage.latency, stage.requests, stage.slo
    evidence = {
        r.objective.key: Evidence(ci_low=r.ci_low, ci_high=r.ci_high, confidence=r.confidence)
        for r in slo.objectives
    }
    validity = stage.validity
    reasons = () if validity.valid else (validity.reasons or ("the load tester marked the measurement invalid",))
    return LoadPoint(
        offered_rps=offered_rps,
        duration_s=max(stage.window.duration_s, 1e-3),
        requests_sent=req.measured,
        requests_ok=req.ok,
        requests_good=min(slo.good_requests, req.ok),
        achieved_rps=stage.throughput.request_rate or 0.0,
        arrival_rps=stage.arrivals.achieved_rate,
        completed_rps=stage.throughput.completed_rate,
        output_tokens_per_s=stage.throughput.output_tokens_per_s or 0.0,
        ttft_p95_s=lat.ttft.p95,
        tpot_p95_s=lat.tpot.p95,
        e2e_p95_s=lat.e2e.p95,
        goodput_rps=slo.goodput_rps or 0.0,
        evidence=evidence,
        invalid_reasons=tuple(reasons),
    )
