"""A mix of models for one load test: which model each session names (pure).

A serveout stack (or vLLM with ``--lora-modules``) serves a base model and its LoRA
adapters under one endpoint; a request's ``model`` names one. ``--model-mix`` spreads
the sessions over them:

- ``clinic=5,pharmacy=3,smollm2-135m-instruct=2``: weights (normalised);
- ``zipf:S`` or ``zipf:S:N``: a Zipf law of exponent ``S`` over the models the target
  lists in ``/v1/models`` (or the first ``N`` of them), ranked in listed order: the
  k-th listed gets a share proportional to ``1 / k**S``.

Each stage's sessions get exactly those shares (largest remainder), in an order
shuffled with the stage's seed: the same seed gives the same assignment. A session
that already names a model (a JSONL line's own ``model``) keeps it; the shares are
those of the others.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadtest.errors import ConfigError, TargetError
from loadtest.workloads.base import WorkloadPlan

SYNTAX = "MODEL=WEIGHT,... or zipf:S[:N]"

Weight = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ModelMix(BaseModel):
    """``weights`` by served model id, or a Zipf law (``zipf_s``, over the first
    ``zipf_n`` listed models, default all) over the models the target lists."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: dict[str, Weight] = {}
    zipf_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    zipf_n: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_form(self) -> ModelMix:
        if bool(self.weights) == (self.zipf_s is not None):
            raise ValueError("a model mix is either weights or a Zipf law")
        if self.zipf_n is not None and self.zipf_s is None:
            raise ValueError("zipf_n needs zipf_s")
        return self

    def describe(self) -> str:
        """The mix as ``--model-mix`` takes it."""
        if self.zipf_s is not None:
            return f"zipf:{self.zipf_s:g}" + ("" if self.zipf_n is None else f":{self.zipf_n}")
        return ",".join(f"{name}={weight:g}" for name, weight in self.weights.items())

    def shares(self, listed: Sequence[str] | None, target: str) -> dict[str, float]:
        """Model id -> share of sessions (summing to 1). ``listed``: the models ``target``
        lists (``None`` when it lists none: weights then go unchecked, a Zipf law fails)."""
        if self.zipf_s is None:
            unknown = [name for name in self.weights if listed is not None and name not in listed]
            if unknown:
                raise TargetError(f"--model-mix: {target} does not serve {', '.join(map(repr, unknown))}; "
                                  f"it serves {list(listed or ())}")
            names, weights = list(self.weights), list(self.weights.values())
        else:
            if not listed:
                raise TargetError(f"--model-mix {self.describe()}: {target} lists no models (GET /v1/models)")
            if self.zipf_n is not None and self.zipf_n > len(listed):
                raise TargetError(f"--model-mix {self.describe()}: {target} lists only {len(listed)} "
                                  f"models: {list(listed)}")
            names = list(listed)[: self.zipf_n]
            weights = [rank ** -self.zipf_s for rank in range(1, len(names) + 1)]
        total = math.fsum(weights)
        return {name: w / total for name, w in zip(names, weights)}


def parse_model_mix(text: str) -> ModelMix:
    """``a=3,b=1`` or ``zipf:S[:N]`` as a :class:`ModelMix`; :class:`ConfigError` otherwise."""
    try:
        return _parse(text.strip())
    except ValidationError as exc:
        raise ConfigError(f"--model-mix {text!r}: {exc.errors()[0]['msg']} ({SYNTAX})") from None
    except ValueError as exc:
        raise ConfigError(f"--model-mix {text!r}: {exc} ({SYNTAX})") from None


def _parse(spec: str) -> ModelMix:
    if not spec:
        raise ValueError("empty")
    if spec == "zipf" or spec.startswith("zipf:"):
        parts = spec.split(":")[1:]
        if len(parts) not in (1, 2) or not all(parts):
            raise ValueError("a Zipf mix is zipf:S or zipf:S:N")
        n = parts[1] if len(parts) == 2 else None
        if n is not None and not (n.isdigit() and int(n) >= 1):
            raise ValueError(f"N must be a whole number >= 1, got {n!r}")
        return ModelMix(zipf_s=positive(parts[0], "the Zipf exponent S"), zipf_n=None if n is None else int(n))
    weights: dict[str, float] = {}
    for item in spec.split(","):
        name, sep, weight = (part.strip() for part in item.partition("="))
        if not item.strip():
            raise ValueError("an empty item (a stray comma?)")
        if not sep or not name:
            raise ValueError(f"{item.strip()!r} is not MODEL=WEIGHT")
        if name in weights:
            raise ValueError(f"{name!r} is given twice")
        weights[name] = positive(weight, f"the weight of {name!r}")
    return ModelMix(weights=weights)


def positive(text: str, what: str) -> float:
    """``text`` as a finite number > 0; :class:`ValueError` naming ``what`` otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a finite number > 0, got {text!r}")
    return value


def quotas(weights: Sequence[float], n: int) -> list[int]:
    """``n`` split in proportion to ``weights`` (largest remainder; ties: the first)."""
    total = math.fsum(weights)
    exact = [w / total * n for w in weights]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    return counts


def shuffled_quotas(shares: dict[str, float], n: int, seed: str) -> list[str]:
    """``n`` names of ``shares``, each exactly its share (:func:`quotas`), in an order
    shuffled with ``seed`` (a string: the same order in every process)."""
    names = [name for name, count in zip(shares, quotas(list(shares.values()), n)) for _ in range(count)]
    random.Random(seed).shuffle(names)
    return names


def session_models(named: Sequence[str | None], shares: dict[str, float] | None, seed: int) -> list[str | None]:
    """Each session's model: its own (``named``) when it names one, else one of ``shares``
    (exactly those shares of the others, in an order shuffled with ``seed``); ``None``
    without shares (the target's model)."""
    models = list(named)
    if not shares:
        return models
    free = [i for i, name in enumerate(models) if name is None]
    for i, name in zip(free, shuffled_quotas(shares, len(free), f"model-mix:{seed}")):
        models[i] = name
    return models


def named_model(session) -> str | None:
    """The model a workload session names itself (a prompt file's ``model``), if any."""
    return session.extra_body.get("model") if session.extra_body else None


def assign_models(plan: WorkloadPlan, shares: dict[str, float] | None, seed: int) -> WorkloadPlan:
    """``plan`` with every session that names no model given one of ``shares``
    (:func:`session_models`); ``plan`` itself without."""
    if not shares:
        return plan
    named = [named_model(s) for s in plan.sessions]
    sessions = [s if own is not None else s.model_copy(update={"extra_body": {**(s.extra_body or {}), "model": name}})
                for s, own, name in zip(plan.sessions, named, session_models(named, shares, seed))]
    return plan.model_copy(update={"sessions": tuple(sessions)})


def unknown_models(named: Iterable[str | None], listed: Sequence[str]) -> list[str]:
    """The models of ``named`` (``None``: names none) that ``listed`` does not hold, sorted."""
    return sorted({str(name) for name in named if name is not None and name not in listed})


def check_named_models(plan: WorkloadPlan, listed: Sequence[str] | None, target: str) -> None:
    """:class:`TargetError` before any request when a session names a model (a prompt
    file's ``model``) that ``target`` does not list; unchecked when it lists none."""
    if listed is None:
        return
    unknown = unknown_models(map(named_model, plan.sessions), listed)
    if unknown:
        raise TargetError(f"the workload names models {target} does not serve: {', '.join(map(repr, unknown))}; "
                          f"it serves {list(listed)}")
