"""The error band: computed from validation errors, read back from its file, printed
beside simulated answers, and raising a flag only for margins inside it."""

import pytest

from loadtest.analysis.slo import Metric, Objective, ObjectiveResult, Stat
from simulator.accuracy import (AccuracyBand, ACCURACY_FILE, band_for, capacity_flag, load_bands, margin_flags,
                                simulated_label, write_bands)


def band(pct=7.0):
    return AccuracyBand(band_pct=pct, median_abs_pct=3.0, max_abs_pct=20.0, points=24, sources=("a", "b"),
                        measured_on="h100")


def verdict(observed, threshold=0.05, metric=Metric.TPOT):
    objective = Objective(metric=metric, stat=Stat.P95, threshold=threshold)
    return ObjectiveResult(objective=objective, observed=observed, passed=observed <= threshold)


def test_the_band_is_the_p90_of_the_absolute_errors():
    b = AccuracyBand.of([1, -2, 3, -4, 5, 6, -7, 8, 9, -50], sources=["x"], measured_on="h100")
    assert b.points == 10 and b.median_abs_pct == 5.5 and b.max_abs_pct == 50
    assert b.band_pct == pytest.approx(13.1)


def test_bands_round_trip_through_their_file(tmp_path):
    path = tmp_path / "accuracy.yaml"
    write_bands(path, {"h100": band()})
    assert load_bands(path) == {"h100": band()}
    assert band_for("some/dir/h100.yaml", path) == band()
    assert band_for("b300", path) is None


def test_the_committed_file_has_a_band_for_each_hopper_profile():
    bands = load_bands(ACCURACY_FILE)
    assert {"h100", "h200"} <= set(bands)
    assert all(b.points >= 20 for b in bands.values())


def test_the_label_carries_the_band_or_says_it_is_not_measured():
    assert simulated_label("h200", band()).startswith("SIMULATED on h200, +-7% on 24 published points")
    assert "not measured" in simulated_label("b300", None)


def test_only_a_margin_inside_the_band_is_flagged():
    assert margin_flags([verdict(0.048)], band())  # 4% under
    assert margin_flags([verdict(0.052)], band())  # 4% over
    assert not margin_flags([verdict(0.040)], band())  # 20% under
    assert not margin_flags([verdict(0.048)], None)
    assert not margin_flags([verdict(0.0098, 0.01, Metric.ERROR_RATE)], band())  # a share, not a latency


def test_a_plan_is_flagged_when_the_traffic_is_near_the_next_replica():
    assert capacity_flag(20.0, 21.0, band()) is not None  # 5% below the step
    assert capacity_flag(20.0, 25.0, band()) is None
    assert capacity_flag(20.0, None, band()) is None
