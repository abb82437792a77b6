"""Scaling efficiency: achieved speed-up over ideal linear speed-up (pure).

The speed-up is capacity over capacity: the highest rate meeting the SLO with more
units, over that with the base (:mod:`sweep.rows`). Two comparisons:

- **replicas**: N replicas of a shape against one replica of it (ideal N);
- **tensor parallel, per accelerator**: one TP-k replica against one replica of the
  smallest measured TP size with the same engine settings (ideal: the ratio of
  accelerators, e.g. 2 for TP2 against TP1).

A measured capacity is only known within its bracket (highest pass, lowest valid
failure), so each efficiency comes with the range the brackets allow: ``low`` uses
the unit's lower and the base's upper end, ``high`` the other way round; ``None``
where a bracket is open (no failure was measured), which is common at the target
when a run only had to pass there.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from sweep.base import Strict
from sweep.economics import scaling_efficiency
from sweep.rows import RunRow


class ScalingKind(enum.StrEnum):
    REPLICAS = "replicas"
    TENSOR_PARALLEL = "tensor-parallel"


class ScalingRow(Strict):
    """One run's scaling against its base run."""

    kind: ScalingKind
    candidate_id: str
    base_id: str
    accelerators: int
    base_accelerators: int
    capacity_rps: float
    base_capacity_rps: float
    speedup: float
    ideal_speedup: float
    efficiency: float
    efficiency_low: float | None = None
    efficiency_high: float | None = None


def _row(kind: ScalingKind, run: RunRow, base: RunRow, ideal: float) -> ScalingRow | None:
    cap, base_cap = run.capacity_rps, base.capacity_rps
    if cap is None or base_cap is None or base_cap <= 0:
        return None
    low = None if base.fails_at_rps is None else scaling_efficiency(cap, ideal, base.fails_at_rps)
    high = None if run.fails_at_rps is None else scaling_efficiency(run.fails_at_rps, ideal, base_cap)
    return ScalingRow(
        kind=kind, candidate_id=run.candidate_id, base_id=base.candidate_id,
        accelerators=run.accelerators, base_accelerators=base.accelerators,
        capacity_rps=cap, base_capacity_rps=base_cap, speedup=cap / base_cap, ideal_speedup=ideal,
        efficiency=scaling_efficiency(cap, ideal, base_cap), efficiency_low=low, efficiency_high=high,
    )


def scaling_rows(rows: Sequence[RunRow]) -> tuple[ScalingRow, ...]:
    """Replica scaling of every multi-replica run, then TP scaling of every one-replica
    run above the smallest TP size (rows without both capacities are left out)."""
    singles = {r.candidate.shape: r for r in rows if r.candidate.replicas == 1 and r.capacity_rps is not None}
    out = []
    for run in rows:
        base = singles.get(run.candidate.shape)
        if run.candidate.replicas > 1 and base is not None:
            out.append(_row(ScalingKind.REPLICAS, run, base, run.candidate.replicas))
    for shape, run in singles.items():
        peers = [s for s in singles if s.engine == shape.engine and s.tp < shape.tp]
        if peers:
            base = singles[min(peers, key=lambda s: s.tp)]
            out.append(_row(ScalingKind.TENSOR_PARALLEL, run, base, run.accelerators / base.accelerators))
    return tuple(r for r in out if r is not None)


def replica_efficiency(scaling: Sequence[ScalingRow], candidate_id: str) -> ScalingRow | None:
    """The replica-scaling row of one candidate, if any."""
    return next((s for s in scaling if s.kind is ScalingKind.REPLICAS and s.candidate_id == candidate_id), None)
