"""The RayService of every model spec: KubeRay's required fields, resources sized from
the config, and the Serve config carrying the StackConfig unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from serving.config.model_spec import AcceleratorKind
from serving.config.stack import StackConfig
from serving.errors import ConfigError
from serving.manifests import render_files, render_rayservice
from serving.manifests.naming import ENGINE_DEPLOYMENT, METRICS_PORT
from serving.manifests.serve_config import IMPORT_PATH
from tests.unit.serving.manifests.manifest_helpers import CATALOG, cluster_config

GPU = "nvidia.com/gpu"


def _walk(node) -> Iterator[tuple[object, object]]:
    """Every (key, value) pair of a nested dict/list structure."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _containers(template: dict) -> list[dict]:
    return template["spec"]["containers"]


def _serve_config(rayservice: dict) -> dict:
    text = rayservice["spec"]["serveConfigV2"]
    assert isinstance(text, str), "KubeRay's CRD declares serveConfigV2 a YAML string"
    return yaml.safe_load(text)


def test_required_kuberay_fields(config, target):
    rs = render_rayservice(config, target)
    assert (rs["apiVersion"], rs["kind"]) == ("ray.io/v1", "RayService")
    assert rs["metadata"]["namespace"] == target.namespace
    assert len(rs["metadata"]["name"]) <= 40
    cluster = rs["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == "2.60.0"
    head = cluster["headGroupSpec"]
    # json tags without omitempty in ray-operator/apis/ray/v1 (HeadGroupSpec, WorkerGroupSpec)
    assert {"rayStartParams", "template"} <= head.keys()
    (group,) = cluster["workerGroupSpecs"]
    assert {"groupName", "minReplicas", "maxReplicas", "rayStartParams", "template"} <= group.keys()
    for template in (head["template"], group["template"]):
        for container in _containers(template):
            assert container["name"] and container["image"] == target.image
            names = [p["name"] for p in container["ports"]]
            assert len(names) == len(set(names))
            assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]
            assert container["resources"]["requests"] == container["resources"]["limits"]
            for mount in container["volumeMounts"]:
                assert mount["name"] in {v["name"] for v in template["spec"]["volumes"]}


def test_ports_serve_and_metrics(config, target):
    rs = render_rayservice(config, target)
    cluster = rs["spec"]["rayClusterConfig"]
    for template in (cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]):
        ports = {p["name"]: p["containerPort"] for p in _containers(template)[0]["ports"]}
        assert ports["serve"] == config.gateway.port
        assert ports["metrics"] == METRICS_PORT
    (service_port,) = rs["spec"]["serveService"]["spec"]["ports"]
    assert service_port == {"name": "serve", "port": config.gateway.port,
                            "targetPort": config.gateway.port, "protocol": "TCP"}


def test_accelerators_are_tp_times_replicas(config, target):
    rs = render_rayservice(config, target)
    group = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    worker = _containers(group["template"])[0]["resources"]["limits"]
    tp = config.model.tensor_parallel_size
    assert group["maxReplicas"] == config.max_replica_count
    if config.model.accelerator is AcceleratorKind.CPU:
        assert GPU not in worker
        assert int(worker["cpu"]) == config.replicas.cpus_per_rank * tp  # one replica per pod
    else:
        assert int(worker[GPU]) == tp  # one replica per pod ...
        assert int(worker[GPU]) * group["maxReplicas"] == tp * config.max_replica_count  # ... no spare GPU
    if config.autoscaling.enabled:
        assert (group["minReplicas"], group["maxReplicas"]) == (
            config.autoscaling.min_replicas, config.autoscaling.max_replicas)
    else:
        assert group["minReplicas"] == group["replicas"] == group["maxReplicas"] == config.replicas.num_replicas


