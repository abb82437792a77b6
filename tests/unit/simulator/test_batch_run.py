"""Batch runs and the fit on published figures: the replayed steps give the same times
as the step-time model, and the fit recovers constants that generated the figures."""

import numpy as np
import pytest

from serving.config.model_spec import ModelCatalog
from simulator.batch_run import run_batch
from simulator.hardware import load_hardware
from simulator.point_fit import FitPoint, fit_points
from simulator.step_time import StepTimeModel
from tests.paths import MODELS


def model(tp=1):
    arch = ModelCatalog(MODELS).get("llama-3.1-8b-instruct").architecture
    return StepTimeModel(arch, load_hardware("h100"), tensor_parallel=tp, dtype="bfloat16")


def batch(m, b=8, n=256, out=64):
    return run_batch(m, [n] * b, [out] * b, num_blocks=100_000, block_size=16, max_num_seqs=256,
                     max_num_batched_tokens=8192)


def test_a_batch_prefills_once_then_decodes_every_token():
    steps = batch(model())
    assert len(steps.features) == 64  # one prefill step (8 x 256 tokens fit the budget), 63 decode steps
    assert (steps.first_step == 0).all() and (steps.last_step == 63).all()
    figures = steps.figures(model().coefficients)
    assert figures["latency_s"] == pytest.approx(steps.step_ends(model().coefficients)[-1])
    assert figures["median_tpot_ms"] > 0


def test_a_longer_batch_takes_longer_and_tp_shortens_it():
    m = model()
    assert batch(m, out=128).figures(m.coefficients)["latency_s"] > batch(m).figures(m.coefficients)["latency_s"]
    m2 = model(tp=2)
    assert batch(m2).figures(m2.coefficients)["latency_s"] < batch(m).figures(m.coefficients)["latency_s"]


def test_the_fit_recovers_the_constants_behind_published_figures():
    m = model()
    truth = m.coefficients.copy()
    truth[[0, 7]] = [1 / 0.7, 3e-3]  # weights' share 0.7, 3 ms per step
    points = []
    for b in (1, 4, 16, 64):
        steps = batch(m, b=b)
        value = steps.figures(truth)["latency_s"]
        points.append(FitPoint(f"b{b}", steps, "latency_s", value, m.coefficients, {0: "memory", 7: "step"}))
    fit = fit_points(points, {"memory": 1.0, "step": 1e-3}, {"memory": (1.0, 20.0), "step": (1e-5, 1e-2)})
    assert fit.params["memory"] == pytest.approx(truth[0], rel=1e-3)
    assert fit.params["step"] == pytest.approx(truth[7], rel=1e-3)
    assert fit.rms_error < 1e-4


def test_a_fit_with_fewer_points_than_constants_is_refused():
    m = model()
    steps = batch(m)
    point = FitPoint("x", steps, "latency_s", 1.0, m.coefficients, {0: "a", 7: "b"})
    with pytest.raises(ValueError, match="cannot fit"):
        fit_points([point], {"a": 1.0, "b": 1.0})
    assert np.isfinite(point.predict({"a": 1.0, "b": 1e-3}))
