"""Fitting step-time coefficients to published end-to-end figures (pure).

A published point is a figure (a batch's latency, a median TPOT, ...) of a run whose
steps are known (:class:`simulator.batch_run.BatchSteps`): its prediction for a
coefficient vector is that run's figure. Each point names which of its coefficients are
free *parameters* (``slots``: coefficient index -> parameter name); points share a
parameter by naming it alike (the hardware's shares of bandwidth and peak: one value for
every point on that GPU; a vLLM version's overheads: one value per source). The rest of
a point's coefficients stay at its ``base``; ``scales`` multiply one by
``1 + parameter / x`` (a share that falls with a property ``x`` of the point, e.g. the
KV heads each rank's attention kernel has to spread over the GPU). :func:`fit_points` finds the parameters
minimising the squared relative error over the points, by Levenberg-Marquardt on their
logarithms (they stay positive), each kept within its bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from simulator.batch_run import BatchSteps

MAX_ITERATIONS = 300
JACOBIAN_STEP = 1e-5  # in log space


@dataclass(frozen=True)
class FitPoint:
    """One published figure, the replayed run it comes from and its free coefficients."""

    key: str
    steps: BatchSteps
    figure: str
    value: float
    base: np.ndarray
    slots: Mapping[int, str]
    scales: Mapping[int, tuple[str, float]] = field(default_factory=dict)  # index -> (name, x): x (1 + name / x)

    def coefficients(self, params: Mapping[str, float]) -> np.ndarray:
        c = np.array(self.base, dtype=float)
        for index, name in self.slots.items():
            c[index] = params[name]
        for index, (name, x) in self.scales.items():
            c[index] *= 1 + params[name] / x
        return c

    def predict(self, params: Mapping[str, float]) -> float:
        return self.steps.figures(self.coefficients(params))[self.figure]

    def error(self, params: Mapping[str, float]) -> float:
        """Signed relative error of the prediction (predicted / published - 1)."""
        return self.predict(params) / self.value - 1.0


@dataclass(frozen=True)
class PointFit:
    params: dict[str, float]
    rms_error: float
    iterations: int


def fit_points(points: Sequence[FitPoint], start: Mapping[str, float],
               bounds: Mapping[str, tuple[float, float]] | None = None) -> PointFit:
    """The parameters (named in the points' slots; ``start``: their first values) that
    minimise the points' squared relative errors; ``bounds`` (low, high) per name."""
    names = sorted({n for p in points for n in (*p.slots.values(), *(name for name, _ in p.scales.values()))})
    if len(points) < len(names):
        raise ValueError(f"{len(points)} points cannot fit {len(names)} parameters")
    missing = [n for n in names if n not in start]
    if missing:
        raise ValueError(f"no start value for {', '.join(missing)}")
    bounds = bounds or {}
    low = np.log([bounds.get(n, (1e-12, 1e12))[0] for n in names])
    high = np.log([bounds.get(n, (1e-12, 1e12))[1] for n in names])
    theta = np.clip(np.log([start[n] for n in names]), low, high)

    def params(t: np.ndarray) -> dict[str, float]:
        return dict(zip(names, np.exp(t).tolist()))

    def residuals(t: np.ndarray) -> np.ndarray:
        values = params(t)
        return np.array([p.error(values) for p in points])

    damping, r = 1e-3, residuals(theta)
    iterations = 0
    for iterations in range(1, MAX_ITERATIONS + 1):
        jac = np.empty((len(points), len(theta)))
        for k in range(len(theta)):
            step = theta.copy()
            step[k] += JACOBIAN_STEP if step[k] + JACOBIAN_STEP <= high[k] else -JACOBIAN_STEP
            jac[:, k] = (residuals(step) - r) / (step[k] - theta[k])
        normal, grad = jac.T @ jac, jac.T @ r
        improved = done = False
        while damping < 1e10:
            delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -grad)
            trial = np.clip(theta + delta, low, high)
            r_trial = residuals(trial)
            if r_trial @ r_trial < r @ r:
                done = (r @ r - r_trial @ r_trial) < 1e-10 * max(r @ r, 1e-30)
                theta, r, improved, damping = trial, r_trial, True, max(damping / 3, 1e-9)
                break
            damping *= 4
        if not improved or done:
            break
    return PointFit(params(theta), float(np.sqrt(np.mean(r**2))), iterations)
