"""Helpers for the manifest tests: the real model specs, the checked-in targets, configs."""

from __future__ import annotations

from pathlib import Path

from serving.config.loading import build_stack_config
from serving.config.model_spec import AcceleratorKind, ModelCatalog, ModelSpec
from serving.config.stack import StackConfig
from serving.manifests.access import DEFAULT_KEYS_FILE
from serving.manifests.command import load_cluster_target
from serving.manifests.target import ClusterTarget

from tests.paths import REPO  # noqa: E402
MODELS = REPO / "models"
TARGETS = REPO / "deploy" / "targets"
CATALOG = ModelCatalog(MODELS)
SPECS = CATALOG.specs()


def target_for(spec: ModelSpec) -> ClusterTarget:
    """The checked-in target a spec's accelerator runs on."""
    name = "cpu-local-kind" if spec.accelerator is AcceleratorKind.CPU else "h200-3x8"
    return load_cluster_target(TARGETS / f"{name}.yaml")


def cluster_config(spec: ModelSpec, target: ClusterTarget, **overrides) -> StackConfig:
    """A StackConfig for ``spec`` on ``target`` (two replicas unless overridden; the keys
    file where ``serving render`` puts it when the target names a keys Secret)."""
    data: dict = {"model": spec.name, "gateway": {"host": "0.0.0.0"},
                  "replicas": {"num_replicas": 2}}
    if target.api_keys_secret:
        data["gateway"]["api_keys_file"] = str(DEFAULT_KEYS_FILE)
    if spec.accelerator is AcceleratorKind.CPU:
        data["replicas"]["cpus_per_rank"] = 2 // spec.tensor_parallel_size or 1
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_stack_config(data, catalog=CATALOG, model_path=target.weights.model_path(spec.name))


def ray_metric_names() -> frozenset[str]:
    """Ray's metric names, read from the Grafana panels of the installed Ray (its own
    record of what it exports), without importing Ray."""
    import importlib.util
    import re

    ray_root = Path(importlib.util.find_spec("ray").origin).parent
    panels = ray_root / "dashboard" / "modules" / "metrics" / "dashboards"
    text = "".join(p.read_text() for p in sorted(panels.glob("*_panels.py")))
    return frozenset(re.findall(r"\bray_[a-z0-9_]+\b", text))


def promql_parser():
    """The PromQL parser (PyPI `promql-parser`, pinned in requirements/cpu.lock)."""
    import promql_parser

    return promql_parser
