"""Building a :class:`StackConfig` from a YAML file and command-line overrides.

A stack file names its model (a spec in ``models/``) and may override any part of
the deployment; the spec's engine settings are the base that ``engine:`` keys
override, and ``dtype:`` overrides the spec's dtype. Example::

    model: smollm2-135m-instruct
    dtype: bfloat16           # the CPU spec says float32 (correct on every CPU)
    replicas: {num_replicas: 2}
    routing: {policy: prefix-affinity}
    engine: {max_num_seqs: 32}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from serving.config.model_spec import ModelCatalog, ModelSpec
from serving.config.stack import StackConfig
from serving.errors import ConfigError

DEFAULT_MODEL = "smollm2-135m-instruct"


def read_stack_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read stack file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"stack file {path} must hold a mapping")
    return data


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``overrides`` into ``base`` (None values in overrides are ignored)."""
    out = dict(base)
    for key, value in overrides.items():
        if value is None:
            continue
        if isinstance(value, dict):
            base_value = out.get(key)
            out[key] = merge(base_value if isinstance(base_value, dict) else {}, value)
        else:
            out[key] = value
    return out


def build_stack_config(
    data: dict[str, Any], *, catalog: ModelCatalog, model_path: Path | None = None,
    resolve_path=None,
) -> StackConfig:
    """A validated StackConfig from plain data whose ``model`` is a spec name.

    ``resolve_path(name) -> Path`` finds the prepared weights when ``model_path`` is
    not given (usually :meth:`ModelStore.require`).
    """
    data = dict(data)
    name = data.pop("model", None) or DEFAULT_MODEL
    spec = catalog.get(name)
    engine = merge(spec.engine.model_dump(), data.pop("engine", None) or {})
    path = model_path or data.pop("model_path", None) or resolve_path(name)
    try:
        if (dtype := data.pop("dtype", None)) is not None:
            spec = ModelSpec.model_validate({**spec.model_dump(), "dtype": dtype})
        return StackConfig.model_validate(
            {**data, "model": spec, "model_path": path, "engine": engine}
        )
    except ValidationError as exc:
        raise ConfigError(f"invalid stack config: {exc}") from exc
