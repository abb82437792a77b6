"""Building a :class:`StackConfig` from a YAML file and command-line overrides.

A stack file names its model (a spec in ``models/``) and may override any part of
the deployment; the spec's engine settings are the base that ``engine:`` keys
override, and ``dtype:`` overrides the spec's dtype. Example::

    model: smollm2-135m-instruct
    dtype: bfloat16           # the CPU spec says float32 (correct on every CPU)
    tensor_parallel_size: 2   # the spec's own otherwise
    replicas: {num_replicas: 2}
    routing: {policy: prefix-affinity}
    engine: {max_num_seqs: 32}
    adapters: [clinic, pharmacy]   # recipes of the model spec, or {name, path, rank}

``adapters: all`` serves every adapter recipe of the model spec. ``more_bases:`` lists
further base models, each a mapping of the same keys (``model``, ``engine``,
``adapters``, ``dtype``, ``replicas``, ``autoscaling``, ...) and each its own engine
deployment (``gateway.mode: separate``).
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
    resolve_path=None, resolve_adapter=None,
) -> StackConfig:
    """A validated StackConfig from plain data whose ``model`` is a spec name.

    ``resolve_path(name) -> Path`` finds the prepared weights when ``model_path`` is
    not given (usually :meth:`ModelStore.require`); ``resolve_adapter(spec, name) ->
    AdapterSpec`` the prepared adapter of a recipe named in ``adapters`` (usually
    :meth:`AdapterStore.spec`).
    """
    data = dict(data)
    more = data.pop("more_bases", None) or ()
    if not isinstance(more, (list, tuple)) or not all(isinstance(entry, dict) for entry in more):
        raise ConfigError("more_bases must be a list of mappings ({model, engine, replicas, adapters, ...})")
    try:
        resolved = [_base(dict(entry), catalog, resolve_path, resolve_adapter) for entry in more]
        return StackConfig.model_validate(
            {**_base(data, catalog, resolve_path, resolve_adapter, model_path), "more_bases": resolved}
        )
    except ValidationError as exc:
        raise ConfigError(f"invalid stack config: {exc}") from exc


SPEC_OVERRIDES = ("dtype", "tensor_parallel_size")
"""Model spec fields a stack may override for its deployment."""


def _base(data: dict[str, Any], catalog: ModelCatalog, resolve_path, resolve_adapter,
          model_path: Path | None = None) -> dict[str, Any]:
    """One base model's part of the config (its spec, weights, engine, adapters), taken
    out of ``data``; what is left there (replicas, autoscaling, ...) stays."""
    name = data.pop("model", None) or DEFAULT_MODEL
    spec = catalog.get(name)
    engine = merge(spec.engine.model_dump(), data.pop("engine", None) or {})
    path = model_path or data.pop("model_path", None) or resolve_path(name)
    adapters = _adapters(data.pop("adapters", None) or (), spec, resolve_adapter)
    overrides = {key: data.pop(key) for key in SPEC_OVERRIDES if data.get(key) is not None}
    if overrides:
        spec = ModelSpec.model_validate({**spec.model_dump(), **overrides})
    return {**data, "model": spec, "model_path": path, "engine": engine, "adapters": adapters}


def _adapters(entries, spec: ModelSpec, resolve_adapter) -> list:
    """``adapters`` with recipe names (or ``all``) replaced by their prepared adapters."""
    if entries == "all":
        entries = [recipe.name for recipe in spec.adapters]
    if isinstance(entries, str) or not isinstance(entries, (list, tuple)):
        raise ConfigError("adapters must be a list (recipe names or {name, path, rank}) or `all`")
    out = []
    for entry in entries:
        if isinstance(entry, str):
            if resolve_adapter is None:
                raise ConfigError(f"adapter {entry!r} names a recipe, but no adapter store was given")
            entry = resolve_adapter(spec, entry)
        out.append(entry)
    return out