def test_gpu_resources_only_for_gpu_specs(config, target):
    rs = render_rayservice(config, target)
    gpu_keys = [value for key, value in _walk(rs) if key == GPU]
    head = rs["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert not [value for key, value in _walk(head) if key == GPU], "the head never holds a GPU"
    if config.model.accelerator is AcceleratorKind.CPU:
        assert gpu_keys == []
    else:
        assert gpu_keys and all(v == str(config.model.tensor_parallel_size) for v in gpu_keys)


def test_serve_config_args_round_trip(config, target):
    serve = _serve_config(render_rayservice(config, target))
    (app,) = serve["applications"]
    assert app["import_path"] == IMPORT_PATH == "serving.app_builder:app_from_args"
    assert app["route_prefix"] == "/"
    assert StackConfig.model_validate(app["args"]) == config


def test_serve_config_validates_with_rays_schema(config, target):
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(_serve_config(render_rayservice(config, target)))
    assert schema.http_options.port == config.gateway.port
    assert [a.import_path for a in schema.applications] == [IMPORT_PATH]
    (engine,) = schema.applications[0].deployments
    assert engine.name == ENGINE_DEPLOYMENT


def _engine_options(rayservice: dict) -> dict:
    (app,) = _serve_config(rayservice)["applications"]
    (engine,) = [d for d in app["deployments"] if d["name"] == ENGINE_DEPLOYMENT]
    return engine


def test_autoscaling_turns_on_kuberays_autoscaler(spec, target):
    fixed = render_rayservice(cluster_config(spec, target), target)
    scaled = render_rayservice(cluster_config(spec, target, autoscaling={
        "enabled": True, "min_replicas": 0, "max_replicas": 2}), target)
    assert fixed["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] is False
    assert scaled["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] is True
    group = scaled["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (0, 1, 2)


def test_queue_depth_scaling_is_declared_where_serve_and_kuberay_act(h200):
    """Serve scales the engine deployment with serveout's policy; KubeRay's bounds match it."""
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200, autoscaling={
        "enabled": True, "min_replicas": 2, "max_replicas": 6, "target_queue_per_replica": 96})
    rs = render_rayservice(config, h200)
    scaling = _engine_options(rs)["autoscaling_config"]
    assert scaling["policy"] == {"policy_function": "serving.autoscaling.QueueDepthPolicy",
                                 "policy_kwargs": {"target_queue_per_replica": 96}}
    assert scaling["target_ongoing_requests"] == 96
    cluster = rs["spec"]["rayClusterConfig"]
    (group,) = cluster["workerGroupSpecs"]
    assert cluster["enableInTreeAutoscaling"] is True
    # one engine pod per replica: KubeRay's pod bounds are Serve's replica bounds
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (
        scaling["min_replicas"], scaling["initial_replicas"], scaling["max_replicas"]) == (2, 2, 6)


def test_a_fixed_count_is_stated_for_serve_and_kuberay_alike(config, target):
    rs = render_rayservice(config, target)
    engine = _engine_options(rs)
    (group,) = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    if config.autoscaling.enabled:
        assert "num_replicas" not in engine
        assert engine["autoscaling_config"]["max_replicas"] == group["maxReplicas"]
    else:
        assert "autoscaling_config" not in engine
        assert engine["num_replicas"] == group["replicas"] == config.replicas.num_replicas


SCALABLE_KINDS = {"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"}
"""Built-in kinds with a ``/scale`` subresource; KubeRay's CRDs (ray.io/v1) declare none."""


def _scale_targets_without_scale(documents: list[dict]) -> list[str]:
    """Objects (KEDA ScaledObject, HPA) that point at a kind nothing can scale."""
    return [f"{doc['kind']} -> {ref['kind']}" for doc in documents
            for key, ref in _walk(doc) if key == "scaleTargetRef" and ref["kind"] not in SCALABLE_KINDS]


def test_nothing_rendered_scales_an_object_without_a_scale_subresource(config, target):
    documents = [doc for name, text in render_files(config, target).items() if name.endswith((".yaml", ".yml"))
                 for doc in yaml.safe_load_all(text)]
    assert documents and _scale_targets_without_scale(documents) == []


def test_a_scaledobject_on_a_rayservice_is_detected():
    """The check above can fail: the ScaledObject this renderer used to write for a RayService."""
    scaled = {"kind": "ScaledObject", "spec": {"scaleTargetRef": {
        "apiVersion": "ray.io/v1", "kind": "RayService", "name": "serveout-x"}}}
    assert _scale_targets_without_scale([scaled]) == ["ScaledObject -> RayService"]


def test_gpu_head_runs_on_the_cpu_pool_and_engines_on_the_gpu_pool(h200):
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200, replicas={"num_replicas": 6})
    cluster = render_rayservice(config, h200)["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    assert head["nodeSelector"] == h200.head.node_selector
    assert worker["nodeSelector"] == h200.worker.node_selector
    assert head["nodeSelector"] != worker["nodeSelector"]
    assert "tolerations" not in head, "a head tolerating the GPU taint could take a GPU node's room"
    # six TP-4 pods fill 3 x 8 GPUs and the CPUs that go with them: no room for the head there
    limits = _containers(cluster["workerGroupSpecs"][0]["template"])[0]["resources"]["limits"]
    pods_per_node = h200.worker.accelerators // int(limits[GPU])
    assert pods_per_node * int(limits["cpu"]) + h200.head.cpus > h200.worker.cpus


def test_the_rendered_file_says_how_many_nodes_it_needs(h200, kind):
    gpu = render_files(cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200), h200)["rayservice.yaml"]
    assert "3 x h200 for engine pods (8 GPUs each) + 1 CPU node for the Ray head" in gpu
    assert "serveout.io/pool=cpu" in gpu
    cpu = render_files(cluster_config(CATALOG.get("smollm2-135m-instruct"), kind), kind)["rayservice.yaml"]
    assert "the Ray head on any node" in cpu


def test_gpu_pods_share_a_node_in_proportion(h200):
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200, replicas={"num_replicas": 6})
    group = render_rayservice(config, h200)["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    limits = _containers(group["template"])[0]["resources"]["limits"]
    assert limits == {"cpu": str(h200.worker.cpus // 2), "memory": f"{h200.worker.memory_gib // 2}Gi", GPU: "4"}
    assert group["template"]["spec"]["nodeSelector"] == h200.worker.node_selector
    assert group["template"]["spec"]["tolerations"][0]["key"] == GPU


def test_model_path_is_on_the_mounted_volume(config, target):
    rs = render_rayservice(config, target)
    worker = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]
    mount = next(m for m in _containers(worker)[0]["volumeMounts"] if m["name"] == "model-weights")
    assert mount["readOnly"] is True
    assert str(config.model_path).startswith(mount["mountPath"] + "/")
    claims = [v["persistentVolumeClaim"]["claimName"] for v in worker["spec"]["volumes"]
              if "persistentVolumeClaim" in v]
    assert claims == [target.weights.claim_name]


def test_upgrade_strategy_only_when_the_target_sets_it(h200, kind):
    gpu = render_rayservice(cluster_config(CATALOG.get("llama-3.1-8b-instruct"), h200), h200)
    cpu = render_rayservice(cluster_config(CATALOG.get("smollm2-135m-instruct"), kind), kind)
    assert gpu["spec"]["upgradeStrategy"] == {"type": "None"}
    assert "upgradeStrategy" not in cpu["spec"]


@pytest.mark.parametrize("model, target_name, overrides, message", [
    ("llama-3.3-70b-instruct", "kind", {}, "runs on h200"),
    ("smollm2-135m-instruct", "h200", {}, "runs on cpu"),
    ("llama-3.3-70b-instruct", "h200", {"replicas": {"num_replicas": 7}}, "fits 2 per node x 3 nodes = 6"),
    ("llama-3.1-8b-instruct", "h200", {"autoscaling": {"enabled": True, "max_replicas": 25}}, "= 24"),
    ("smollm2-135m-instruct", "kind", {"replicas": {"num_replicas": 1, "cpus_per_rank": None}},
     "cpus_per_rank"),
    ("smollm2-135m-instruct", "kind", {"replicas": {"num_replicas": 1, "cpus_per_rank": 8}},
     "needs 8 cores"),
    ("smollm2-135m-instruct", "kind", {"gateway": {"host": "127.0.0.1"}}, "0.0.0.0"),
])
def test_configs_that_cannot_run_are_refused(model, target_name, overrides, message, h200, kind):
    target = {"h200": h200, "kind": kind}[target_name]
    config = cluster_config(CATALOG.get(model), target, **overrides)
    with pytest.raises(ConfigError, match=message):
        render_rayservice(config, target)


def test_tensor_parallel_wider_than_a_node_is_refused(h200):
    narrow = h200.model_copy(update={"worker": h200.worker.model_copy(update={"accelerators": 2})})
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), narrow)
    with pytest.raises(ConfigError, match="needs 4 GPUs on one node"):
        render_rayservice(config, narrow)
