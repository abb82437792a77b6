"""Fitting the step-time model's constants to measured engine steps (pure but for
:func:`load_step_times` and :func:`write_fitted_profile`).

The step-time file (schema 1, written by ``benchmarks/step_time.py``)::

    {"schema": 1, "hardware": "cpu", "cpu_model": str, "model": "smollm2-135m-instruct",
     "tensor_parallel_size": 1, "dtype": "float32", "vllm_version": str,
     "engine": {"max_num_seqs": int, "max_num_batched_tokens": int, "block_size": int},
     "steps": [{"prefill_tokens": int, "decode_seqs": int, "context_tokens": int,
                "num_seqs": int, "step_s": float}, ...]}

The fit minimises the squared *relative* error of every step (each point counts the
same whatever its length) over the non-negative coefficients of
:func:`simulator.step_time.predict`. Its two rooflines (weights vs GEMM FLOPs, KV reads
vs attention FLOPs) make it piecewise linear: each step is assigned, in each pair, to
the bound that dominates under the current coefficients, the linear problem is solved (non-negative: a coefficient that comes out
negative is dropped and the rest re-solved), and the two repeat until the assignment
stops changing. Columns that are zero on every step (the all-reduce terms at TP 1) are
not identifiable, nor is a column outside the rooflines constant over every step other
than the overhead's (the all-reduce count at one TP size cannot be told from the step
overhead): their
coefficients keep the profile's values (:func:`identifiable_columns`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serving.config.model_spec import ModelArchitecture
from simulator.errors import CalibrationError, SimulationConfigError
from simulator.hardware import Efficiencies, Figure, HardwareProfile
from simulator.step_time import FEATURES, StepTimeModel, predict

MAX_ROUNDS = 50
START_SCALES = (1.0, 1e-2, 1e2)  # weights' and KV coefficients (x the prior's) the free fit starts from
MEMORY_GRID = np.logspace(-2, 2, 81)  # multiples of the prior's memory coefficient
MEMORY_TOLERANCE = 0.02  # relative squared error within which a larger memory share wins


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineShape(_Strict):
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int


class _Written(BaseModel):
    """A record the step-time benchmark writes: fields for human readers (``kind``,
    ``loadavg_1m``, ...) are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class MeasuredStep(_Written):
    prefill_tokens: int = Field(ge=0)
    decode_seqs: int = Field(ge=0)
    context_tokens: int = Field(ge=0)
    num_seqs: int = Field(ge=1)
    step_s: float = Field(gt=0)


class StepTimes(_Written):
    """A step-time file (see the module docstring)."""

    schema_: int = Field(alias="schema")
    hardware: str
    cpu_model: str = ""
    model: str
    tensor_parallel_size: int = Field(ge=1)
    dtype: str
    vllm_version: str = ""
    engine: EngineShape
    steps: tuple[MeasuredStep, ...] = Field(min_length=1)

    def columns(self) -> tuple[np.ndarray, ...]:
        """(prefill tokens, decode seqs, context tokens, seqs, step seconds) as arrays."""
        rows = np.array([(s.prefill_tokens, s.decode_seqs, s.context_tokens, s.num_seqs, s.step_s)
                         for s in self.steps], dtype=float)
        return tuple(rows.T)


