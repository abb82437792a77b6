"""The target traffic of a sweep (:class:`TrafficSpec`): the load tester's profile and
workload by their registered names, and the model mix its requests name."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, field_validator

from loadtest.errors import ConfigError
from loadtest.profiles import ProfileConfig, profile_registry
from loadtest.registry import Registry
from loadtest.units import Seconds
from loadtest.workloads import WorkloadConfig, workload_registry
from loadtest.workloads.model_mix import ModelMix, parse_model_mix
from sweep.strict import Strict

# The load tester's own limits on its client concurrency cap.
DEFAULT_MAX_CONCURRENCY, MAX_CONCURRENCY = 256, 4096

Positive = Annotated[Seconds, Field(gt=0)]


def _build(registry: Registry[Any], name: str, params: dict[str, object]) -> Any:
    """The load tester's registered ``name`` built from ``params``; ``ConfigError`` if it refuses."""
    cls = registry.get(name)
    try:
        return cls.model_validate({**params, "kind": name})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"the load tester's {registry.what} {name!r} refuses {problems}") from None


class LoadProfileSpec(Strict):
    """An open-loop load profile of the load tester, by its registered name.

    The sweep only needs the arrival rate: each load point of a trial builds the load
    tester's profile at the point's offered rate (:meth:`loadtest_profile`).
    ``max_concurrency`` is the load tester's cap on requests in flight (``null``:
    derived, see :meth:`SweepSpec.max_concurrency`); a point that reaches it is an
    invalid measurement.
    """

    name: str = Field("poisson", description="load tester profile name (open loop)")
    rate_rps: PositiveFloat = Field(description="target traffic: requests per second")
    burstiness: PositiveFloat = Field(1.0, description="gamma shape; 1.0 = Poisson")
    max_concurrency: int | None = Field(
        None, ge=1, le=MAX_CONCURRENCY, description="client cap on requests in flight; null = derived"
    )

    def loadtest_profile(self, rate: float, max_concurrency: int) -> ProfileConfig:
        """The load tester's profile at ``rate`` req/s (``ConfigError`` if it does not take these)."""
        params = {"rate": rate, "burstiness": self.burstiness, "max_concurrency": max_concurrency}
        return _build(profile_registry(), self.name, params)


class WorkloadSpec(Strict):
    """A load tester workload, by its registered name, with exact token lengths."""

    name: str = Field("random", description="load tester workload name (random: exact token lengths)")
    input_tokens: PositiveInt
    output_tokens: PositiveInt

    def loadtest_workload(self) -> WorkloadConfig:
        """The load tester's workload (``ConfigError`` if it does not take these lengths)."""
        params = {"input_len": self.input_tokens, "output_len": self.output_tokens}
        return _build(workload_registry(), self.name, params)


class TrafficSpec(Strict):
    """The target traffic, handed to the load tester for every load point."""

    profile: LoadProfileSpec
    workload: WorkloadSpec
    duration_s: Positive = Field(60.0, description="measured window of one load point")
    warmup_s: Annotated[Seconds, Field(ge=0)] = 10.0
    seed: int = 0
    model_mix: ModelMix | None = Field(
        None, description="the models the requests name, as `loadtest run --model-mix` takes it (the model "
                          "and the spec's adapters)")

    @field_validator("model_mix", mode="before")
    @classmethod
    def _parse_mix(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse_model_mix(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @property
    def rate_rps(self) -> float:
        return self.profile.rate_rps
