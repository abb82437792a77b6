"""Cluster targets and how a config is cut into worker pods."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serving.config.model_spec import AcceleratorKind
from serving.errors import ConfigError
from serving.manifests.command import load_cluster_target
from serving.manifests.naming import resource_name
from serving.manifests.sizing import plan_workers
from serving.manifests.target import RAY_VERSION, ClusterTarget
from tests.unit.serving.manifests.manifest_helpers import CATALOG, TARGETS, cluster_config


@pytest.mark.parametrize("path", sorted(TARGETS.glob("*.yaml")), ids=lambda p: p.name)
def test_checked_in_targets_load(path):
    target = load_cluster_target(path)
    assert target.name == path.stem
    assert target.ray_version == RAY_VERSION


def test_ray_version_matches_the_project_pin():
    pyproject = (TARGETS.parents[1] / "pyproject.toml").read_text()
    assert f'"ray[serve]=={RAY_VERSION}"' in pyproject


GPU_POOL = {"nvidia.com/gpu.product": "NVIDIA-H200"}
CPU_POOL = {"serveout.io/pool": "cpu"}


def _target(**changes) -> dict:
    data = {"name": "t", "namespace": "ns", "image": "img:1", "accelerator": "h200", "worker_nodes": 1,
            "worker": {"cpus": 8, "memory_gib": 64, "accelerators": 8, "node_selector": GPU_POOL},
            "head": {"cpus": 2, "memory_gib": 8, "node_selector": CPU_POOL}, "weights": {"claim_name": "w"}}
    data.update(changes)
    return data


def test_the_valid_base_target_loads():
    assert ClusterTarget.model_validate(_target()).head.node_selector == CPU_POOL


@pytest.mark.parametrize("changes, message", [
    ({"accelerator": "cpu"}, "accelerators: 0"),
    ({"worker": {"cpus": 8, "memory_gib": 64}}, "accelerators >= 1"),
    ({"weights": {"claim_name": "w", "mount_path": "models"}}, "absolute"),
    ({"namespace": "Not_DNS"}, "namespace"),
    ({"ray_version": "2.9.0"}, "ray_version"),
    ({"bogus": 1}, "bogus"),
    ({"image": "two words"}, "image reference"),
    ({"worker": {"cpus": 8, "memory_gib": 64, "accelerators": 8}}, "worker.node_selector"),
    ({"head": {"cpus": 2, "memory_gib": 8}}, "head.node_selector naming a CPU node pool"),
    ({"head": {"cpus": 2, "memory_gib": 8, "node_selector": GPU_POOL}}, "head.node_selector"),
    ({"keda": {"scale_target": {"api_version": "ray.io/v1", "kind": "RayService", "name": "x"}}},
     "keda section was removed"),
])
def test_invalid_targets_are_refused(changes, message):
    with pytest.raises(ValidationError, match=message):
        ClusterTarget.model_validate(_target(**changes))


def test_unreadable_target_file_names_the_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: [")
    with pytest.raises(ConfigError, match="t.yaml"):
        load_cluster_target(path)


@pytest.mark.parametrize("model, per_node, cpus, memory, gpus", [
    ("llama-3.3-70b-instruct", 2, 88, 800, 4),
    ("llama-3.1-8b-instruct", 8, 22, 200, 1),
])
def test_gpu_pods_split_a_node(model, per_node, cpus, memory, gpus, h200):
    plan = plan_workers(cluster_config(CATALOG.get(model), h200), h200)
    assert (plan.pods_per_node, plan.cpus, plan.memory_gib, plan.gpus) == (per_node, cpus, memory, gpus)
    assert plan.gpu_resource == "nvidia.com/gpu"


def test_cpu_pods_hold_their_cores(kind):
    spec = CATALOG.get("tiny-llama-tp2-test")
    plan = plan_workers(cluster_config(spec, kind, replicas={"cpus_per_rank": 2}), kind)
    assert (plan.cpus, plan.gpus, plan.gpu_resource, plan.pods_per_node) == (4, 0, None, 1)


def test_resource_names_are_dns_labels(config):
    name = resource_name(config)
    assert name == name.lower() and "." not in name and name[0].isalpha()


def test_overlong_names_are_refused(kind):
    config = cluster_config(CATALOG.get("smollm2-135m-instruct"), kind, app_name="a" * 40)
    with pytest.raises(ConfigError, match="shorter app_name"):
        resource_name(config)


def test_every_spec_has_a_target_of_its_kind(spec, target):
    assert target.accelerator is spec.accelerator
    assert (spec.accelerator is AcceleratorKind.CPU) == (target.worker.accelerators == 0)


def test_a_cpu_target_may_leave_the_head_anywhere():
    cpu = _target(accelerator="cpu", worker={"cpus": 8, "memory_gib": 64},
                  head={"cpus": 2, "memory_gib": 8})
    assert ClusterTarget.model_validate(cpu).head.node_selector == {}


def test_gpu_targets_put_the_head_on_a_cpu_pool_apart_from_the_workers(h200):
    """The checked-in 3 x 8 H200 target: workers on the GPU pool, the head on a fourth, CPU node."""
    assert h200.worker.node_selector and h200.head.node_selector
    assert not h200.head.node_selector.items() <= h200.worker.node_selector.items()
    assert not h200.head.tolerations, "the head must not tolerate the GPU nodes' taint"
