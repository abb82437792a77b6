"""Workloads, registered by name (``--workload NAME:key=value,...``)."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from loadtest.registry import Registry
from loadtest.specs import build_from_spec
from loadtest.workloads.base import Session, Turn, Workload, WorkloadContext, WorkloadPlan
from loadtest.workloads.files import BundledPrompts, JsonlWorkload, bundled_sets
from loadtest.workloads.structured import StructuredWorkload
from loadtest.workloads.synthetic import MultiTurnWorkload, RandomWorkload, SharedPrefixWorkload
from loadtest.workloads.trace_prompts import TraceWorkload

WORKLOAD_CLASSES = (RandomWorkload, SharedPrefixWorkload, MultiTurnWorkload, JsonlWorkload, BundledPrompts,
                    TraceWorkload, StructuredWorkload)

WorkloadConfig = Annotated[
    Union[RandomWorkload, SharedPrefixWorkload, MultiTurnWorkload, JsonlWorkload, BundledPrompts, TraceWorkload,
          StructuredWorkload],
    Field(discriminator="kind"),
]
"""Any registered workload (a discriminated union on ``kind``)."""


def workload_registry() -> Registry:
    """The registry of workloads."""
    return Registry("workload", WORKLOAD_CLASSES)


def parse_workload(spec: str) -> WorkloadConfig:
    """A workload from ``NAME:key=value,...``, e.g. ``random:input_len=64,output_len=128``."""
    return build_from_spec(workload_registry(), spec)


__all__ = [
    "BundledPrompts",
    "JsonlWorkload",
    "MultiTurnWorkload",
    "RandomWorkload",
    "Session",
    "TraceWorkload",
    "SharedPrefixWorkload",
    "StructuredWorkload",
    "Turn",
    "Workload",
    "WorkloadConfig",
    "WorkloadContext",
    "WorkloadPlan",
    "bundled_sets",
    "parse_workload",
    "workload_registry",
]
