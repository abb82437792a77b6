"""The files of a rendered deployment, and the one function that writes them.

Layout of an output folder::

    rayservice.yaml                 KubeRay RayService (+ the gateway Service)
    gcs-store.yaml                  the Redis keeping the GCS across a head restart (unless gcs_store: null)
    network-policy.yaml             who may reach the Ray pods (serve + metrics ports: anyone)
    weights-job.yaml                Job preparing the weights on the volume (run once)
    serve-config.yaml               Serve config for bare VMs (`serve deploy`) ...
    ray-env.sh                      ... and the Serve settings every VM's `ray start` needs
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
from serving.manifests.gcs_store import PASSWORD_KEY as GCS_PASSWORD_KEY, render_gcs_store
from serving.manifests.grafana import render_grafana_dashboard
from serving.manifests.naming import GATEWAY_RESOURCE, gateway_service_name
from serving.manifests.network_policy import render_network_policy
from serving.manifests.prometheus import RULES_FILE, render_prometheus
from serving.manifests.ray_env import env_script
from serving.manifests.rayservice import render_rayservice
from serving.manifests.serve_config import render_serve_config
from serving.manifests.sizing import (
    HAPROXY_CPU_US_PER_REQUEST,
    HAPROXY_CPU_US_PER_TOKEN,
    REPLICA_CPU_US_PER_TOKEN,
    ROUTER_CPU_US_PER_REQUEST,
    SPARE_ROUTERS,
    FrontEndSizing,
    head_takes_clients,
    plan_front_end,
    plan_gateways,
    sized_gateway_replicas,
)
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
    if target.gateways and config.gateway.direct:
        note += ("# The target's gateway pods (gateways:) are for gateway.mode separate: this stack runs the "
                 "direct mode (the gateway in every engine replica), so none are rendered.\n")
    if not config.gateway.direct and (peak := sized_gateway_replicas(target)):
        note += (f"# Gateways: the sizing rule gives ceil({target.traffic.peak_output_tokens_per_s:g} / (0.7 x "
                 f"{target.gateways.tokens_per_core:g})) + 1 = {peak} for the target's peak output tokens/s; "
                 f"the stack runs {config.gateway.max_replica_count}.\n")
    return note + _front_end_note(config, target, plan_front_end(config, target)) + _driver_note(target)


def _front_end_note(config: StackConfig, target: ClusterTarget, front: FrontEndSizing) -> str:
    """Who takes client traffic, and how HAProxy and the routers were sized (comment lines)."""
    entry = "the engine pods" if config.gateway.direct else "every worker pod"
    if head_takes_clients(config, target):
        entry += " and the head (the engines may scale to zero)"
    note = (f"# Front end: clients enter through Serve's HAProxy on {entry} (Service "
            f"{gateway_service_name(config)}; deploy/README.md, \"The front end\").\n")
    if front.peak_tokens_per_s is None:
        return note + ("# HAProxy threads and routers per node are not sized: the target states no "
                       "traffic.peak_output_tokens_per_s.\n")
    peak, requests = front.peak_tokens_per_s, front.peak_requests_per_s
    note += (f"# Sized for a peak of {peak:g} tok/s = {requests:g} req/s at "
             f"{target.traffic.output_tokens_per_request:g} tokens each, on any one pod: HAProxy "
             f"ceil(({peak:g} x {HAPROXY_CPU_US_PER_TOKEN:g} + {requests:g} x {HAPROXY_CPU_US_PER_REQUEST:g}) "
             f"us / 0.7) = {front.haproxy_threads} threads")
    if config.gateway.direct:
        note += (f"; routers ceil({requests:g} x {ROUTER_CPU_US_PER_REQUEST:g} us / 0.7) + {SPARE_ROUTERS} "
                 f"= {front.routers_per_node} per node")
    note += " (CPU costs: serving.manifests.sizing).\n"
    if front.replica_tokens_per_s is not None:
        share = front.replica_core_share
        note += (f"# Each engine replica streams {front.replica_tokens_per_s:g} tok/s itself at the peak "
                 f"({config.max_replica_count} replicas): {share:.0%} of one core at "
                 f"{REPLICA_CPU_US_PER_TOKEN:g} us/token")
        note += (": above 70 %, raise engine.stream_interval or run more replicas.\n" if share > 0.7 else ".\n")
    return note


def _driver_note(target: ClusterTarget) -> str:
    if not target.on_gpus:
        return ""
    return (f"# GPU nodes need NVIDIA driver >= {MIN_NVIDIA_DRIVER} (R580+): vLLM's wheels are "
            "CUDA 13 builds (deploy/README.md).\n")


def _env_header(config: StackConfig, target: ClusterTarget) -> str:
    return (_header(config, target)
            + "# Serve settings every Ray process reads at start (serving.manifests.ray_env): on bare VMs,\n"
            + "# RAY_ENV=ray-env.sh deploy/bare-metal/launch.sh head|worker sources it before `ray start`.\n")


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
    if target.gcs_store is not None:
        note += f", {target.gcs_store.password_secret} (key {GCS_PASSWORD_KEY}: the GCS store's Redis password)"
    return note + ".\n"


def render_files(config: StackConfig, target: ClusterTarget) -> dict[str, str]:
    """Every output file as ``{relative path: text}`` (pure; what :func:`write_manifests` writes)."""
    head = _header(config, target)
    prometheus = render_prometheus(config, target)
    files = {
        "rayservice.yaml": head + _nodes_note(config, target) + _secrets_note(config, target)
        + to_yaml(render_rayservice(config, target)),
        "network-policy.yaml": head + to_yaml(render_network_policy(config, target)),
        "weights-job.yaml": head + to_yaml(render_weights_job(config, target)),
        "serve-config.yaml": head + _driver_note(target) + _bare_metal_note(config)
        + to_yaml(render_serve_config(config)),
        "ray-env.sh": _env_header(config, target) + env_script(config, plan_front_end(config, target),
                                                                target.worker.cpus),
        "prometheus/prometheus.yml": head + to_yaml(prometheus["scrape_config"]),
        f"prometheus/{RULES_FILE}": head + to_yaml(prometheus["rules"]),
        "prometheus/operator.yaml": head + to_yaml_documents(prometheus["operator_resources"]),
        "grafana/serveout-dashboard.json":
            json.dumps(render_grafana_dashboard(config), indent=2) + "\n",
    }
    if target.gcs_store is not None:
        files["gcs-store.yaml"] = head + to_yaml_documents(render_gcs_store(config, target))
    return files


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
