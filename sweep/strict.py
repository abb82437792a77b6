"""``Strict``, the base of every typed sweep object (pure)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """The base of every typed sweep object: unknown keys are errors, values immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
