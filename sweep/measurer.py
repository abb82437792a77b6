"""The real :class:`~sweep.loop.Measure`: deploy a candidate on serveout,
load-test it in its own process, tear it down.

This is the one place the load tester touches ``serving`` other than over HTTP: it
builds the candidate's :class:`StackConfig` and deploys it with serving's public app
builder on a local cluster the caller owns. Locust runs in a child process
(``python -m loadtest run``): it cannot share a process with Ray.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from loadtest.cli import EXIT_OK, EXIT_SLO_FAILED
from loadtest.errors import SummaryError
from loadtest.analysis.summary import StageSummary, load_summary
from sweep.candidate import Candidate
from sweep.results import Evidence, LoadPoint, MeasuredResult, RunStatus, Trial
from sweep.sampling import measure_rates
from sweep.spec import SweepSpec, sweep_objective
from serving.config.model_spec import AcceleratorKind, ModelCatalog
from serving.config.stack import GatewaySpec, ReplicaSpec, StackConfig
from serving.errors import ClusterError
from serving.local_cluster import LocalCluster
from serving.model_store import ModelStore


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
        gateway=GatewaySpec(port=port, max_in_flight=1024),
        app_name="serveout",
    )


def load_point(stage: StageSummary, offered_rps: float) -> LoadPoint:
    """A sweep load point from one load-test stage (field map in docs/loadtest.md)."""
    lat, req, slo = stage.latency, stage.requests, stage.slo
    evidence = {
        objective: Evidence(ci_low=r.ci_low, ci_high=r.ci_high, confidence=r.confidence)
        for r in slo.objectives
        if (objective := sweep_objective(r.objective)) is not None
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


def loadtest_command(spec: SweepSpec, url: str, rate: float, seed: int, folder: Path) -> list[str]:
    """``loadtest run`` for one sample at ``rate`` with arrival seed ``seed``."""
    t = spec.traffic
    profile = (f"{t.profile.name}:rate={rate:g},burstiness={t.profile.burstiness:g},"
               f"max_concurrency={spec.max_concurrency()}")
    workload = f"{t.workload.name}:input_len={t.workload.input_tokens},output_len={t.workload.output_tokens}"
    cmd = [sys.executable, "-m", "loadtest", "run", "--target", url, "--model", spec.model,
           "--profile", profile, "--workload", workload,
           "--duration", f"{t.duration_s + t.warmup_s:g}s", "--warmup", f"{t.warmup_s:g}s",
           "--seed", str(seed), "--out", str(folder), "--quiet"]
    if slo := spec.slo.as_loadtest_slo():
        cmd += ["--slo", slo]
    return cmd


class LoadTestFailed(RuntimeError):
    """``loadtest run`` did not produce a summary: a tool error, not a verdict."""


class ServeoutMeasurer:
    """Measures trials on a :class:`LocalCluster` (owned by the caller)."""

    def __init__(self, spec: SweepSpec, cluster: LocalCluster, *, catalog: ModelCatalog,
                 artifacts: Path, on_phase: Callable[[str], None] = lambda _: None) -> None:
        self.spec, self.cluster, self.catalog = spec, cluster, catalog
        self.model_path = ModelStore(catalog).require(spec.model)
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
            return load_point(self._load_test(url, rate, seed, folder), rate)

        try:
            points = measure_rates(trial, self.spec.traffic.seed, self.spec.slo, self.spec.search, take)
            return MeasuredResult(status=RunStatus.OK, points=points, artifacts=tuple(folders),
                                  wall_time_s=time.monotonic() - started)
        except (LoadTestFailed, SummaryError, OSError) as exc:
            return MeasuredResult(status=RunStatus.TOOL_ERROR, reason=_short(str(exc)), artifacts=tuple(folders),
                                  wall_time_s=time.monotonic() - started)
        finally:
            self._teardown(config)

    def _load_test(self, url: str, rate: float, seed: int, folder: Path) -> StageSummary:
        cmd = loadtest_command(self.spec, url, rate, seed, folder)
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode not in (EXIT_OK, EXIT_SLO_FAILED):
            raise LoadTestFailed(f"load test failed ({result.returncode}): {result.stderr.strip()[-1500:]}")
        return load_summary(folder / "summary.json").headline

    def _teardown(self, config: StackConfig) -> None:
        self.on_phase("tearing down")
        try:
            self.cluster.undeploy(config.app_name)
        except Exception:  # nothing deployed (a failed deploy may leave nothing behind)
            pass


def _short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
