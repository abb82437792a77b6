"""Name -> class registries for pluggable parts (profiles, workloads, report formats).

A registry is built once from a fixed tuple of classes and is immutable: there is no
global mutable registration. Each class names itself with a ``kind`` class attribute
(or a pydantic ``kind`` field default).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

from loadtest.errors import ConfigError, UnknownNameError

T = TypeVar("T")


def kind_of(cls: type) -> str:
    """The registered name of a class: a ``kind`` field default or class attribute."""
    fields = getattr(cls, "model_fields", None)
    if fields and "kind" in fields:
        return str(fields["kind"].default)
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str):
        raise ConfigError(f"{cls.__name__} has no string 'kind' to register it by")
    return kind


class Registry(Generic[T]):
    """An immutable mapping of names to classes of one pluggable kind."""

    def __init__(self, what: str, members: Iterable[type[T]], aliases: Mapping[str, str] | None = None) -> None:
        table: dict[str, type[T]] = {}
        for cls in members:
            name = kind_of(cls)
            if name in table:
                raise ConfigError(f"duplicate {what} name {name!r}")
            table[name] = cls
        self.what = what
        self._table = MappingProxyType(table)
        self._aliases = MappingProxyType(dict(aliases or {}))  # old name -> registered name

    def get(self, name: str) -> type[T]:
        """The class registered as ``name`` (or an old name of it); :class:`UnknownNameError`
        lists valid names."""
        try:
            return self._table[self._aliases.get(name, name)]
        except KeyError:
            raise UnknownNameError(self.what, name, self._table) from None


    def names(self) -> tuple[str, ...]:
        return tuple(self._table)

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def items(self) -> Iterable[tuple[str, type[T]]]:
        return self._table.items()
