"""The files of a rendered deployment, and the one function that writes them.

Layout of an output folder::

    rayservice.yaml                 KubeRay RayService (+ the gateway Service)
    weights-job.yaml                Job preparing the weights on the volume (run once)
    serve-config.yaml               Serve config for bare VMs (`serve deploy`)
    prometheus/prometheus.yml       plain Prometheus scrape config ...
    prometheus/serveout-rules.yml   ... and its alerting rules
    prometheus/operator.yaml        PodMonitors + PrometheusRule (prometheus-operator)
    grafana/serveout-dashboard.json Grafana dashboard
    keda/scaledobject.yaml          only when the target has a keda section
"""

from __future__ import annotations

import json
from pathlib import Path

from serving.config.stack import StackConfig
from serving.manifests.grafana import render_grafana_dashboard
from serving.manifests.keda import render_keda_scaledobject
from serving.manifests.prometheus import RULES_FILE, render_prometheus
from serving.manifests.rayservice import render_rayservice
from serving.manifests.serve_config import render_serve_config
from serving.manifests.target import ClusterTarget
from serving.manifests.weights_job import render_weights_job
from serving.manifests.yaml_text import to_yaml, to_yaml_documents


def _header(config: StackConfig, target: ClusterTarget) -> str:
    return (
        f"# Rendered by serving.manifests: model {config.model.name} on target {target.name}.\n"
        "# Do not edit; change the stack or target file and render again (deploy/README.md).\n"
    )


def render_files(config: StackConfig, target: ClusterTarget) -> dict[str, str]:
    """Every output file as ``{relative path: text}`` (pure; what :func:`write_manifests` writes)."""
    head = _header(config, target)
    prometheus = render_prometheus(config, target)
    files = {
        "rayservice.yaml": head + to_yaml(render_rayservice(config, target)),
        "weights-job.yaml": head + to_yaml(render_weights_job(config, target)),
        "serve-config.yaml": head + to_yaml(render_serve_config(config)),
        "prometheus/prometheus.yml": head + to_yaml(prometheus["scrape_config"]),
        f"prometheus/{RULES_FILE}": head + to_yaml(prometheus["rules"]),
        "prometheus/operator.yaml": head + to_yaml_documents(prometheus["operator_resources"]),
        "grafana/serveout-dashboard.json":
            json.dumps(render_grafana_dashboard(config), indent=2) + "\n",
    }
    if target.keda is not None:
        files["keda/scaledobject.yaml"] = head + to_yaml(render_keda_scaledobject(config, target))
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
