"""The sweep spec: what to serve, at what traffic, against which SLO, over which space.

A :class:`SweepSpec` is loaded from YAML (:func:`sweep.spec.files.load_sweep_spec`)
and is immutable. Its traffic and SLO are stated in the load tester's own terms: the
profile and workload are registered load tester names (checked when the spec loads),
and the SLO's objectives are :class:`loadtest.analysis.slo.Objective`\ s.
:func:`measurement_fingerprint` hashes the part of it that changes what a measurement
means, so persisted results are reused only when they still apply.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from loadtest.analysis.slo import Metric, Objective, Stat
from loadtest.errors import ConfigError
from simulator.lora import adapter_names
from serving.config.model_spec import AcceleratorKind, Dtype
from sweep.spec.quality import QualitySpec
from sweep.spec.traffic import DEFAULT_MAX_CONCURRENCY, MAX_CONCURRENCY, Positive, TrafficSpec
from sweep.strict import Strict

# 2: points carry validity, bootstrap evidence and repeated samples; the client
# concurrency cap is part of the traffic.
FINGERPRINT_VERSION = 2

# A derived cap leaves this factor over Little's law at the SLO's limits.
CONCURRENCY_HEADROOM = 4.0


P95_LIMITS = {"ttft_p95": Metric.TTFT, "tpot_p95": Metric.TPOT, "e2e_p95": Metric.E2E}


class SloSpec(Strict):
    """The service-level objective at the target traffic (unset objectives are ignored).

    Each key set is one of the load tester's objectives (:attr:`objectives`): the
    latency limits are seconds (``"500ms"`` and ``"2s"`` are accepted), each an upper
    bound on the run's p95; ``min_goodput_share`` is a lower bound on the share of sent
    requests that met every latency objective.
    """

    ttft_p95: Positive | None = None
    tpot_p95: Positive | None = None
    e2e_p95: Positive | None = None
    min_goodput_share: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _some_objective(self) -> SloSpec:
        if not self.objectives:
            raise ValueError("the SLO needs at least one objective")
        return self

    @property
    def objectives(self) -> tuple[Objective, ...]:
        """Every objective set: the p95 latencies' upper bounds, then the goodput share's lower one."""
        latency = tuple(self.per_request_objectives())
        if self.min_goodput_share is None:
            return latency
        return (*latency, Objective(metric=Metric.GOODPUT_SHARE, threshold=self.min_goodput_share))

    def per_request_objectives(self) -> tuple[Objective, ...]:
        """The latency objectives: the load tester judges a run on them and counts a
        request as good when it meets all of them (the goodput share's numerator)."""
        return tuple(
            Objective(metric=metric, stat=Stat.P95, threshold=limit)
            for key, metric in P95_LIMITS.items()
            if (limit := getattr(self, key)) is not None
        )

    def request_time_s(self, output_tokens: int) -> float | None:
        """The longest a request may take within the latency limits (``None``: no limit
        bounds it): the E2E limit or TTFT + TPOT x (output tokens - 1), the tighter."""
        bounds = []
        if self.e2e_p95 is not None:
            bounds.append(self.e2e_p95)
        if self.ttft_p95 is not None and self.tpot_p95 is not None:
            bounds.append(self.ttft_p95 + self.tpot_p95 * max(output_tokens - 1, 0))
        return min(bounds, default=None)


class ReplicaRange(Strict):
    """Replica counts to consider; ``max: null`` means as many as the budget fits.

    The capacity search still probes ONE replica of each shape when ``min > 1``
    (that is how it measures per-replica capacity).
    """

    min: PositiveInt = 1
    max: PositiveInt | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaRange:
        if self.max is not None and self.max < self.min:
            raise ValueError("replicas.max must be >= replicas.min")
        return self


def _unique(values: tuple[object, ...], what: str) -> tuple[object, ...]:
    if not values:
        raise ValueError(f"{what} needs at least one value")
    if len(set(values)) != len(values):
        raise ValueError(f"{what} has duplicates: {list(values)}")
    return values


class SpaceSpec(Strict):
    """The configuration space: TP sizes x replica counts x engine settings x dtypes.

    ``null`` in an engine-setting or dtype list means "the model spec's own value".
    """

    tensor_parallel: tuple[PositiveInt, ...] = (1,)
    replicas: ReplicaRange = ReplicaRange()
    max_num_seqs: tuple[PositiveInt | None, ...] = (None,)
    max_num_batched_tokens: tuple[Annotated[int, Field(ge=16)] | None, ...] = (None,)
    max_loras: tuple[PositiveInt | None, ...] = Field((None,), description="LoRA adapter slots per batch")
    dtype: tuple[Dtype | None, ...] = Field((None,), description="the engine's dtype (float32, bfloat16, ...)")

    @model_validator(mode="after")
    def _lists(self) -> SpaceSpec:
        for name in ("tensor_parallel", "max_num_seqs", "max_num_batched_tokens", "max_loras", "dtype"):
            _unique(getattr(self, name), f"space.{name}")
        return self


class BudgetSpec(Strict):
    """The accelerators available: ``nodes`` x ``accelerators_per_node`` of one kind.

    For CPU an "accelerator" is one core. ``accelerators_per_rank`` is what one
    tensor-parallel rank occupies (1 GPU, or N cores). ``max_accelerators`` caps the
    total below the hardware (e.g. a quota).
    """

    accelerator: AcceleratorKind
    nodes: PositiveInt = 1
    accelerators_per_node: PositiveInt
    accelerators_per_rank: PositiveInt = 1
    max_accelerators: PositiveInt | None = None

    @property
    def total(self) -> int:
        """Accelerators the sweep may use at once."""
        hardware = self.nodes * self.accelerators_per_node
        return hardware if self.max_accelerators is None else min(hardware, self.max_accelerators)


class SearchSettings(Strict):
    """How the configuration space is searched (see :mod:`sweep.search.strategies`) and
    how each load point is sampled (see :mod:`sweep.measure.sampling`)."""

    strategy: str = Field("capacity-search", description="registered strategy name")
    ladder_factor: float = Field(
        2.0, gt=1, description="probe ladder: one replica at R/n for n growing by this factor"
    )
    assumed_scaling_efficiency: float = Field(
        1.0, gt=0, le=1, description="used to predict replicas until one is measured"
    )
    extra_rate_factors: tuple[Annotated[float, Field(gt=1)], ...] = Field(
        (), description="also measure each target trial at R x factor (p95 vs offered rate)"
    )
    probe_refine: int = Field(
        2, ge=0, le=8, description="bisections of a probe between its highest pass and its first failure"
    )
    boundary_margin: float = Field(
        0.1, ge=0, lt=1, description="a point whose verdict hangs on objectives this close to their limits "
        "(as a share of the limit) is sampled again"
    )
    max_samples: int = Field(3, ge=1, le=9, description="samples (new seeds) of one point at most")


class SimulationSpec(Strict):
    """Measure with the simulator instead of deploying (``sweep run --simulate``).

    ``hardware`` is a simulator hardware profile (``simulator/hardware/NAME.yaml``, or a
    YAML path such as a fitted profile); ``None`` means the budget's accelerator kind
    (``h200`` -> the ``h200`` profile).
    """

    hardware: str | None = Field(None, description="simulator hardware profile; null = budget.accelerator")


class SweepSpec(Strict):
    """One sweep: a model, its target traffic and SLO, the space, the budget, the prices;
    ``simulation`` set means every candidate is simulated, not deployed."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    description: str = ""
    tested_here: bool = Field(False, description="false for specs documented but not run here")
    model: str = Field(description="model spec name (models/<name>.yaml)")
    prices: Path = Field(Path("prices.yaml"), description="price table; relative to the spec file")
    traffic: TrafficSpec
    slo: SloSpec
    space: SpaceSpec
    budget: BudgetSpec
    search: SearchSettings = SearchSettings()
    simulation: SimulationSpec | None = Field(None, description="set: simulated, not measured")
    adapters: tuple[str, ...] = Field(
        (), description="LoRA adapters of the model the traffic names (traffic.model_mix): the model spec's "
                        "adapter names, or, simulated, a count N (adapter-1 ... adapter-N)")
    quality: QualitySpec | None = Field(None, description="grade each candidate's answers (absent: latency only)")

    @field_validator("adapters", mode="before")
    @classmethod
    def _adapter_count(cls, value: Any) -> Any:
        return adapter_names(value)

    @property
    def served(self) -> tuple[str, ...]:
        """The model ids the candidates serve: the model, then its adapters."""
        return (self.model, *self.adapters)

    @property
    def simulated(self) -> bool:
        return self.simulation is not None

    @property
    def hardware(self) -> str:
        """The simulator hardware profile of the candidates (the budget's kind unless set)."""
        chosen = None if self.simulation is None else self.simulation.hardware
        return chosen or self.budget.accelerator.value

    @model_validator(mode="after")
    def _cap_fits(self) -> SweepSpec:
        needed, cap = self.in_flight_needed(), self.traffic.profile.max_concurrency
        limit = MAX_CONCURRENCY if cap is None else cap
        if needed is not None and needed > limit:
            what = f"traffic.profile.max_concurrency {cap}" if cap is not None else f"the load tester's cap of {limit}"
            raise ValueError(
                f"{what} is below the ~{needed} requests in flight that Little's law gives at "
                f"{self.max_rate_rps:g} req/s when requests take the {self.request_time_s():.3g} s the SLO "
                "allows: every point near the SLO would hit the cap"
            )
        return self

    @model_validator(mode="after")
    def _load_tester_takes_the_traffic(self) -> SweepSpec:
        try:
            self.traffic.profile.loadtest_profile(self.target_rps, self.max_concurrency())
            self.traffic.workload.loadtest_workload()
        except ConfigError as exc:
            raise ValueError(f"traffic: {exc}") from None
        return self

    @property
    def target_rps(self) -> float:
        return self.traffic.rate_rps

    @property
    def max_rate_rps(self) -> float:
        """The highest rate a target trial offers (the target x the largest extra factor)."""
        return self.target_rps * max((1.0, *self.search.extra_rate_factors))

    def request_time_s(self) -> float | None:
        return self.slo.request_time_s(self.traffic.workload.output_tokens)

    def in_flight_needed(self) -> int | None:
        """Little's law at the highest offered rate with requests as slow as the SLO allows."""
        time_s = self.request_time_s()
        return None if time_s is None else math.ceil(self.max_rate_rps * time_s - 1e-9)

    def max_concurrency(self) -> int:
        """The client cap handed to the load tester: the spec's, else
        :data:`CONCURRENCY_HEADROOM` x :meth:`in_flight_needed` within the load tester's
        default and maximum."""
        if self.traffic.profile.max_concurrency is not None:
            return self.traffic.profile.max_concurrency
        needed = self.in_flight_needed() or 0
        return min(MAX_CONCURRENCY, max(DEFAULT_MAX_CONCURRENCY, math.ceil(CONCURRENCY_HEADROOM * needed)))


def as_simulated(spec: SweepSpec, hardware: str | None = None) -> SweepSpec:
    """``spec`` measured by the simulator on ``hardware`` (``None``: the spec's own
    simulation profile if it has one, else the budget's accelerator kind)."""
    chosen = hardware or (spec.simulation.hardware if spec.simulation else None)
    return spec.model_copy(update={"simulation": SimulationSpec(hardware=chosen)})


def simulated_label(spec: SweepSpec) -> str:
    """The line every output of a simulated sweep carries (empty for a measured one)."""
    if not spec.simulated:
        return ""
    from simulator.accuracy import band_for

    band = band_for(spec.hardware)
    error = (f"its error: {band.describe()}" if band else
             "its error is not measured for this profile (no published validation points)")
    return (f"SIMULATED, not measured: every figure comes from the simulator (hardware profile "
            f"{spec.hardware!r}, model {spec.model!r}); {error} (docs/simulator.md)")


def measurement_fingerprint(spec: SweepSpec) -> str:
    """A short stable hash of what a measurement depends on.

    Included: model (and its adapters), the quality probe's set and size (measured only),
    traffic (the client concurrency cap and model mix too), SLO (the load tester
    counts goodput against it), accelerator kind and accelerators per rank (how a
    candidate is deployed).
    A simulated sweep adds its hardware profile, so simulated and measured results
    never stand in for each other. Excluded: prices, budget size, space lists and search settings, which only
    decide *which* candidates are measured, so changing them reuses results.
    """
    traffic = spec.traffic.model_dump(mode="json")
    if traffic["model_mix"] is None:  # absent without a mix: fingerprints stay as they were
        del traffic["model_mix"]
    payload = {
        "v": FINGERPRINT_VERSION,
        "model": spec.model,
        "traffic": traffic,
        "max_concurrency": spec.max_concurrency(),
        "slo": spec.slo.model_dump(mode="json"),
        "accelerator": spec.budget.accelerator.value,
        "accelerators_per_rank": spec.budget.accelerators_per_rank,
    }
    if spec.simulation is not None:  # absent for measured sweeps: their fingerprints stay as they were
        payload["simulated_on"] = spec.hardware
    if spec.adapters:
        payload["adapters"] = list(spec.adapters)
    if spec.quality is not None and spec.simulation is None:  # absent without quality: fingerprints stay
        payload["quality"] = {"set": spec.quality.set_name, "items": spec.quality.items}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
