"""The files of a rendered deployment, and the one function that writes them.

Layout of an output folder::

    rayservice.yaml                 KubeRay RayService (+ the gateway Service)
    network-policy.yaml             who may reach the Ray pods (serve + metrics ports: anyone)
    weights-job.yaml                Job preparing the weights on the volume (run once)
    serve-config.yaml               Serve config for bare VMs (`serve deploy`)
    prometheus/prometheus.yml       plain Prometheus scrape config ...
    prometheus/serveout-rules.yml   ... and its alerting rules
    prometheus/operator.yaml        PodMonitors + PrometheusRule (prometheus-operator)
    grafana/serveout-dashboard.json Grafana dashboard
"""

from __future__ import annotations

import json
from pathlib import Path

from serving.config.stack import StackConfig
from serving.manifests.access import KEYS_FILE_KEY, METRICS_KEY, RAY_TOKEN_KEY, keys_secret
from serving.manifests.grafana import render_grafana_dashboard
from serving.manifests.naming import GATEWAY_RESOURCE
from serving.manifests.network_policy import render_network_policy
from serving.manifests.prometheus import RULES_FILE, render_prometheus
from serving.manifests.rayservice import render_rayservice
from serving.manifests.serve_config import render_serve_config
from serving.manifests.sizing import plan_gateways, sized_gateway_replicas
from serving.manifests.target import GPU_PRESENT_LABEL, ClusterTarget
from serving.manifests.weights_job import render_weights_job
from serving.manifests.yaml_text import to_yaml, to_yaml_documents


MIN_NVIDIA_DRIVER = "580.65.06"
"""CUDA 13.0's minimum Linux driver (NVIDIA's CUDA 13.0 release notes): vLLM 0.32.0's wheels
are CUDA 13 builds (requirements/gpu.lock, deploy/README.md)."""


def _header(config: StackConfig, target: ClusterTarget) -> str:
    return (
        f"# Rendered by serving.manifests: model {config.model.name} on target {target.name}.\n"
        "# Do not edit; change the stack or target file and render again (deploy/README.md).\n"
    )


def _nodes_note(config: StackConfig, target: ClusterTarget) -> str:
    """What the RayService needs from the cluster, node by node (comment lines)."""
    note = f"# Nodes: {target.worker_nodes} x {target.accelerator.value} for engine pods"
    head = _placement_text(target, target.head.node_selector)
    if target.on_gpus:
        note += f" ({target.worker.accelerators} GPUs each) + CPU node(s) for the Ray head ({head})"
    else:
        note += f", the Ray head on {head}"
    if plan := plan_gateways(config, target):
        pods = f"{plan.min_pods}-{plan.max_pods}" if plan.autoscaling else str(plan.max_pods)
        note += (f" + {pods} gateway pods of {plan.cpus} CPUs ("
                 + _placement_text(target, target.gateways.node_selector) + ")")
    note += ".\n"
    if peak := sized_gateway_replicas(target.gateways):
        rule = target.gateways
        note += (f"# Gateways: the sizing rule gives ceil({rule.peak_output_tokens_per_s:g} / (0.7 x "
                 f"{rule.tokens_per_core:g})) + 1 = {peak} for the target's peak output tokens/s; "
                 f"the stack runs {config.gateway.max_replica_count}.\n")
    return note + _driver_note(target)


def _driver_note(target: ClusterTarget) -> str:
    if not target.on_gpus:
        return ""
    return (f"# GPU nodes need NVIDIA driver >= {MIN_NVIDIA_DRIVER} (R580+): vLLM's wheels are "
            "CUDA 13 builds (deploy/README.md).\n")


def _bare_metal_note(config: StackConfig) -> str:
    """Which VMs can host the gateway replicas, when they ask for a resource of their own."""
    if config.gateway.direct or not config.gateway.ray_resources:
        return ""
    wanted = ", ".join(f"{k}: {v:g}" for k, v in config.gateway.ray_resources.items())
    return (f"# Each gateway replica asks Ray for {{{wanted}}}: only VMs that offer it host gateways\n"
            f"# (launch.sh: GATEWAYS=N offers {GATEWAY_RESOURCE}: N; deploy/README.md, section 7).\n")


def _placement_text(target: ClusterTarget, selector: dict[str, str]) -> str:
    if selector:
        return "nodeSelector " + ", ".join(f"{k}={v}" for k, v in selector.items())
    if target.on_gpus:
        return f"node affinity: {GPU_PRESENT_LABEL} not true"
    return "any node"


def _secrets_note(config: StackConfig, target: ClusterTarget) -> str:
    """The Secrets to create before applying (comment lines; never rendered themselves)."""
    note = (f"# Secrets to create first (deploy/README.md): {target.ray_token_secret} "
            f"(key {RAY_TOKEN_KEY}: Ray's token)")
    if secret := keys_secret(config, target):
        note += f", {secret} (key {KEYS_FILE_KEY}: the API keys file"
        note += ")" if config.gateway.metrics_public else f"; key {METRICS_KEY}: Prometheus' key)"
    return note + ".\n"


def render_files(config: StackConfig, target: ClusterTarget) -> dict[str, str]:
    """Every output file as ``{relative path: text}`` (pure; what :func:`write_manifests` writes)."""
    head = _header(config, target)
    prometheus = render_prometheus(config, target)
    return {
        "rayservice.yaml": head + _nodes_note(config, target) + _secrets_note(config, target)
        + to_yaml(render_rayservice(config, target)),
        "network-policy.yaml": head + to_yaml(render_network_policy(config, target)),
        "weights-job.yaml": head + to_yaml(render_weights_job(config, target)),
        "serve-config.yaml": head + _driver_note(target) + _bare_metal_note(config)
        + to_yaml(render_serve_config(config)),
        "prometheus/prometheus.yml": head + to_yaml(prometheus["scrape_config"]),
        f"prometheus/{RULES_FILE}": head + to_yaml(prometheus["rules"]),
        "prometheus/operator.yaml": head + to_yaml_documents(prometheus["operator_resources"]),
        "grafana/serveout-dashboard.json":
            json.dumps(render_grafana_dashboard(config), indent=2) + "\n",
    }


def write_manifests(config: StackConfig, target: ClusterTarget, out_dir: Path) -> list[Path]:
    """Render everything for ``config`` on ``target`` into ``out_dir``; returns the files written.

    Rendering happens first, so an invalid combination writes nothing.
    """
    files = render_files(config, target)
    written = []
    for relative, text in files.items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
