"""The quality gate (pure): each run's answers against the reference configuration's.

Every candidate's deployment answers the same probe items at temperature 0
(:mod:`sweep.measure.quality_probe`); its score ``k/n`` has a 95% Wilson interval
(:func:`loadtest.quality.wilson.wilson_interval`). The *reference* is the run of the
reference shape (:func:`sweep.spec.space.reference_shape`) with the fewest replicas that
answered the probe (replicas run the same engine: they do not change answers).

**Rule.** A run is *refused* when its Wilson lower bound is more than ``tolerance`` below
the reference's: ``low(run) < low(reference) - tolerance``. Like is compared with like:
both lower bounds come from the same items, so the set's difficulty cancels, and a run
whose score rests on fewer items (or failed requests) gets a wider interval and no
benefit of the doubt. Comparing the run's *point* score with the reference's lower bound
instead would spend the reference's own sampling error in the run's favour (at 100
items and a perfect reference, a run could lose 5 answers and pass a 2-point tolerance);
with lower bounds on both sides and equal sizes the tolerance is close to a loss in
score points. Beside the verdict each run carries the paired figure: items right in the
reference and wrong here (``changed``).

A run without a quality measurement (failed to deploy, a tool error) or measured before
its reference is *unknown* and never admitted; a simulated sweep measures no answers:
every run is ``simulated`` ("quality not measured (SIMULATED)") and the gate is not
applied. Without a ``quality`` section there is no verdict at all.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from pydantic import Field

from loadtest.quality.results import Score
from sweep.measure.results import QualityMeasurement, RunRecord
from sweep.spec.space import SearchSpace, reference_shape
from sweep.strict import Strict

RULE = ("a configuration is refused when the 95% Wilson lower bound of its probe score is more than the tolerance "
        "below the reference configuration's (same items; replicas do not change answers)")
NOT_MEASURED_SIMULATED = "quality not measured (SIMULATED)"
_EPS = 1e-12


class QualityStatus(enum.StrEnum):
    REFERENCE = "reference"
    ACCEPTED = "accepted"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    SIMULATED = "simulated"


class QualityVerdict(Strict):
    """One run's quality and the gate's verdict on it, with the reference it was held to."""

    status: QualityStatus
    score: Score | None = None
    reference_id: str | None = None
    reference: Score | None = None
    tolerance: float = 0.0
    changed: int | None = Field(None, description="items right in the reference and wrong here")
    errors: int = Field(0, description="probe requests that failed (graded wrong)")
    explanation: str

    @property
    def admits(self) -> bool:
        """Whether the answer may be this run (a simulated sweep's gate is not applied)."""
        return self.status in (QualityStatus.REFERENCE, QualityStatus.ACCEPTED, QualityStatus.SIMULATED)


def describe_score(score: Score) -> str:
    """``94.3% (296/314) [91.1%, 96.3%]``."""
    return f"{score.score:.1%} ({score.correct}/{score.items}) [{score.low:.1%}, {score.high:.1%}]"


def short_label(verdict: QualityVerdict | None) -> str:
    """A table cell: ``94.3% [91.1, 96.3] refused``, or why there is no score (``-``:
    no ``quality`` section)."""
    if verdict is None:
        return "-"
    if verdict.status is QualityStatus.SIMULATED:
        return "not measured (SIMULATED)"
    if verdict.score is None:
        return "not measured"
    s = verdict.score
    return f"{s.score:.1%} [{s.low:.1%}, {s.high:.1%}] {verdict.status.value}"


def _score(measurement: QualityMeasurement) -> Score:
    return Score.of(measurement.correct, measurement.items)


def reference_run(space: SearchSpace, history: Sequence[RunRecord]) -> RunRecord | None:
    """The reference shape's run with the fewest replicas that answered the probe."""
    shape = reference_shape(space.spec)
    measured = [r for r in history if r.candidate.shape == shape and r.result.quality is not None]
    return min(measured, key=lambda r: r.candidate.replicas, default=None)


def judge_quality(space: SearchSpace, history: Sequence[RunRecord]) -> dict[str, QualityVerdict]:
    """Each run's verdict by candidate id (empty without a ``quality`` section)."""
    quality = space.spec.quality
    if quality is None:
        return {}
    if space.spec.simulated:
        return {r.candidate.id: QualityVerdict(status=QualityStatus.SIMULATED, explanation=NOT_MEASURED_SIMULATED)
                for r in history}
    reference = reference_run(space, history)
    ref_score = None if reference is None or reference.result.quality is None else _score(reference.result.quality)
    verdicts = {}
    for record in history:
        verdicts[record.candidate.id] = _verdict(record, reference, ref_score, quality.tolerance)
    return verdicts


def _verdict(record: RunRecord, reference: RunRecord | None, ref_score: Score | None,
             tolerance: float) -> QualityVerdict:
    measured = record.result.quality
    if measured is None:
        return QualityVerdict(status=QualityStatus.UNKNOWN, tolerance=tolerance,
                              explanation=f"quality not measured ({record.result.status.value})")
    score = _score(measured)
    failed = f"; {measured.errors} probe request(s) failed (graded wrong)" if measured.errors else ""
    base = {"score": score, "tolerance": tolerance, "errors": measured.errors}
    if reference is None or ref_score is None or reference.result.quality is None:
        return QualityVerdict(status=QualityStatus.UNKNOWN, **base,
                              explanation=f"quality {describe_score(score)}; the reference is not measured{failed}")
    ref_id = reference.candidate.id
    base |= {"reference_id": ref_id, "reference": ref_score}
    if record.candidate.id == ref_id:
        return QualityVerdict(status=QualityStatus.REFERENCE, changed=0, **base,
                              explanation=f"quality {describe_score(score)}: the reference{failed}")
    changed = len(set(measured.wrong) - set(reference.result.quality.wrong))
    against = (f"the reference's lower bound {ref_score.low:.1%} - {tolerance * 100:g} pts "
               f"({ref_id}: {describe_score(ref_score)}); {changed} answer(s) right there are wrong here{failed}")
    if score.low < ref_score.low - tolerance - _EPS:
        return QualityVerdict(status=QualityStatus.REFUSED, changed=changed, **base,
                              explanation=f"refused: quality {describe_score(score)}, lower bound "
                                          f"{score.low:.1%} below {against}")
    return QualityVerdict(status=QualityStatus.ACCEPTED, changed=changed, **base,
                          explanation=f"quality {describe_score(score)}, lower bound {score.low:.1%} within "
                                      f"{against}")
