"""GCS fault tolerance in the rendered manifests: the RayCluster names a Redis the
manifests start, on a volume of its own, reachable by this deployment's Ray pods only."""

from __future__ import annotations

from serving.manifests import render_network_policy, render_rayservice
from serving.manifests.gcs_store import PASSWORD_KEY, REDIS_PORT, render_gcs_store, store_name
from serving.manifests.writer import render_files
from tests.unit.serving.manifests.test_network_policy import EVERY_PORT, reachable_ports


def _store(config, target) -> dict[str, dict]:
    return {obj["kind"]: obj for obj in render_gcs_store(config, target)}


def test_the_raycluster_keeps_its_gcs_in_the_redis_the_manifests_start(config, target):
    options = render_rayservice(config, target)["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    store = _store(config, target)
    service, stateful_set = store["Service"], store["StatefulSet"]
    assert options["redisAddress"] == f"{service['metadata']['name']}:{REDIS_PORT}"
    secret = options["redisPassword"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": target.gcs_store.password_secret, "key": PASSWORD_KEY}
    pod = stateful_set["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    container = pod["spec"]["containers"][0]
    assert container["env"][0]["valueFrom"]["secretKeyRef"] == secret  # the same password both sides
    assert "--appendonly yes" in container["command"][-1] and '"$REDIS_PASSWORD"' in container["command"][-1]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    claim = stateful_set["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data" and stateful_set["spec"]["replicas"] == 1
    assert claim["spec"]["resources"]["requests"]["storage"] == f"{target.gcs_store.storage_gib}Gi"


def test_only_this_deployments_ray_pods_reach_the_store(config, target):
    store = _store(config, target)
    policy = store["NetworkPolicy"]
    store_pod = store["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    cluster = render_rayservice(config, target)["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["metadata"]["labels"]
    worker = cluster["workerGroupSpecs"][0]["template"]["metadata"]["labels"]
    for ray_pod in (head, worker):
        assert reachable_ports(policy, store_pod, namespace=target.namespace, labels=ray_pod) == {REDIS_PORT}
    assert reachable_ports(policy, store_pod, namespace=target.namespace, labels={"app": "client"}) == set()
    # The Ray pods' own policy does not select the store (it would open it to them on every port).
    assert reachable_ports(render_network_policy(config, target), store_pod, namespace="apps",
                           labels={"app": "client"}) == EVERY_PORT  # i.e. not selected by it


def test_without_a_store_nothing_is_rendered_and_the_secret_is_not_asked_for(config, target):
    files = render_files(config, target)
    assert store_name(config) in files["gcs-store.yaml"] and target.gcs_store.password_secret in files[
        "rayservice.yaml"].split("apiVersion")[0]
    bare = target.model_copy(update={"gcs_store": None})
    files = render_files(config, bare)
    assert "gcs-store.yaml" not in files
    assert "gcsFaultToleranceOptions" not in files["rayservice.yaml"]
    assert target.gcs_store.password_secret not in files["rayservice.yaml"]
