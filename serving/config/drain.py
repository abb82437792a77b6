"""How the stack drains: the time requests in flight get to finish when an engine
replica stops (scale-down, redeploy, delete) or the app shuts down.

See docs/serving.md, "Shutdown and scale-down: what happens to requests in flight".
"""

from __future__ import annotations

from pydantic import Field

from serving.config.model_spec import Strict


class DrainSpec(Strict):
    """The drain bound (``drain:`` in a stack file)."""

    timeout_s: float = Field(
        30.0, gt=0, le=3600, allow_inf_nan=False,
        description="how long a stopping engine replica, or the gateway of an app shutting down, "
        "lets requests in flight finish; past it they end with an error the client sees",
    )

