"""The quality probe on one deployment (HTTP): the spec's probe items asked at
temperature 0 through :func:`loadtest.quality.probe.ask_items`, as a
:class:`~sweep.measure.results.QualityMeasurement`."""

from __future__ import annotations

import time
from collections.abc import Sequence

from loadtest.quality.items import QualityItem
from loadtest.quality.probe import ask_items, probe_target
from sweep.measure.results import QualityMeasurement
from sweep.spec.quality import QualitySpec


def measure_quality(url: str, model: str, items: Sequence[QualityItem], quality: QualitySpec,
                    timeout_s: float = 300.0) -> QualityMeasurement:
    """Ask ``items`` of ``model`` at ``url``; raises the load tester's errors (a target
    that cannot be asked at all), grades a failed request wrong."""
    started = time.monotonic()
    results = ask_items(probe_target(url, model, timeout_s=timeout_s), items, concurrency=quality.concurrency)
    return QualityMeasurement(wall_time_s=time.monotonic() - started,
        set=quality.set_name, items=len(results), correct=sum(r.correct for r in results),
        errors=sum(r.error is not None for r in results), wrong=tuple(r.id for r in results if not r.correct),
    )
