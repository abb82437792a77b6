"""What the manifests assume of the app builder (imports transformers: a few seconds)."""

from __future__ import annotations

import importlib

from serving.manifests.naming import ENGINE_DEPLOYMENT, GATEWAY_DEPLOYMENT, drained_deployment, engine_deployment_label
from serving.manifests.serve_config import IMPORT_PATH
from tests.unit.serving.manifests.manifest_helpers import CATALOG, cluster_config


def test_import_path_is_the_declarative_entry_point():
    module, attr = IMPORT_PATH.split(":")
    app_builder = importlib.import_module(module)
    assert getattr(app_builder, attr) is app_builder.app_from_args
    assert ENGINE_DEPLOYMENT == app_builder.ENGINE_DEPLOYMENT
    assert GATEWAY_DEPLOYMENT == app_builder.GATEWAY_DEPLOYMENT


def test_the_prestop_drains_the_deployment_whose_class_drains(kind):
    """The pods' preStop calls `drain(timeout_s)` on the replicas of drained_deployment:
    in each mode that is the app's ingress (the gateway), whose class has it."""
    import inspect

    from serving.app_builder import build_app

    for mode in ("direct", "separate"):
        config = cluster_config(CATALOG.get("smollm2-135m-instruct"), kind, gateway={"mode": mode})
        ingress = build_app(config)._bound_deployment
        assert ingress.name == drained_deployment(config), mode
        assert "timeout_s" in inspect.signature(ingress.func_or_class.drain).parameters, mode


def test_deployment_label_is_the_one_the_router_gets(kind):
    from serving.app_builder import engine_deployment_options

    config = cluster_config(CATALOG.get("smollm2-135m-instruct"), kind)
    router = engine_deployment_options(config)["request_router_config"]
    assert router.request_router_kwargs["deployment_label"] == engine_deployment_label(config)


def test_serve_config_states_the_engine_options_the_app_builder_sets(h200):
    """The rendered ``deployments:`` override equals what the app builder would set itself."""
    from ray.serve.config import AutoscalingConfig

    from serving.app_builder import engine_deployment_options
    from serving.autoscaling.queue_depth import QueueDepthPolicy
    from serving.manifests.serve_config import engine_replica_options

    spec = CATALOG.get("llama-3.3-70b-instruct")
    for min_replicas in (0, 2):
        config = cluster_config(spec, h200, autoscaling={
            "enabled": True, "min_replicas": min_replicas, "max_replicas": 6,
            "target_queue_per_replica": 96, "downscale_delay_s": 600})
        rendered = AutoscalingConfig(**engine_replica_options(config)["autoscaling_config"])
        assert rendered == engine_deployment_options(config)["autoscaling_config"]
        assert rendered.policy.get_policy() is QueueDepthPolicy
    fixed = cluster_config(spec, h200, replicas={"num_replicas": 3})
    assert engine_replica_options(fixed) == {
        "name": ENGINE_DEPLOYMENT, "num_replicas": engine_deployment_options(fixed)["num_replicas"]}


def test_the_gateway_deployment_asks_for_what_only_the_gateway_pods_offer(h200, tmp_path):
    """The app builder's gateway options for the config `serving render` builds, against the
    rendered RayCluster as Ray's KubeRay autoscaler reads it: every gateway replica fits a
    gateway pod, and no other pod has what it asks for."""
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    from serving.app_builder import gateway_deployment_options
    from serving.manifests.command import cluster_stack_config
    from serving.manifests.rayservice import render_rayservice

    stack = tmp_path / "stack.yaml"
    stack.write_text("gateway: {mode: separate}\n")
    config = cluster_stack_config("llama-3.3-70b-instruct", stack, h200, CATALOG)
    actor = gateway_deployment_options(config)["ray_actor_options"]
    asks = {"CPU": actor["num_cpus"], **actor["resources"]}
    assert actor["resources"], "a target with gateway pods pins the gateway replicas"
    rs = render_rayservice(config, h200)
    node_types = _derive_autoscaling_config_from_ray_cr(
        {"metadata": rs["metadata"], "spec": rs["spec"]["rayClusterConfig"]})["available_node_types"]
    fits = [name for name, t in node_types.items()
            if all(t["resources"].get(k, 0) >= v for k, v in asks.items())]
    assert fits == ["gateways"]
