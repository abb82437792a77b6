"""Figures per group of a stage's requests (per model, per tenant, per priority class):
what each group has, and the grouping of records by name (pure).
:mod:`loadtest.analysis.group_figures` computes them.

A group's figures are computed over its measured requests as the stage's own are:
errors leave client cancellations out (``rate_limited`` counts the HTTP 429s among
them), latencies are those of successful requests, output tokens per second count what
the group's requests streamed inside the measured window (the groups' rates add up to
the stage's), and goodput counts the successful requests meeting every per-request
objective asked of the group. A group with objectives of its own gets verdicts too.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadtest.analysis.slo import SLOReport
from loadtest.analysis.stats import Distribution


class GroupFigures(BaseModel):
    """One group's measured requests and their figures."""

    model_config = ConfigDict(frozen=True)

    requests: int = Field(description="measured requests of the group")
    errors: int = Field(description="of those, failed (client cancellations excluded)")
    rate_limited: int = Field(0, description="of the errors, HTTP 429 (rate limited or shed)")
    share: float = Field(description="its requests over the stage's measured requests")
    ttft: Distribution
    itl: Distribution = Distribution()
    tpot: Distribution
    e2e: Distribution
    output_tokens_per_s: float | None = None
    slo: SLOReport = Field(SLOReport(), description="goodput, and verdicts when the group has objectives of its own")


def groups(names: np.ndarray, *, minimum: int = 2, skip: str | None = None) -> list[tuple[str, np.ndarray]]:
    """Each name of ``names`` (one per record; ``skip``: a name left out) with the mask
    of its records, the most requested first (then by name); empty when there are
    fewer than ``minimum``."""
    found, counts = np.unique(names, return_counts=True)
    kept = [i for i in range(len(found)) if skip is None or str(found[i]) != skip]
    if len(kept) < minimum:
        return []
    order = sorted(kept, key=lambda i: (-int(counts[i]), str(found[i])))
    return [(str(found[i]), names == found[i]) for i in order]
