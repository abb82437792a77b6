"""The spec's model for any measurer: the model catalog, a model's prepared weights and
adapters, with serving's errors turned into :class:`~sweep.errors.ModelUnavailableError`."""

from __future__ import annotations

from pathlib import Path

from serving.config.adapters import AdapterSpec
from serving.config.model_spec import ModelCatalog
from serving.errors import ConfigError as ServingConfigError
from serving.model_store import ModelStore
from sweep.errors import ModelUnavailableError


def model_catalog(specs_dir: Path) -> ModelCatalog:
    """The model specs in ``specs_dir``; :class:`ModelUnavailableError` if they cannot be read."""
    try:
        return ModelCatalog(specs_dir)
    except ServingConfigError as exc:
        raise ModelUnavailableError(f"model catalog {specs_dir}: {exc}") from None


def prepared_model(name: str, catalog: ModelCatalog, home: Path | None = None) -> Path:
    """The folder of model ``name``'s prepared weights; :class:`ModelUnavailableError`
    when the catalog does not list it or it is not prepared."""
    try:
        return ModelStore(catalog, home).require(name)
    except ServingConfigError as exc:  # an unknown name, or ModelNotPreparedError
        raise ModelUnavailableError(str(exc)) from None


def prepared_adapters(model: str, names: tuple[str, ...], catalog: ModelCatalog,
                      home: Path | None = None) -> tuple[AdapterSpec, ...]:
    """The served adapters ``names`` of ``model`` (its spec's recipes, prepared);
    :class:`ModelUnavailableError` for one it has no recipe of or not made yet."""
    try:
        spec = catalog.get(model)
        store = ModelStore(catalog, home).adapters
        return tuple(store.spec(spec, name) for name in names)
    except ServingConfigError as exc:
        raise ModelUnavailableError(f"the sweep's adapters: {exc}") from None
