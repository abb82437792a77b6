"""Reading the sweep's files: a sweep spec with CLI overrides (its quality probe set
parsed and its reference checked), a price table, the probe's items.

An override is ``dotted.key=value`` where the value is read as a YAML scalar or flow
list: ``traffic.profile.rate_rps=4``, ``space.tensor_parallel=[1,2]``,
``slo.ttft_p95=500ms``, ``space.replicas.max=null``. Overrides are applied to the raw
document before validation, so the error for a bad key or value names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from loadtest.errors import ConfigError
from loadtest.quality.items import QualityItem, load_items, select
from sweep.errors import SpecError
from sweep.spec.economics import PriceTable
from sweep.spec.space import reference_shape
from sweep.spec.sweep_spec import SweepSpec


def load_sweep_spec(path: Path, overrides: Sequence[str] = ()) -> SweepSpec:
    """Read, override and validate a sweep spec; ``prices`` and ``quality.set`` are
    resolved next to the file, the probe set is parsed and the quality reference checked."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read sweep spec {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise SpecError(f"sweep spec {path} must be a YAML mapping")
    spec = _validate(_apply(document, overrides), f"sweep spec {path}", overrides)
    if not spec.prices.is_absolute():
        spec = spec.model_copy(update={"prices": (path.parent / spec.prices).resolve()})
    quality = spec.quality
    if quality is not None and quality.set is not None and not quality.set.is_absolute():
        quality = quality.model_copy(update={"set": (path.parent / quality.set).resolve()})
        spec = spec.model_copy(update={"quality": quality})
    probe_items(spec)
    reference_shape(spec)
    return spec


def probe_items(spec: SweepSpec) -> tuple[QualityItem, ...]:
    """The items each candidate is asked (none without ``quality``); :class:`SpecError`
    naming ``quality.set`` when the set cannot be read or does not parse."""
    if spec.quality is None:
        return ()
    try:
        return select(load_items(spec.quality.set), limit=spec.quality.items)
    except ConfigError as exc:
        raise SpecError(f"quality.set: {exc}") from None


def load_price_table(path: Path) -> PriceTable:
    """Read a price table YAML file; :class:`SpecError` names the file on any problem."""
    try:
        return PriceTable.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as exc:
        raise SpecError(f"invalid price table {path}: {_problems(exc)}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"invalid price table {path}: {exc}") from exc


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors())


def _validate(document: dict[str, Any], where: str, overrides: Sequence[str]) -> SweepSpec:
    try:
        return SweepSpec.model_validate(document)
    except ValidationError as exc:
        suffix = f" (overrides: {', '.join(overrides)})" if overrides else ""
        raise SpecError(f"invalid {where}: {_problems(exc)}{suffix}") from None


def _apply(document: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    result: dict[str, Any] = _deep_copy(document)
    for item in overrides:
        key, sep, raw = item.partition("=")
        keys = [k.strip() for k in key.strip().split(".")]
        if not sep or not all(keys):
            raise SpecError(f"override {item!r} must look like key.path=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise SpecError(f"override {item!r}: value is not valid YAML: {exc}") from None
        node = result
        for depth, part in enumerate(keys[:-1]):
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(keys[: depth + 1])
                raise SpecError(f"override {item!r}: {where} is a value, not a section")
            node = child
        node[keys[-1]] = value
    return result


def _deep_copy(node: Any) -> Any:
    """Copy dicts and lists. Unlike ``copy.deepcopy``, a YAML alias (one object in two
    places) becomes two copies, so an override at one path never changes the other."""
    if isinstance(node, dict):
        return {k: _deep_copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_deep_copy(v) for v in node]
    return node