def load_step_times(path: Path) -> StepTimes:
    try:
        data = json.loads(path.read_text())
        times = StepTimes.model_validate(data)
    except (OSError, ValueError, ValidationError) as exc:
        raise SimulationConfigError(f"invalid step-time file {path}: {str(exc).splitlines()[0]}") from None
    if times.schema_ != 1:
        raise SimulationConfigError(f"{path}: step-time schema {times.schema_}; this simulator reads 1")
    return times


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with x >= 0: drop the most negative coefficient and re-solve."""
    active = list(range(a.shape[1]))
    while True:
        x = np.zeros(a.shape[1])
        if active:
            x[active] = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        negative = [i for i in active if x[i] < 0]
        if not negative:
            return x
        active.remove(min(negative, key=lambda i: x[i]))


PAIRS = ((0, 1), (2, 3))  # the roofline pairs of :func:`simulator.step_time.predict` (the slower one binds)
PAIRED = {i for pair in PAIRS for i in pair}


def identifiable_columns(features: np.ndarray) -> list[int]:
    """The columns of ``features`` a fit can determine (see the module docstring): a
    roofline column that is ever non-zero (the bound it loses to sets it apart), the
    overhead, and any other column that varies."""
    overhead = FEATURES.index("overhead")
    return [i for i in range(len(FEATURES)) if np.any(features[:, i] > 0)
            and (i in PAIRED or i == overhead or np.ptp(features[:, i]) > 0)]


def fit_coefficients(features: np.ndarray, step_s: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """The coefficients minimising the relative error of ``predict(features, c)``
    against ``step_s`` (``prior``: the start, and the value of unidentifiable ones).

    When the free fit drops the weights' term (their read time is constant over the
    steps, so it cannot be told from the fixed step overhead), the weights' coefficient
    is profiled: the rest is fitted with it fixed at each of ``MEMORY_GRID`` multiples
    of the prior's, and the largest whose error is within ``MEMORY_TOLERANCE`` of the
    best wins (decode is memory-bound)."""
    if len(step_s) < 3:
        raise CalibrationError(f"{len(step_s)} steps are too few to fit (need at least 3)")
    index = np.arange(len(prior))
    starts = [prior * np.where(index == 0, k, 1.0) * np.where(index == 2, j, 1.0)
              for k in START_SCALES for j in START_SCALES]  # the fit is piecewise: several starts
    free = min((_fit(features, step_s, start, memory=None) for start in starts),
               key=lambda c: float(np.sum(percentage_errors(features, step_s, c) ** 2)))
    if free[0] > 0 and free[1] > 0:
        return free
    fits = [_fit(features, step_s, prior, memory=prior[0] * k) for k in MEMORY_GRID]
    errors = [float(np.sum(percentage_errors(features, step_s, c) ** 2)) for c in fits]
    best = min(errors)
    good = [c for c, e in zip(fits, errors) if e <= best * (1 + MEMORY_TOLERANCE) and c[1] > 0]
    if not good:
        raise CalibrationError("the fit left no compute term: are the steps all alike?")
    return max(good, key=lambda c: c[0])


def _fit(features: np.ndarray, step_s: np.ndarray, prior: np.ndarray, memory: float | None) -> np.ndarray:
    """The alternating fit of the module docstring; ``memory`` fixes the weights' coefficient."""
    identifiable = identifiable_columns(features)
    fixed = [i for i in range(len(FEATURES)) if i not in identifiable and i not in PAIRED]
    target = 1.0 - (features[:, fixed] @ prior[fixed]) / step_s
    coefficients = prior.astype(float).copy()
    if memory is not None:
        coefficients[0] = memory
    assignment = None
    for _ in range(MAX_ROUNDS):
        bounds = [features[:, a] * coefficients[a] >= features[:, b] * coefficients[b] for a, b in PAIRS]
        if assignment is not None and all(np.array_equal(x, y) for x, y in zip(bounds, assignment)):
            break
        assignment = bounds
        design = features.copy()
        for (a, b), bound in zip(PAIRS, bounds):
            design[:, a] = np.where(bound, features[:, a], 0.0)
            design[:, b] = np.where(bound, 0.0, features[:, b])
        goal = target
        if memory is not None:
            goal = target - design[:, 0] * memory / step_s
            design[:, 0] = 0.0
        columns = [i for i in identifiable if np.any(design[:, i] > 0)]
        weights = 1.0 / step_s
        coefficients[columns] = _nonnegative_lstsq(design[:, columns] * weights[:, None], goal)
    return coefficients


def percentage_errors(features: np.ndarray, step_s: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """Signed error of each predicted step, in percent of the measured one."""
    return (predict(features, coefficients) - step_s) / step_s * 100.0


SHARES = 5  # the first five coefficients are 1 / a share (memory, compute, KV, attention, network)
UNITS = (1e6, 1e6, 1e3, 1e6)  # the rest: seconds -> us, us, ms, us


def fitted_efficiencies(coefficients: np.ndarray, prior: Efficiencies, source: str,
                        fitted: set[int]) -> Efficiencies:
    """The coefficients as an :class:`Efficiencies` (fitted ones cite ``source``)."""
    values = [1 / c if c else 0.0 for c in coefficients[:SHARES]] + [
        c * unit for c, unit in zip(coefficients[SHARES:], UNITS)]
    names = [n for n in Efficiencies.model_fields if n not in ("fp8_memory", "kv_heads_half")]  # one per coefficient
    return prior.model_copy(update={
        name: Figure(value=float(v), source=source, assumed=False)
        for i, (name, v) in enumerate(zip(names, values)) if i in fitted})


def write_profile(profile: HardwareProfile, path: Path) -> None:
    """``profile`` as YAML (loadable by ``--hardware PATH``)."""
    data = profile.model_dump(mode="json", exclude_none=True)
    path.write_text("# written by python -m simulator calibrate\n" + yaml.safe_dump(data, sort_keys=False))


@dataclass(frozen=True)
class Fit:
    """A fitted profile and how well it fits the steps it was fitted on."""

    profile: HardwareProfile
    features: np.ndarray
    step_s: np.ndarray
    errors_pct: np.ndarray

    @property
    def mape(self) -> float:
        return float(abs(self.errors_pct).mean())


def fit_profile(times: StepTimes, hardware: HardwareProfile, arch: ModelArchitecture, *, file_name: str) -> Fit:
    """``hardware`` with its efficiencies fitted to ``times`` (a model of architecture
    ``arch``); the fitted figures cite ``file_name``, the steps, the engine and the MAPE."""
    model = StepTimeModel(arch, hardware, tensor_parallel=times.tensor_parallel_size, dtype=times.dtype)
    prefill, decode, context, seqs, step_s = times.columns()
    features = model.features(prefill, decode, context, seqs)
    coefficients = fit_coefficients(features, step_s, model.coefficients)
    errors = percentage_errors(features, step_s, coefficients)
    mape = float(abs(errors).mean())
    source = (f"fitted: python -m simulator calibrate {file_name} ({len(step_s)} steps, {times.model} "
              f"TP{times.tensor_parallel_size} {times.dtype}, vLLM {times.vllm_version}"
              f"{', ' + times.cpu_model if times.cpu_model else ''}; MAPE {mape:.1f}%)")
    efficiency = fitted_efficiencies(coefficients, hardware.efficiency, source, set(identifiable_columns(features)))
    return Fit(profile=hardware.model_copy(update={"efficiency": efficiency}), features=features, step_s=step_s,
               errors_pct=errors)
