"""The sweep spec's ``quality`` section: which answers each candidate is graded on, and
how far below the reference configuration a candidate may fall (pure).

Each measured candidate is asked ``items`` questions of the probe set (the load
tester's :mod:`loadtest.quality`, at temperature 0) on its own deployment. The gate
(:mod:`sweep.analysis.quality`) compares the 95% Wilson lower bounds of the candidate's
and the reference's scores: refused when the candidate's is more than ``tolerance``
below the reference's.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PositiveInt

from loadtest.quality.items import BUNDLED_ITEMS
from sweep.strict import Strict

FIRST = "first"
"""``reference: first``: the shape made of the first value of every ``space`` list."""


class QualitySpec(Strict):
    """How a sweep grades answers (the ``quality:`` section; absent: latency only)."""

    set: Path | None = Field(None, description=f"a JSONL probe set; null = the bundled {BUNDLED_ITEMS}; "
                                               "relative to the spec file")
    items: PositiveInt | None = Field(100, description="items asked per candidate, taken in turn from each "
                                                      "category (null = all)")
    tolerance: float = Field(0.02, ge=0, lt=1, description="how far (a fraction, 0.02 = 2 points) a "
                                                           "candidate's lower bound may sit below the reference's")
    reference: str = Field(FIRST, min_length=1, description="a candidate or shape id of the space, or `first`")
    concurrency: PositiveInt = Field(4, le=64, description="probe requests in flight")

    @property
    def set_name(self) -> str:
        """The probe set as the report names it."""
        return BUNDLED_ITEMS if self.set is None else str(self.set)
