"""Cluster targets and how a config is cut into worker pods."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serving.config.model_spec import AcceleratorKind
from serving.errors import ConfigError
from serving.manifests.command import load_cluster_target
from serving.manifests.naming import resource_name
from serving.manifests.sizing import gateway_replicas, plan_gateways, plan_workers
from serving.manifests.target import GPU_PRESENT_LABEL, RAY_VERSION, ClusterTarget
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
    ({"head": {"cpus": 2, "memory_gib": 8, "node_selector": GPU_POOL}},
     "head.node_selector selects the GPU workers' pool"),
    ({"gateways": {"node_selector": GPU_POOL}}, "gateways.node_selector selects the GPU workers' pool"),
    ({"gateways": {"peak_output_tokens_per_s": 0}}, "peak_output_tokens_per_s"),
    ({"traffic": {"peak_output_tokens_per_s": -5}}, "peak_output_tokens_per_s"),
    ({"traffic": {"output_tokens_per_request": 0}}, "output_tokens_per_request"),
    ({"gateways": {"tokens_per_core": -1}}, "tokens_per_core"),
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


def test_gpu_workers_default_to_the_gpu_present_label_and_the_head_avoids_it():
    """Without selectors: workers on nodes GPU feature discovery marks, head off them."""
    target = ClusterTarget.model_validate(_target(
        worker={"cpus": 8, "memory_gib": 64, "accelerators": 8}, head={"cpus": 2, "memory_gib": 8}))
    assert target.worker.node_selector == {GPU_PRESENT_LABEL: "true"}
    (term,) = target.cpu_node_affinity(target.head)["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": GPU_PRESENT_LABEL, "operator": "NotIn", "values": ["true"]}]}
    assert ClusterTarget.model_validate(_target()).cpu_node_affinity(
        ClusterTarget.model_validate(_target()).head) is None, "a named CPU pool needs no affinity"


def test_a_cpu_target_gets_neither_a_default_selector_nor_an_affinity():
    cpu = ClusterTarget.model_validate(_target(accelerator="cpu", worker={"cpus": 8, "memory_gib": 64},
                                               head={"cpus": 2, "memory_gib": 8}))
    assert cpu.worker.node_selector == {} and cpu.cpu_node_affinity(cpu.head) is None


@pytest.mark.parametrize("peak, per_core, replicas", [
    (36_000, 520, 100),   # docs/serving.md's example: 36000 / 364 = 98.9 -> 99, + 1 spare
    (364, 520, 2),        # exactly one front-end core at 70 %: no rounding up past it
    (365, 520, 3),        # a token/s more needs a second core
    (1, 520, 2),          # any traffic: one gateway + the spare
    (63, 90, 2),          # 63 / (0.7 x 90) = 1 exactly (in floats: 1.0000000000000002 -> 3)
])
def test_the_sizing_rule_counts_gateways(peak, per_core, replicas):
    assert gateway_replicas(peak, per_core) == replicas


@pytest.mark.parametrize("peak, per_core", [(0, 520), (100, 0), (-1, 520)])
def test_the_sizing_rule_refuses_nonsense(peak, per_core):
    with pytest.raises(ConfigError, match="positive"):
        gateway_replicas(peak, per_core)


def test_gateway_pods_hold_the_most_gateway_replicas_the_config_runs():
    target = ClusterTarget.model_validate(_target(gateways={"cpus": 3, "memory_gib": 6}))
    spec = CATALOG.get("llama-3.1-8b-instruct")
    fixed = plan_gateways(cluster_config(spec, target, gateway={"mode": "separate", "replicas": 4}), target)
    assert (fixed.min_pods, fixed.max_pods, fixed.cpus, fixed.memory_gib) == (4, 4, 3, 6)
    assert fixed.offers == {} and not fixed.autoscaling
    # Autoscaled replicas that ask for no resource never make KubeRay add a pod: room for the most.
    scaled = cluster_config(spec, target, gateway={"mode": "separate", "replicas": 4, "autoscaling": {
        "enabled": True, "min_replicas": 2, "max_replicas": 7}})
    assert (plan_gateways(scaled, target).min_pods, plan_gateways(scaled, target).max_pods) == (7, 7)
    assert plan_gateways(cluster_config(spec, target, gateway={"mode": "separate"}),
                         ClusterTarget.model_validate(_target())) is None


def test_gateway_pods_offer_what_a_replica_asks_for_and_follow_serves_bounds():
    """A replica reserving a resource only these pods offer makes KubeRay add a pod for it,
    so the group scales between Serve's bounds."""
    target = ClusterTarget.model_validate(_target(gateways={"cpus": 2}))
    spec = CATALOG.get("llama-3.1-8b-instruct")
    wants = {"serveout_gateway": 1.0, "fast_nic": 0.5}
    fixed = plan_gateways(cluster_config(spec, target, gateway={"mode": "separate", "replicas": 3,
                                                                "ray_resources": wants}), target)
    assert (fixed.min_pods, fixed.max_pods, fixed.offers) == (3, 3, wants)  # one replica per pod
    scaled = plan_gateways(cluster_config(spec, target, gateway={"mode": "separate", "ray_resources": wants,
                                                                 "autoscaling": {
        "enabled": True, "min_replicas": 2, "max_replicas": 7}}), target)
    assert (scaled.min_pods, scaled.max_pods, scaled.autoscaling) == (2, 7, True)


def test_the_direct_mode_gets_no_gateway_pods():
    """The gateway runs in every engine replica: the target's gateway pods would stay empty."""
    target = ClusterTarget.model_validate(_target(gateways={"cpus": 2}))
    config = cluster_config(CATALOG.get("llama-3.1-8b-instruct"), target, gateway={"mode": "direct"})
    assert plan_gateways(config, target) is None
