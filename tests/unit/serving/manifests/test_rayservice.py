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
from serving.manifests.naming import ENGINE_DEPLOYMENT, GATEWAY_RESOURCE, METRICS_PORT
from serving.manifests.serve_config import IMPORT_PATH
from serving.manifests.yaml_text import to_yaml
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


def _engines(rayservice: dict) -> dict:
    """The engine worker group (the gateway group, if any, comes after it)."""
    group = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert group["groupName"] == "engines"
    return group


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
    groups = cluster["workerGroupSpecs"]
    gateway_pods = bool(target.gateways) and not config.gateway.direct
    assert [g["groupName"] for g in groups] == ["engines"] + (["gateways"] if gateway_pods else [])
    for group in groups:
        assert {"groupName", "minReplicas", "maxReplicas", "rayStartParams", "template"} <= group.keys()
    for template in [head["template"]] + [g["template"] for g in groups]:
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
    assert scaling["policy"] == {"policy_function": "serving.autoscaling.queue_depth.QueueDepthPolicy",
                                 "policy_kwargs": {"target_queue_per_replica": 96, "stabilize_downscale": True,
                                                   "downscale_margin": 0.8}}
    assert scaling["target_ongoing_requests"] == 96
    cluster = rs["spec"]["rayClusterConfig"]
    group = _engines(rs)
    assert cluster["enableInTreeAutoscaling"] is True
    # one engine pod per replica: KubeRay's pod bounds are Serve's replica bounds
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (
        scaling["min_replicas"], scaling["initial_replicas"], scaling["max_replicas"]) == (2, 2, 6)


def test_a_fixed_count_is_stated_for_serve_and_kuberay_alike(config, target):
    rs = render_rayservice(config, target)
    engine = _engine_options(rs)
    group = _engines(rs)
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
    assert "3 x h200 for engine pods (8 GPUs each) + CPU node(s) for the Ray head" in gpu
    assert "serveout.io/pool=cpu" in gpu and "driver >= 580.65.06" in gpu
    cpu = render_files(cluster_config(CATALOG.get("smollm2-135m-instruct"), kind), kind)["rayservice.yaml"]
    assert "the Ray head on any node" in cpu and "driver" not in cpu


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


def test_gateway_pods_sit_on_cpu_nodes_and_take_no_engine(h200, kind):
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200, gateway={"mode": "separate", "replicas": 5})
    groups = render_rayservice(config, h200)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    (gateways,) = [g for g in groups if g["groupName"] == "gateways"]
    assert gateways["replicas"] == gateways["minReplicas"] == gateways["maxReplicas"] == 5
    assert gateways["rayStartParams"]["num-cpus"] == "0", "a CPU engine must not land on a gateway pod"
    pod = gateways["template"]["spec"]
    assert pod["nodeSelector"] == h200.gateways.node_selector != h200.worker.node_selector
    assert "tolerations" not in pod
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"cpu": str(h200.gateways.cpus),
                                                "memory": f"{h200.gateways.memory_gib}Gi"}
    assert GPU not in container["resources"]["limits"]
    small = render_rayservice(cluster_config(CATALOG.get("smollm2-135m-instruct"), kind), kind)
    assert [g["groupName"] for g in small["spec"]["rayClusterConfig"]["workerGroupSpecs"]] == ["engines"]


def _groups(rayservice: dict) -> dict[str, dict]:
    cluster = rayservice["spec"]["rayClusterConfig"]
    return {"head": cluster["headGroupSpec"], **{g["groupName"]: g for g in cluster["workerGroupSpecs"]}}


def test_gateway_pods_offer_the_gateway_resource_in_kuberays_format(h200):
    """KubeRay hands rayStartParams to `ray start` through a shell: JSON in an escaped,
    double-quoted string (its documented form), one unit per pod (one replica per pod)."""
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200,
                            gateway={"mode": "separate", "replicas": 5, "ray_resources": {GATEWAY_RESOURCE: 1}})
    rs = render_rayservice(config, h200)
    groups = _groups(rs)
    assert groups["gateways"]["rayStartParams"]["resources"] == '"{\\"serveout_gateway\\": 1}"'
    assert """resources: '"{\\"serveout_gateway\\": 1}"'""" in to_yaml(rs)
    assert [name for name, g in groups.items() if "resources" in g["rayStartParams"]] == ["gateways"]
    fixed = groups["gateways"]
    assert fixed["replicas"] == fixed["minReplicas"] == fixed["maxReplicas"] == 5
    assert rs["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] is False


def test_rays_autoscaler_sees_the_gateway_resource_on_the_gateway_group_alone(h200):
    """The rendered RayCluster read by Ray 2.60's own KubeRay autoscaler config: only the
    gateway group offers the resource, with Serve's gateway bounds, so a pending gateway
    replica makes it add a gateway pod (and the in-tree autoscaler runs for it even with
    the engines fixed)."""
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200, gateway={
        "mode": "separate", "ray_resources": {GATEWAY_RESOURCE: 1},
        "autoscaling": {"enabled": True, "min_replicas": 2, "max_replicas": 9}})
    assert not config.autoscaling.enabled
    rs = render_rayservice(config, h200)
    cluster = rs["spec"]["rayClusterConfig"]
    node_types = _derive_autoscaling_config_from_ray_cr(
        {"metadata": rs["metadata"], "spec": cluster})["available_node_types"]
    assert [name for name, t in node_types.items() if GATEWAY_RESOURCE in t["resources"]] == ["gateways"]
    gateways = node_types["gateways"]
    assert gateways["resources"][GATEWAY_RESOURCE] == 1 and gateways["resources"]["CPU"] == 0
    assert (gateways["min_workers"], gateways["max_workers"]) == (2, 9)
    assert _groups(rs)["gateways"]["replicas"] == 2
    assert cluster["enableInTreeAutoscaling"] is True


def test_without_a_cpu_pool_label_the_head_keeps_off_gpu_nodes(h200):
    """A GPU target naming no pools: engines select GPU nodes, the head (and gateways) avoid them."""
    data = h200.model_dump(mode="json")
    for role in ("worker", "head", "gateways"):
        data[role]["node_selector"] = {}
    target = type(h200).model_validate(data)
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), target, gateway={"mode": "separate"})
    cluster = render_rayservice(config, target)["spec"]["rayClusterConfig"]
    groups = {g["groupName"]: g["template"]["spec"] for g in cluster["workerGroupSpecs"]}
    assert groups["engines"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    for pod in (cluster["headGroupSpec"]["template"]["spec"], groups["gateways"]):
        assert "nodeSelector" not in pod
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert term["matchExpressions"] == [
            {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]


def test_each_base_model_gets_its_own_engine_group_sized_for_it(h200):
    config = cluster_config(CATALOG.get("llama-3.3-70b-instruct"), h200, gateway={"mode": "separate"},
                            more_bases=[{"model": "llama-3.1-8b-instruct", "replicas": {"num_replicas": 3},
                                         "model_path": str(h200.weights.model_path("llama-3.1-8b-instruct"))}])
    groups = _groups(render_rayservice(config, h200))
    big, small = groups["engines"], groups["engines-llama-3-1-8b-instruct"]
    assert (big["replicas"], small["replicas"]) == (2, 3)
    gpus = [_containers(g["template"])[0]["resources"]["limits"][GPU] for g in (big, small)]
    assert gpus == [str(config.model.tensor_parallel_size), str(config.bases[1].model.tensor_parallel_size)]
    served = _serve_config(render_rayservice(config, h200))["applications"][0]["args"]
    assert [b["model"]["name"] for b in served["more_bases"]] == ["llama-3.1-8b-instruct"]
