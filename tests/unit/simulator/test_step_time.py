"""The step-time model: monotonic in the batch, TP helps a memory-bound decode, the fast
paths agree with the general formula, and the fit recovers known constants."""

import json

import numpy as np
import pytest

from serving.config.model_spec import ModelCatalog
from simulator.calibration import fit_coefficients, identifiable_columns, percentage_errors
from simulator.cli import main
from simulator.hardware import load_hardware
from simulator.step_time import StepShape, StepTimeModel, predict
from tests.paths import MODELS


def model(name="llama-3.3-70b-instruct", hardware="h200", tp=4, dtype="bfloat16"):
    return StepTimeModel(ModelCatalog(MODELS).get(name).architecture, load_hardware(hardware),
                         tensor_parallel=tp, dtype=dtype)


@pytest.mark.parametrize("field", ["prefill_tokens", "decode_seqs", "context_tokens"])
def test_step_time_grows_with_each_part_of_the_batch(field):
    m = model()
    base = dict(prefill_tokens=512, decode_seqs=32, context_tokens=32_000, num_seqs=33)
    times = [m.step_time(StepShape(**{**base, field: base[field] * k})) for k in (1, 2, 4)]
    assert times[0] < times[1] < times[2]


def test_tensor_parallel_shortens_a_memory_bound_decode_step():
    shape = StepShape(0, 8, 8000, 8)
    assert model(tp=8).step_time(shape) < model(tp=4).step_time(shape) < model(tp=2).step_time(shape)


def test_the_fast_paths_agree_with_the_general_formula():
    m = model()
    contexts = np.array([1000.0, 50_000.0, 400_000.0])
    general = predict(m.features(0, 64, contexts, 64), m.coefficients)
    assert np.allclose(m.decode_times(64, contexts), general)
    shape = StepShape(2048, 10, 9000, 12)
    assert m.step_time(shape) == pytest.approx(float(predict(m.features(2048, 10, 9000, 12), m.coefficients)))


def synthetic_steps(m, truth, rng, n=60):
    prefill = rng.integers(0, 4096, n) * (rng.random(n) < 0.5)
    decode = rng.integers(1, 200, n)
    prefill_seqs = (prefill > 0) * rng.integers(1, 4, n)
    context = decode * rng.integers(100, 3000, n)
    seqs = decode + prefill_seqs
    features = m.features(prefill, decode, context, seqs)
    return features, predict(features, truth), (prefill, decode, context, seqs)


def test_the_fit_recovers_known_constants_from_their_step_times():
    m = model(tp=4)
    # At one TP size the all-reduce counts are the same every step: their latencies cannot
    # be told from the step overhead, so they keep the profile's values (the truth here).
    truth = np.array([1 / 0.62, 1 / 0.47, 1 / 0.55, 1 / 0.4, 1 / 0.8, m.coefficients[5], m.coefficients[6],
                      2.5e-3, 6e-6])
    features, step_s, _ = synthetic_steps(m, truth, np.random.default_rng(1))
    assert identifiable_columns(features) == [0, 1, 2, 3, 4, 7, 8]
    start = m.coefficients * np.array([1.7, 0.6, 0.7, 1.5, 2.0, 1.0, 1.0, 3.0, 0.5])  # far from the truth
    fitted = fit_coefficients(features, step_s, start)
    known = [0, 1, 2, 4, 7, 8]  # attention never binds over these contexts: its share is a lower bound only
    assert np.allclose(fitted[known], truth[known], rtol=1e-6)
    assert np.abs(percentage_errors(features, step_s, fitted)).max() < 1e-6


def test_calibrate_writes_a_profile_with_the_fitted_efficiencies(tmp_path, capsys):
    m = model("smollm2-135m-instruct", "cpu", 1, "float32")
    truth = np.array([1 / 1.5, 1 / 4.0, 1 / 1.5, 1 / 4.0, 0.0, 0.0, 0.0, 7e-3, 2e-3])
    features, step_s, (p, d, c, s) = synthetic_steps(m, truth, np.random.default_rng(2))
    steps = [{"prefill_tokens": int(a), "decode_seqs": int(b), "context_tokens": int(x), "num_seqs": int(y),
              "step_s": float(t)} for a, b, x, y, t in zip(p, d, c, s, step_s)]
    data = {"schema": 1, "hardware": "cpu", "cpu_model": "fake", "model": "smollm2-135m-instruct",
            "tensor_parallel_size": 1, "dtype": "float32", "vllm_version": "0.32.0",
            "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "block_size": 128}, "steps": steps}
    source = tmp_path / "steps.json"
    source.write_text(json.dumps(data))
    out = tmp_path / "cpu-fitted.yaml"
    assert main(["calibrate", str(source), "--out", str(out)]) == 0
    fitted = load_hardware(out)
    assert fitted.efficiency.memory.value == pytest.approx(1.5, rel=1e-6)
    assert fitted.efficiency.compute.value == pytest.approx(4.0, rel=1e-6)
    assert fitted.efficiency.step_overhead_ms.value == pytest.approx(7.0, rel=1e-6)
    assert not fitted.efficiency.memory.assumed
    assert fitted.efficiency.network.assumed  # TP 1 says nothing about the all-reduce
    assert "MAPE 0.0%" in capsys.readouterr().out


def test_a_bad_step_time_file_is_a_usage_error(tmp_path):
    bad = tmp_path / "steps.json"
    bad.write_text('{"schema": 1}')
    assert main(["calibrate", str(bad), "--out", str(tmp_path / "x.yaml")]) == 2
