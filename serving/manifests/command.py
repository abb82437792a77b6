"""``serving render``: a stack file + a cluster target -> manifests in a folder.

    serving render --model NAME [--config stack.yaml] --target target.yaml --out DIR

The StackConfig is built exactly as ``serving up`` builds it (model spec, stack
file, the spec's engine settings as the base), except that ``model_path`` comes
from the target's weights volume (``<mount_path>/<model>``), the gateway listens on
the pod's interfaces (``0.0.0.0``: the gateway Service forwards to the pods' IPs)
unless the stack file says otherwise, and a target naming ``api_keys_secret`` sets
``gateway.api_keys_file`` to where that Secret is mounted, unless the stack file
sets its own path. The gateway mode is the stack's (``direct`` unless the stack file
says ``gateway.mode: separate``). In the separate mode, a target with a ``gateways``
section sets ``gateway.ray_resources`` to ``{serveout_gateway: 1}``
(:data:`.naming.GATEWAY_RESOURCE`, offered by the gateway pods alone) and, stating its
peak output tokens/s (``traffic:``), ``gateway.replicas`` by the sizing rule
(:func:`.sizing.gateway_replicas`), unless the stack file sets them. The direct mode runs
no gateway replicas: a target's gateway pods are then not rendered.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path

import yaml
from pydantic import ValidationError

from serving.config.loading import DEFAULT_MODEL, build_stack_config, merge, read_stack_file
from serving.config.model_spec import ModelCatalog
from serving.config.gateway import GatewaySpec
from serving.config.stack import StackConfig
from serving.errors import ConfigError
from serving.manifests.access import DEFAULT_KEYS_FILE
from serving.manifests.naming import GATEWAY_RESOURCE
from serving.manifests.sizing import sized_gateway_replicas
from serving.manifests.target import ClusterTarget
from serving.manifests.writer import write_manifests

CLUSTER_DEFAULTS = {"gateway": {"host": "0.0.0.0"}}
"""What a cluster needs beyond the stack file: Serve's proxies on the pods' interfaces."""


def load_cluster_target(path: Path) -> ClusterTarget:
    """Read a target YAML file; :class:`ConfigError` names the file on any problem (one line)."""
    try:
        return ClusterTarget.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'target'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_url=False))
        raise ConfigError(f"invalid cluster target {path}: {problems}") from exc
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"invalid cluster target {path}: {exc}") from exc


def cluster_stack_config(model: str | None, stack_file: Path | None, target: ClusterTarget,
                         catalog: ModelCatalog) -> StackConfig:
    """The StackConfig to render: like ``serving up``'s, with the target's weights path
    (the keys file path, when the target names a keys Secret; in the separate mode, the
    gateway resource when it has gateway pods, and their count when it states a peak)."""
    data = read_stack_file(stack_file) if stack_file else {}
    if model:
        data["model"] = model
    name = catalog.get(data.get("model") or DEFAULT_MODEL).name
    defaults = CLUSTER_DEFAULTS
    if target.api_keys_secret:
        defaults = merge(defaults, {"gateway": {"api_keys_file": str(DEFAULT_KEYS_FILE)}})
    own_gateway = data.get("gateway") if isinstance(data.get("gateway"), dict) else {}
    mode = own_gateway.get("mode", GatewaySpec.model_fields["mode"].default)
    if target.gateways and mode == "separate":
        if own_gateway.get("ray_resources") is None:  # merged deeply, so only when unset
            defaults = merge(defaults, {"gateway": {"ray_resources": {GATEWAY_RESOURCE: 1}}})
        if gateways := sized_gateway_replicas(target):
            defaults = merge(defaults, {"gateway": {"replicas": gateways}})
    data = merge(defaults, data)
    data.pop("model_path", None)  # the target's volume decides where weights live (every base's)
    for base in data.get("more_bases") or ():
        if isinstance(base, dict):
            base.pop("model_path", None)
    return build_stack_config(data, catalog=catalog, model_path=target.weights.model_path(name),
                              resolve_path=target.weights.model_path)


def cmd_render(args: argparse.Namespace, *, models_dir: Callable[[], Path]) -> int:
    target = load_cluster_target(Path(args.target))
    config = cluster_stack_config(args.model, Path(args.config) if args.config else None,
                                  target, ModelCatalog(models_dir()))
    for path in write_manifests(config, target, Path(args.out)):
        print(path)
    return 0


def add_render_command(subparsers, *, models_dir: Callable[[], Path]) -> argparse.ArgumentParser:
    """Add ``render`` to a CLI's subparsers; ``models_dir()`` locates the model specs."""
    render = subparsers.add_parser(
        "render", help="render cluster manifests (KubeRay, Prometheus, Grafana, Serve config)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    render.add_argument("--model", help=f"model spec name (default: the stack file's, else {DEFAULT_MODEL})")
    render.add_argument("--config", help="stack YAML file (same format as `serving up --config`)")
    render.add_argument("--target", required=True, help="cluster target YAML (deploy/targets/)")
    render.add_argument("--out", required=True, help="output folder")
    render.set_defaults(func=partial(cmd_render, models_dir=models_dir))
    return render
