"""Spec strings: ``name:key=value,key=value`` -> a typed, validated object (pure).

A token without ``=`` extends the previous key's value into a list, so
``rate-sweep:rates=1,2,4,duration=20s`` gives ``rates=["1", "2", "4"]``; as the first token it
is the value of the model's ``positional`` parameter (``replay:trace.jsonl,speed=2``). The values are
validated by the registered pydantic model, whose errors become :class:`ConfigError`.
"""

from __future__ import annotations

import enum
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from loadtest.errors import ConfigError
from loadtest.registry import Registry, kind_of

M = TypeVar("M", bound=BaseModel)
POSITIONAL = ""  # the key of a leading value without ``name=`` (see :func:`build_from_spec`)


def split_spec(text: str) -> tuple[str, dict[str, str | list[str]]]:
    """Split a spec string into its name and raw parameter values."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    if not name:
        raise ConfigError(f"empty spec {text!r}; expected NAME or NAME:key=value,...")
    params: dict[str, str | list[str]] = {}
    last: str | None = None
    for token in (t.strip() for t in rest.split(",")) if rest.strip() else ():
        if not token:
            continue
        if "=" in token:
            key, _, value = token.partition("=")
            key = key.strip().replace("-", "_")
            if not key:
                raise ConfigError(f"missing key before '=' in spec {text!r}")
            if key in params:
                raise ConfigError(f"key {key!r} given twice in spec {text!r}")
            params[key] = value.strip()
            last = key
        elif last is None:
            params[POSITIONAL] = token
            last = POSITIONAL
        else:
            previous = params[last]
            params[last] = [*previous, token] if isinstance(previous, list) else [previous, token]
    return name, params


def build_from_spec(registry: Registry[M], text: str) -> M:
    """Build the registered model named by ``text`` with its parameters validated."""
    name, params = split_spec(text)
    cls = registry.get(name)
    if POSITIONAL in params:
        key = getattr(cls, "positional", None)
        if key is None:
            raise ConfigError(f"value {params[POSITIONAL]!r} without a key in spec {text!r}")
        if key in params:
            raise ConfigError(f"key {key!r} given twice in spec {text!r}")
        params[key] = params.pop(POSITIONAL)
    try:
        return cls.model_validate({**params, "kind": kind_of(cls)})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or name}: {err['msg']}" for err in exc.errors()
        )
        fields = ", ".join(f for f in cls.model_fields if f != "kind")
        raise ConfigError(f"invalid {registry.what} {text!r}: {problems} (parameters: {fields})") from None


def describe(registry: Registry[M]) -> list[tuple[str, str, str]]:
    """(name, parameters with defaults, first docstring paragraph) for every registered model."""
    rows = []
    for name, cls in registry.items():
        params = []
        for field, info in cls.model_fields.items():
            if field == "kind":
                continue
            params.append(field if info.is_required() else f"{field}={_show(info.default)}")
        paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
        rows.append((name, ", ".join(params), " ".join(paragraph.split()).replace("``", "")))
    return rows


def _show(value: object) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return "/".join(_show(v) for v in value)
    return str(value)
