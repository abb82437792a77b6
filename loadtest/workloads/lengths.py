"""Token length distributions for synthetic workloads (pure)."""

from __future__ import annotations

import enum

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class LengthKind(enum.StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    NORMAL = "normal"


class LengthDistribution(BaseModel):
    """Lengths around ``mean``: fixed, uniform within ``mean * (1 +- range_ratio)``, or
    normal with ``stddev``; always rounded and clipped to ``[minimum, maximum]``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: LengthKind = LengthKind.FIXED
    mean: int = Field(ge=1)
    range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    stddev: float = Field(0.0, ge=0.0)
    minimum: int = Field(1, ge=1)
    maximum: int | None = None

    @model_validator(mode="after")
    def _bounds(self) -> LengthDistribution:
        if self.maximum is not None and self.maximum < self.minimum:
            raise ValueError("maximum < minimum")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer lengths."""
        if self.kind is LengthKind.FIXED:
            values = np.full(n, float(self.mean))
        elif self.kind is LengthKind.UNIFORM:
            low = self.mean * (1.0 - self.range_ratio)
            high = self.mean * (1.0 + self.range_ratio)
            values = rng.uniform(low, high, size=n)
        else:
            values = rng.normal(self.mean, self.stddev, size=n)
        upper = self.maximum if self.maximum is not None else np.iinfo(np.int32).max
        return np.clip(np.rint(values), self.minimum, upper).astype(int)
