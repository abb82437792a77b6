"""Cluster manifests rendered from the same :class:`~serving.config.stack.StackConfig`
the local stack runs: a KubeRay RayService, a NetworkPolicy, a Serve config for bare
VMs, Prometheus scrape configs and alerts, a Grafana dashboard and a Job that
prepares the weights. Ray runs with token authentication; the gateway's API keys
and Ray's token come from Secrets the operator creates (never rendered).
Scaling is Ray's own (Serve's autoscaler + KubeRay's in-tree autoscaler): no KEDA
or HPA object, since RayService has no ``/scale`` subresource.

Every ``render_*`` function is pure (plain dicts out, nothing touched);
:func:`write_manifests` is the one function that writes files. Nothing here was
applied to a Kubernetes cluster from the project's machines (no Kubernetes, no
GPU): see ``deploy/README.md`` for what is checked and what is not.
"""

from serving.manifests.command import add_render_command
from serving.manifests.grafana import render_grafana_dashboard
from serving.manifests.network_policy import render_network_policy
from serving.manifests.prometheus import render_prometheus
from serving.manifests.rayservice import render_rayservice
from serving.manifests.serve_config import render_serve_config
from serving.manifests.target import ClusterTarget
from serving.manifests.weights_job import render_weights_job
from serving.manifests.writer import render_files, write_manifests

__all__ = [
    "ClusterTarget",
    "add_render_command",
    "render_files",
    "render_grafana_dashboard",
    "render_network_policy",
    "render_prometheus",
    "render_rayservice",
    "render_serve_config",
    "render_weights_job",
    "write_manifests",
]
