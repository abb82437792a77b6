"""An optional KEDA ``ScaledObject`` on engine queue depth, for scaling outside Ray.

Ray Serve's own autoscaler is the default and needs none of this: with
``autoscaling.enabled`` the engine deployment scales on the same queue depth
(:mod:`serving.autoscaling`) and KubeRay's in-tree autoscaler adds the pods.

KEDA drives a Kubernetes object through its ``/scale`` subresource. KubeRay's
RayService and RayCluster have none (checked against ``ray-operator/apis/ray/v1``),
so the target must name an object that does (``ClusterTarget.keda.scale_target``),
for example a fleet of single-replica RayServices behind a scalable wrapper. This
file only computes the signal: desired replicas =
``ceil(sum(serveout_queue_depth) / autoscaling.target_queue_per_replica)``, the
same rule as Serve's policy, bounded by ``autoscaling.min_replicas..max_replicas``.
"""

from __future__ import annotations

from serving.config.stack import StackConfig
from serving.errors import ConfigError
from serving.manifests.naming import common_labels, resource_name
from serving.manifests.promql import Selectors
from serving.manifests.target import ClusterTarget


def render_keda_scaledobject(config: StackConfig, target: ClusterTarget) -> dict:
    """The ScaledObject; :class:`ConfigError` without ``target.keda`` or when Serve autoscales."""
    keda = target.keda
    if keda is None:
        raise ConfigError(f"target {target.name} has no keda section (scale_target, prometheus_url)")
    scaling = config.autoscaling
    if scaling.enabled:
        raise ConfigError(
            "autoscaling.enabled makes Ray Serve scale the engines; set it to false (keeping "
            "min_replicas, max_replicas and target_queue_per_replica) to let KEDA scale instead"
        )
    ref = keda.scale_target
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": f"{resource_name(config)}-queue-depth",
            "namespace": target.namespace,
            "labels": common_labels(config),
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": keda.polling_interval_s,
            "cooldownPeriod": keda.cooldown_s,
            "triggers": [{
                "type": "prometheus",
                # AverageValue: KEDA divides the query result by the current replica
                # count and aims for `threshold` per replica.
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": keda.prometheus_url,
                    "query": f"sum(serveout_queue_depth{Selectors.of(config).engine()})",
                    "threshold": f"{scaling.target_queue_per_replica:g}",
                },
            }],
        },
    }
