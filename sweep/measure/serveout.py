"""The real :class:`~sweep.search.loop.Measure`: deploy a candidate on serveout,
load-test it, tear it down.

This is the seam between the load tester and the serving stack. It builds the
candidate's :class:`StackConfig` and deploys it with serving's public app builder
on a local cluster the caller owns, then drives the load tester through its typed
API: a :class:`~loadtest.config.LoadTestConfig` in,
:func:`~loadtest.run.orchestrator.run_load_test`'s :class:`~loadtest.analysis.summary.Summary`
out. The load tester never imports Locust here: its generator runs in child
processes (Locust cannot share a process with Ray). Serving's errors stop at this
seam: a model that is unknown or not prepared becomes :class:`ModelUnavailableError`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from loadtest.analysis.summary import StageSummary
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from loadtest.errors import LoadTestError
from loadtest.run.orchestrator import RunOptions, run_load_test
from serving.config.model_spec import AcceleratorKind, ModelCatalog
from serving.config.stack import GatewaySpec, ReplicaSpec, StackConfig
from serving.errors import ClusterError
from serving.errors import ConfigError as ServingConfigError
from serving.local_cluster import LocalCluster
from serving.model_store import ModelStore
from sweep.errors import ModelUnavailableError
from sweep.measure.results import Evidence, LoadPoint, MeasuredResult, RunStatus, Trial
from sweep.measure.sampling import measure_rates
from sweep.spec.space import Candidate
from sweep.spec.sweep_spec import SweepSpec

# The gateway's admission bound of a candidate (requests in flight before a 429).
GATEWAY_MAX_IN_FLIGHT = 1024


def model_catalog(specs_dir: Path) -> ModelCatalog:
    """The model specs in ``specs_dir``; :class:`ModelUnavailableError` if they cannot be read."""
    try:
        return ModelCatalog(specs_dir)
    except ServingConfigError as exc:
        raise ModelUnavailableError(f"model catalog {specs_dir}: {exc}") from None


def prepared_model(name: str, catalog: ModelCatalog, home: Path | None = None) -> Path:
    """The folder of model ``name``'s prepared weights; :class:`ModelUnavailableError`
    when the catalog does not list it or it is not prepared."""
    try:
        return ModelStore(catalog, home).require(name)
    except ServingConfigError as exc:  # an unknown name, or ModelNotPreparedError
        raise ModelUnavailableError(str(exc)) from None


def stack_config_for(candidate: Candidate, spec: SweepSpec, *, catalog: ModelCatalog, model_path: Path,
                     port: int) -> StackConfig:
    """The deployment of one candidate: the spec's model at the candidate's TP,
    replica count and engine knobs, ``accelerators_per_rank`` cores per rank on CPU."""
    model = catalog.get(spec.model).model_copy(update={"tensor_parallel_size": candidate.tp})
    knobs = {k: v for k, v in candidate.engine.model_dump().items() if v is not None}
    on_cpu = model.accelerator is AcceleratorKind.CPU
    return StackConfig(
        model=model,
        model_path=model_path,
        engine=model.engine.model_copy(update=knobs),
        replicas=ReplicaSpec(
            num_replicas=candidate.replicas,
            cpus_per_rank=spec.budget.accelerators_per_rank if on_cpu else None,
        ),
        gateway=GatewaySpec(port=port, max_in_flight=GATEWAY_MAX_IN_FLIGHT),
        app_name="serveout",
    )


def loadtest_config(spec: SweepSpec, url: str, rate: float, seed: int,
                    tokenizer: Path | None = None) -> LoadTestConfig:
    """One load test of the spec's traffic at ``rate`` req/s with arrival seed ``seed``:
    warm-up then the measured window, judged on the SLO's latency objectives, one
    generator worker process per core (as ``loadtest run`` does by default)."""
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


class ServeoutMeasurer:
    """Measures trials on a :class:`LocalCluster` (owned by the caller)."""

    def __init__(self, spec: SweepSpec, cluster: LocalCluster, *, catalog: ModelCatalog,
                 artifacts: Path, on_phase: Callable[[str], None] = lambda _: None) -> None:
        self.spec, self.cluster, self.catalog = spec, cluster, catalog
        self.model_path = prepared_model(spec.model, catalog)
        self.artifacts = artifacts
        self.on_phase = on_phase

    def measure(self, trial: Trial) -> MeasuredResult:
        started = time.monotonic()
        config = stack_config_for(trial.candidate, self.spec, catalog=self.catalog,
                                  model_path=self.model_path, port=self.cluster.options.http_port)
        try:
            self.on_phase("deploying")
            url = self.cluster.deploy(config, on_progress=lambda s: self.on_phase(f"deploying: {s}"))
        except ClusterError as exc:
            self._teardown(config)
            return MeasuredResult(status=RunStatus.FAILED_TO_DEPLOY, reason=_short(str(exc)),
                                  wall_time_s=time.monotonic() - started)
        folders: list[str] = []

        def take(rate: float, seed: int) -> LoadPoint:
            self.on_phase(f"load test at {rate:g} req/s (seed {seed})")
            folder = self.artifacts / f"{trial.candidate.id}-{rate:g}rps-seed{seed}"
            folders.append(folder.name)
            test = loadtest_config(self.spec, url, rate, seed, tokenizer=self.model_path)
            summary = run_load_test(test, RunOptions(out_dir=folder, console=Console(quiet=True)))
            return load_point(summary.headline, rate)

        try:
            points = measure_rates(trial, self.spec.traffic.seed, self.spec.slo, self.spec.search, take)
            return MeasuredResult(status=RunStatus.OK, points=points, artifacts=tuple(folders),
                                  wall_time_s=time.monotonic() - started)
        except (LoadTestError, OSError) as exc:
            return MeasuredResult(status=RunStatus.TOOL_ERROR, reason=_short(f"load test failed: {exc}"),
                                  artifacts=tuple(folders), wall_time_s=time.monotonic() - started)
        finally:
            self._teardown(config)

    def _teardown(self, config: StackConfig) -> None:
        self.on_phase("tearing down")
        try:
            self.cluster.undeploy(config.app_name)
        except Exception:  # nothing deployed (a failed deploy may leave nothing behind)
            pass


def _short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
