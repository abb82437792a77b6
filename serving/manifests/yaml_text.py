"""YAML text of rendered objects: stable key order, multi-line strings as ``|`` blocks."""

from __future__ import annotations

from collections.abc import Iterable

import yaml


class _Dumper(yaml.SafeDumper):
    """SafeDumper that keeps insertion order and writes multi-line strings as blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(obj: object) -> str:
    """One YAML document (no ``---``)."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=120)


def to_yaml_documents(objs: Iterable[object]) -> str:
    """Several documents separated by ``---``."""
    return "---\n".join(to_yaml(obj) for obj in objs)
