"""Fixtures for the manifest renderer: every model spec on the target its accelerator uses."""

from __future__ import annotations

import pytest

from serving.config.model_spec import ModelSpec
from serving.config.stack import StackConfig
from serving.manifests.command import load_cluster_target
from serving.manifests.target import ClusterTarget
from tests.unit.serving.manifests.manifest_helpers import SPECS, TARGETS, cluster_config, target_for


@pytest.fixture(params=SPECS, ids=lambda s: s.name)
def spec(request) -> ModelSpec:
    return request.param


@pytest.fixture
def target(spec) -> ClusterTarget:
    return target_for(spec)


@pytest.fixture(params=["direct", "separate"])
def mode(request) -> str:
    return request.param


@pytest.fixture(params=["fixed", "autoscaling"])
def config(request, spec, target, mode) -> StackConfig:
    """Every model spec in both gateway modes, with a fixed replica count and with autoscaling 1..2."""
    gateway = {"mode": mode}
    if request.param == "fixed":
        return cluster_config(spec, target, gateway=gateway)
    return cluster_config(spec, target, gateway=gateway, autoscaling={"enabled": True, "min_replicas": 1,
                                                                      "max_replicas": 2})


@pytest.fixture(scope="session")
def h200() -> ClusterTarget:
    return load_cluster_target(TARGETS / "h200-3x8.yaml")


@pytest.fixture(scope="session")
def kind() -> ClusterTarget:
    return load_cluster_target(TARGETS / "cpu-local-kind.yaml")
