"""Figures per model, for a stage whose requests named several (``--model-mix``): the
summary's :class:`ModelFigures` and the grouping of records by model (pure).

:func:`loadtest.analysis.metrics.model_figures` computes them over the measured requests
as the stage's own figures are: errors leave client cancellations out, latencies are
those of successful requests, and output tokens per second count what each model's
requests streamed inside the measured window (the models' rates add up to the stage's).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadtest.analysis.stats import Distribution


class ModelFigures(BaseModel):
    """One model's measured requests and their figures."""

    model_config = ConfigDict(frozen=True)

    model: str
    requests: int = Field(description="measured requests that named it")
    errors: int = Field(description="of those, failed (client cancellations excluded)")
    share: float = Field(description="its requests over the stage's measured requests")
    ttft: Distribution
    tpot: Distribution
    e2e: Distribution
    output_tokens_per_s: float | None = None


def model_groups(models: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Each model of ``models`` (one name per record) with the mask of its records, the
    most requested first (then by name); empty when there are fewer than two."""
    names, counts = np.unique(models, return_counts=True)
    if len(names) < 2:
        return []
    order = sorted(range(len(names)), key=lambda i: (-int(counts[i]), str(names[i])))
    return [(str(names[i]), models == names[i]) for i in order]
