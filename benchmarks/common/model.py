"""The model the benchmarks run (serving's default model) and the settings serveout
gives its replicas, so that a reference server started beside the stack runs the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from serving.config.loading import DEFAULT_MODEL, build_stack_config
from serving.config.model_spec import ModelCatalog, ModelSpec
from serving.config.stack import StackConfig
from serving.engine.placement import engine_runtime_env
from serving.model_store import ModelStore, models_dir

MODEL = DEFAULT_MODEL


def catalog() -> ModelCatalog:
    """The model specs (``models/``, or ``$SERVEOUT_MODELS_DIR``)."""
    return ModelCatalog(models_dir())


def model_path(name: str = MODEL) -> Path:
    """A model's prepared weights folder (error if not prepared)."""
    return ModelStore(catalog()).require(name)


def model_spec(name: str = MODEL) -> ModelSpec:
    """A model's spec: the settings serveout's replicas use."""
    return catalog().get(name)


def stack_config(overrides: dict[str, Any] | None = None) -> StackConfig:
    """serveout's stack config with ``overrides`` (plain data; default model unless
    ``model`` is given), weights from the model store."""
    specs = catalog()
    store = ModelStore(specs)
    return build_stack_config(overrides or {}, catalog=specs, resolve_path=store.require,
                              resolve_adapter=store.adapters.spec)


def engine_env() -> dict[str, str]:
    """The environment serveout's engine replicas of the default model start with."""
    return engine_runtime_env(stack_config())["env_vars"]
