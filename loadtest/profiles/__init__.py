"""Load profiles, registered by name (``--profile NAME:key=value,...``)."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from loadtest.profiles.base import (
    ClosedLoad,
    LoadProfile,
    OpenLoad,
    ReplayLoad,
    StageOutcome,
    StagePlan,
)
from loadtest.profiles.curves import DailyCycle, RateTrace
from loadtest.profiles.rate_search import RateSweep
from loadtest.profiles.replay import ReplayProfile
from loadtest.profiles.simple import ConstantRate, FixedConcurrency, LinearRamp, Poisson
from loadtest.registry import Registry
from loadtest.specs import build_from_spec

PROFILE_CLASSES = (FixedConcurrency, ConstantRate, Poisson, LinearRamp, DailyCycle, RateTrace, RateSweep, ReplayProfile)

ProfileConfig = Annotated[
    Union[FixedConcurrency, ConstantRate, Poisson, LinearRamp, DailyCycle, RateTrace, RateSweep, ReplayProfile],
    Field(discriminator="kind"),
]
"""Any registered profile (a discriminated union on ``kind``)."""


def profile_registry() -> Registry:
    """The registry of load profiles."""
    return Registry("profile", PROFILE_CLASSES, aliases={"sweep": "rate-sweep"})


def parse_profile(spec: str) -> ProfileConfig:
    """A profile from ``NAME:key=value,...``, e.g. ``poisson:rate=4,burstiness=0.5``."""
    return build_from_spec(profile_registry(), spec)


__all__ = [
    "ClosedLoad",
    "ConstantRate",
    "DailyCycle",
    "FixedConcurrency",
    "LinearRamp",
    "LoadProfile",
    "OpenLoad",
    "Poisson",
    "ProfileConfig",
    "RateSweep",
    "RateTrace",
    "ReplayLoad",
    "ReplayProfile",
    "StageOutcome",
    "StagePlan",
    "parse_profile",
    "profile_registry",
]
