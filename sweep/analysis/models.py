"""What each model a candidate serves costs (pure): the model and its LoRA adapters share
the candidate's replicas, so each is charged its share of the requests."""

from __future__ import annotations

from dataclasses import dataclass

from sweep.spec.sweep_spec import SweepSpec


@dataclass(frozen=True)
class ModelCost:
    """One served model at the target traffic."""

    model: str
    share: float  # of the requests (the traffic's model mix)
    rps: float  # requests per second it gets at the target
    cost_per_hour: float  # its share of the candidate's hourly cost


def model_costs(spec: SweepSpec, cost_per_hour: float) -> tuple[ModelCost, ...]:
    """Every model ``spec``'s candidates serve (the model, then its adapters) with its share
    of the target traffic and of ``cost_per_hour``; without a model mix the model gets all."""
    shares = spec.traffic.model_mix.shares(spec.served, spec.model) if spec.traffic.model_mix else {spec.model: 1.0}
    return tuple(ModelCost(name, shares.get(name, 0.0), shares.get(name, 0.0) * spec.target_rps,
                           shares.get(name, 0.0) * cost_per_hour) for name in spec.served)
