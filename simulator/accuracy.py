"""The simulator's measured error per hardware profile: the band every simulated answer
carries (pure but for :func:`load_bands` and :func:`write_bands`).

``simulator/hardware/accuracy.yaml`` is written by ``python -m benchmarks.published_accuracy
--write`` (GPU profiles: published vLLM measurements, validation points only) and read by
``simulator run``, ``sweep run --simulate`` and ``sweep plan``: they print, e.g.,
"SIMULATED, +-6% on 58 published points (h100)" and flag an answer whose SLO margin is
inside the band (:func:`margin_flags`, :func:`capacity_flag`). A profile without a band says so ("error not
measured").
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadtest.analysis.slo import SHARES
from simulator.errors import SimulationConfigError

ACCURACY_FILE = Path(__file__).resolve().parent / "hardware" / "accuracy.yaml"
BAND_PERCENTILE = 90  # the band: 90% of the validation points' errors lie within it


class AccuracyBand(BaseModel):
    """The validation error of one hardware profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    band_pct: float = Field(ge=0, description=f"p{BAND_PERCENTILE} of |error| over the validation points")
    median_abs_pct: float = Field(ge=0)
    max_abs_pct: float = Field(ge=0)
    points: int = Field(ge=1, description="validation points")
    sources: tuple[str, ...] = ()
    measured_on: str = Field(description="the hardware the validation points ran on")
    note: str = ""

    @classmethod
    def of(cls, errors_pct, *, sources, measured_on: str, note: str = "") -> AccuracyBand:
        a = np.abs(np.asarray(errors_pct, dtype=float))
        return cls(band_pct=round(float(np.percentile(a, BAND_PERCENTILE)), 1),
                   median_abs_pct=round(float(np.median(a)), 1), max_abs_pct=round(float(a.max()), 1),
                   points=len(a), sources=tuple(sources), measured_on=measured_on, note=note)

    def describe(self) -> str:
        return (f"+-{self.band_pct:g}% on {self.points} published points (p{BAND_PERCENTILE} |error|; "
                f"median {self.median_abs_pct:g}%, max {self.max_abs_pct:g}%; validated on {self.measured_on})")


def load_bands(path: Path = ACCURACY_FILE) -> dict[str, AccuracyBand]:
    """The bands by hardware profile name (an absent file: none)."""
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
        return {name: AccuracyBand.model_validate(band) for name, band in data.get("bands", {}).items()}
    except (yaml.YAMLError, ValidationError, AttributeError) as exc:
        raise SimulationConfigError(f"invalid accuracy file {path}: {exc}") from None


def band_for(hardware: str, path: Path = ACCURACY_FILE) -> AccuracyBand | None:
    """The band of a profile name (a profile given as a YAML path: by its file stem)."""
    return load_bands(path).get(Path(hardware).stem)


def write_bands(path: Path, bands: dict[str, AccuracyBand]) -> None:
    header = ("# Written by `python -m benchmarks.published_accuracy --write`: the simulator's error on\n"
              "# published points it was not fitted to (benchmarks/published/points.yaml).\n")
    body = {"bands": {name: band.model_dump(mode="json") for name, band in sorted(bands.items())}}
    path.write_text(header + yaml.safe_dump(body, sort_keys=False))


def simulated_label(hardware: str, band: AccuracyBand | None) -> str:
    """``SIMULATED, +-x% on N published points (...)`` or the "not measured" form."""
    if band is None:
        return f"SIMULATED, error not measured for {hardware} (no published validation points)"
    return f"SIMULATED on {hardware}, {band.describe()}"


def margin_flags(verdicts: Iterable, band: AccuracyBand | None) -> list[str]:
    """One warning per latency or throughput objective (a
    :class:`loadtest.analysis.slo.ObjectiveResult`) whose margin to its threshold is
    inside the band: within the simulator's error the verdict could go either way."""
    if band is None:
        return []
    flags = []
    for verdict in verdicts:
        margin = verdict.margin
        if margin is None or verdict.objective.metric in SHARES or abs(margin) * 100 > band.band_pct:
            continue
        side = "under" if margin >= 0 else "over"
        flags.append(f"{verdict.objective.key} {verdict.observed_text()} is {abs(margin):.1%} {side} its limit "
                     f"{verdict.objective.format(verdict.objective.threshold)}, inside the simulator's "
                     f"+-{band.band_pct:g}% band: the verdict could go either way")
    return flags


def capacity_flag(traffic_rps: float, next_replica_at_rps: float | None, band: AccuracyBand | None) -> str | None:
    """A warning when the traffic is within the band below the rate at which a plan adds
    a replica: a simulator that is band% optimistic would need one more."""
    if band is None or not next_replica_at_rps or traffic_rps <= 0:
        return None
    room = (next_replica_at_rps / traffic_rps - 1) * 100
    if room > band.band_pct:
        return None
    return (f"the traffic is {room:.1f}% below the next replica's threshold ({next_replica_at_rps:.3g} req/s), inside "
            f"the simulator's +-{band.band_pct:g}% band: one replica more may be needed")
