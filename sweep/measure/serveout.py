"""The real :class:`~sweep.search.loop.Measure`: deploy a candidate on serveout,
load-test it, leave it for the next candidate or tear it down.

This is the seam between the load tester and the serving stack. It deploys the
candidate's :class:`StackConfig` (:func:`sweep.measure.deployment.stack_config_for`)
with serving's public app builder on a local cluster the caller owns, then drives the
load tester through its typed API: a :class:`~loadtest.config.LoadTestConfig` in,
:func:`~loadtest.run.orchestrator.run_load_test`'s :class:`~loadtest.analysis.summary.Summary`
out (both maps in :mod:`sweep.measure.load_test`); with the spec's ``quality``, the same
deployment then answers the quality probe (:mod:`sweep.measure.quality_probe`). The load
tester never imports Locust here: its generator runs in child processes (Locust cannot
share a process with Ray).
A candidate whose engines are built the same way as the one deployed before (only the
replica count, routing or gateway settings differ) is deployed over it: Serve adds or
stops replicas and keeps the running engines, as serveout does for any such change
(:func:`serving.app_builder.engine_version`); otherwise the previous candidate is torn
down first. Close the measurer (it is a context manager) to tear down the last one.
Serving's errors stop at this seam: a failed deploy is a ``failed-to-deploy`` result,
and a model that is unknown or not prepared is :class:`ModelUnavailableError`
(:mod:`sweep.measure.models`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from loadtest.errors import LoadTestError
from loadtest.run.orchestrator import RunOptions, run_load_test
from serving.app_builder import engine_version
from serving.config.model_spec import ModelCatalog
from serving.config.stack import StackConfig
from serving.errors import ClusterError
from serving.cluster.local import LocalCluster
from sweep.measure.deployment import stack_config_for
from sweep.measure.load_test import load_point, loadtest_config
from sweep.measure.models import prepared_adapters, prepared_model
from sweep.measure.quality_probe import measure_quality
from sweep.measure.results import LoadPoint, MeasuredResult, RunStatus, Trial
from sweep.measure.sampling import measure_rates
from sweep.spec.files import probe_items
from sweep.spec.sweep_spec import SweepSpec


class ServeoutMeasurer:
    """Measures trials on a :class:`LocalCluster` (owned by the caller)."""

    def __init__(self, spec: SweepSpec, cluster: LocalCluster, *, catalog: ModelCatalog,
                 artifacts: Path, on_phase: Callable[[str], None] = lambda _: None) -> None:
        self.spec, self.cluster, self.catalog = spec, cluster, catalog
        self.model_path = prepared_model(spec.model, catalog)
        self.adapters = prepared_adapters(spec.model, spec.adapters, catalog)
        self.artifacts = artifacts
        self.on_phase = on_phase
        self.probe_items = probe_items(spec)
        self.deployed: StackConfig | None = None  # the last candidate, left running for the next

    def __enter__(self) -> "ServeoutMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Tear down the candidate deployed last, if any."""
        if self.deployed is not None:
            self._teardown(self.deployed)
            self.deployed = None

    def measure(self, trial: Trial) -> MeasuredResult:
        started = time.monotonic()
        config = stack_config_for(trial.candidate, self.spec, catalog=self.catalog,
                                  model_path=self.model_path, port=self.cluster.options.http_port,
                                  adapters=self.adapters)
        if self.deployed is not None and (self.deployed.app_name != config.app_name
                                          or engine_version(self.deployed) != engine_version(config)):
            self.close()  # its engines are built differently: they cannot serve this candidate
        try:
            self.on_phase("deploying")
            self.deployed = config
            url = self.cluster.deploy(config, on_progress=lambda s: self.on_phase(f"deploying: {s}"))
        except ClusterError as exc:
            self.close()
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

        points: tuple[LoadPoint, ...] = ()
        try:
            points = measure_rates(trial, self.spec.traffic.seed, self.spec.slo, self.spec.search, take)
            quality = None
            if self.spec.quality is not None:
                self.on_phase(f"quality probe: {len(self.probe_items)} items")
                quality = measure_quality(url, self.spec.model, self.probe_items, self.spec.quality)
            return MeasuredResult(status=RunStatus.OK, points=points, quality=quality, artifacts=tuple(folders),
                                  wall_time_s=time.monotonic() - started)
        except (LoadTestError, OSError) as exc:
            what = "quality probe" if points else "load test"
            return MeasuredResult(status=RunStatus.TOOL_ERROR, reason=_short(f"{what} failed: {exc}"),
                                  points=points, artifacts=tuple(folders), wall_time_s=time.monotonic() - started)

    def _teardown(self, config: StackConfig) -> None:
        self.on_phase("tearing down")
        try:
            self.cluster.undeploy(config.app_name)
        except Exception:  # nothing deployed (a failed deploy may leave nothing behind)
            pass


def _short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
