"""The base class of every typed sweep object."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Unknown keys are errors and values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
