"""How a trial's load points are taken: which rates, how many samples each (pure).

Every measurer (a real deployment, a simulator, a test fake) drives its load tests
through :func:`measure_rates`, handing it ``take(rate, seed)``, one load test:

- **Rates**: the trial's offered rates in ascending order until one does not pass
  (fails or is invalid), then ``trial.refine`` bisections between the highest
  passing and the lowest non-passing rate: the load tester's own rate-sweep search
  (:func:`loadtest.profiles.rate_search.next_sweep_rate`), so one replica's capacity is
  known to a bisection, not to the probe ladder's factor of two.
- **Samples**: one 60-second Poisson sample near the SLO is a coin toss. A point is
  sampled again with a new arrival seed until it is settled
  (:func:`sweep.measure.verdicts.settled`: valid and further than
  ``boundary_margin`` from every limit) or ``max_samples`` were taken.

Samples combine (:func:`combine`) as follows: invalid samples are left out while a
valid one exists; counts and durations add up (the goodput share pools every
request); rates are averaged; each p95 is the median of the samples' p95s (so with
an odd count the verdict on a latency objective is the samples' majority); an
objective's confidence is the mean of the samples' (the share of all their
bootstrap resamples in which it holds) and its CI the envelope of theirs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence

from loadtest.profiles.rate_search import next_sweep_rate
from sweep.measure.results import Evidence, LoadPoint, Trial
from sweep.measure.verdicts import evaluate_point, settled
from sweep.spec.sweep_spec import SearchSettings, SloSpec

# Take one load test of ``rate`` req/s with arrival seed ``seed``; returns one sample.
TakeSample = Callable[[float, int], LoadPoint]

_SAMPLE_STRIDE = 1_000_003


def sample_seed(seed: int, rate: float, index: int) -> int:
    """The arrival seed of sample ``index`` at ``rate``: every candidate sees the same
    arrivals at a given rate, and different rates (and repeats) are independent
    samples (one seed would scale a single unit-rate sequence to every rate)."""
    return seed + round(rate * 1000) + index * _SAMPLE_STRIDE


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _median_p95(values: Iterable[float | None]) -> float | None:
    """Median where a missing p95 (no successful request) counts as the worst."""
    ranked = sorted(values, key=lambda v: (v is None, v or 0.0))
    middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
    if any(v is None for v in middle):
        return None
    return statistics.fmean(v for v in middle if v is not None)


def _evidence(samples: Sequence[LoadPoint], key: str) -> Evidence:
    found = [e for s in samples if (e := s.evidence.get(key)) is not None]
    lows = [e.ci_low for e in found if e.ci_low is not None]
    highs = [e.ci_high for e in found if e.ci_high is not None]
    return Evidence(
        ci_low=min(lows, default=None), ci_high=max(highs, default=None),
        confidence=_mean(e.confidence for e in found),
    )


def combine(samples: Sequence[LoadPoint]) -> LoadPoint:
    """One point from samples at the same offered rate (see the module docstring)."""
    if not samples:
        raise ValueError("no samples to combine")
    if len(samples) == 1:
        return samples[0]
    if len({s.offered_rps for s in samples}) != 1 or not all(s.seeds for s in samples):
        raise ValueError("samples of one point share its offered rate and carry their seeds")
    valid = [s for s in samples if s.valid]
    use = valid or list(samples)
    reasons = () if valid else tuple(dict.fromkeys(r for s in samples for r in s.invalid_reasons))
    evidence = {key: _evidence(use, key) for key in dict.fromkeys(k for s in use for k in s.evidence)}
    return LoadPoint(
        offered_rps=samples[0].offered_rps,
        duration_s=sum(s.duration_s for s in use),
        requests_sent=sum(s.requests_sent for s in use),
        requests_ok=sum(s.requests_ok for s in use),
        requests_good=sum(s.requests_good for s in use),
        achieved_rps=statistics.fmean(s.achieved_rps for s in use),
        arrival_rps=_mean(s.arrival_rps for s in use),
        completed_rps=_mean(s.completed_rps for s in use),
        output_tokens_per_s=statistics.fmean(s.output_tokens_per_s for s in use),
        ttft_p95_s=_median_p95(s.ttft_p95_s for s in use),
        tpot_p95_s=_median_p95(s.tpot_p95_s for s in use),
        e2e_p95_s=_median_p95(s.e2e_p95_s for s in use),
        goodput_rps=statistics.fmean(s.goodput_rps for s in use),
        evidence=evidence,
        invalid_reasons=reasons,
        seeds=tuple(seed for s in samples for seed in s.seeds),
    )


def measure_point(rate: float, seed: int, slo: SloSpec, search: SearchSettings, take: TakeSample) -> LoadPoint:
    """One load point at ``rate``: samples with new seeds until it is settled."""

    def sample(index: int) -> LoadPoint:
        arrival_seed = sample_seed(seed, rate, index)
        return take(rate, arrival_seed).model_copy(update={"seeds": (arrival_seed,)})

    samples = [sample(0)]
    while not settled(point := combine(samples), slo, search):
        samples.append(sample(len(samples)))
    return point


def measure_rates(trial: Trial, seed: int, slo: SloSpec, search: SearchSettings,
                  take: TakeSample) -> tuple[LoadPoint, ...]:
    """Every load point of ``trial`` (see the module docstring), ascending by rate."""
    points: list[LoadPoint] = []
    while True:
        history = [(p.offered_rps, evaluate_point(p, slo).passed) for p in points]
        rate = next_sweep_rate(history, probes=trial.offered_rates, refine=trial.refine)
        if rate is None:
            return tuple(sorted(points, key=lambda p: p.offered_rps))
        points.append(measure_point(rate, seed, slo, search, take))
