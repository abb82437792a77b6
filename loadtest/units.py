"""Parsing and formatting of durations and fractions (pure)."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator

from loadtest.errors import ConfigError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|ms|s|m|min|h)?\s*$")
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds from ``"500ms"``, ``"10s"``, ``"2m"``, ``"1h"`` or a bare number of seconds."""
    if isinstance(text, bool):
        raise ConfigError(f"not a duration: {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _DURATION.match(text)
        if not match:
            raise ConfigError(f"not a duration: {text!r} (use e.g. 500ms, 10s, 2m)")
        value = float(match.group(1)) * _SCALE[match.group(2)]
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"duration must be finite and >= 0: {text!r}")
    return value


def parse_fraction(text: str | float | int) -> float:
    """A fraction in [0, 1] from ``"1%"``, ``"0.01"`` or a number."""
    try:
        if isinstance(text, str) and text.strip().endswith("%"):
            value = float(text.strip()[:-1]) / 100.0
        else:
            value = float(text)
    except ValueError as exc:
        raise ConfigError(f"not a fraction: {text!r} (use e.g. 1% or 0.01)") from exc
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"fraction must be within [0, 1]: {text!r}")
    return value


def format_seconds(value: float | None) -> str:
    """Human form of a duration: ``"812 ms"``, ``"3.21 s"``, ``"-"`` for None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) < 1e-3:
        return f"{value * 1e6:.0f} us"
    if abs(value) < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def _as_value_error(parse, value: object) -> object:
    """Inside a pydantic validator: a ``ValueError``, so the error names the field."""
    try:
        return parse(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def _seconds(value: object) -> object:
    return _as_value_error(parse_duration, value) if isinstance(value, str) else value


def _fraction(value: object) -> object:
    return _as_value_error(parse_fraction, value) if isinstance(value, str) else value


Seconds = Annotated[float, BeforeValidator(_seconds)]
"""A float of seconds that also accepts ``"500ms"``-style strings in configs and specs."""

Fraction = Annotated[float, BeforeValidator(_fraction)]
"""A float in [0, 1] that also accepts ``"1%"``-style strings."""
