"""Rate curves within one stage: the daily cycle and rate traces (arrivals per hour follow
the curve, the count is the curve's mean x duration, bad trace files are one-line
ConfigErrors, plans and profiles survive JSON without the file)."""

import numpy as np
import pytest
from pydantic import ValidationError

from loadtest.analysis.arrivals import schedule
from loadtest.errors import ConfigError
from loadtest.profiles import DailyCycle, OpenLoad, RateTrace, StagePlan, parse_profile
from loadtest.profiles.rate_curve import follow_curve, mean_rate, rate_at


def arrivals(load: OpenLoad, duration_s: float, seed: int = 0) -> np.ndarray:
    """The stage's schedule as the load tester and the simulator build it."""
    flat = schedule(start_rate=load.start_rate, end_rate=load.end_rate, burstiness=load.burstiness, seed=seed,
                    duration_s=duration_s)
    return load.follow_curve(flat, duration_s)


def expected_between(profile: DailyCycle, start_h: float, end_h: float, scale: float = 1.0) -> float:
    """Arrivals the cosine curve expects between two hours of the day (``scale``: run seconds per day second)."""
    hours = np.linspace(start_h, end_h, 2001)
    return float(np.trapezoid(profile.rate_at_hour(hours), hours * 3600.0 * scale))


def test_day_profile_is_one_open_stage_following_the_curve():
    profile = parse_profile("day:peak_rate=40,trough_rate=4,peak_at=14h")
    plan = profile.next_stage([])
    assert profile.next_stage([object()]) is None
    load = plan.load
    assert isinstance(load, OpenLoad) and load.rate_curve is not None and load.is_ramp
    assert load.start_rate == load.end_rate == pytest.approx(22.0, rel=1e-3)  # (peak + trough) / 2
    assert plan.offered_rate is None and plan.label == "day 4..40 req/s (peak at 14h)"
    assert rate_at(load.rate_curve, 14 * 3600.0, 86_400.0) == pytest.approx(40.0)
    assert rate_at(load.rate_curve, 2 * 3600.0, 86_400.0) == pytest.approx(4.0)


def test_arrivals_per_hour_match_the_daily_curve():
    profile = DailyCycle(peak_rate=4.0, trough_rate=0.4, peak_at=15 * 3600.0)
    load = profile.next_stage([]).load
    times = arrivals(load, 86_400.0, seed=3)
    assert len(times) == round(load.start_rate * 86_400.0)
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < 86_400.0
    counts = np.histogram(times, bins=24, range=(0.0, 86_400.0))[0]
    for hour, count in enumerate(counts):
        expected = expected_between(profile, hour, hour + 1)
        assert abs(count - expected) < 4 * np.sqrt(expected), (hour, count, expected)
    assert counts.argmax() == 14 and counts.argmin() in (2, 3)  # the hour after the peak at 15h, ~3h


def test_a_compressed_day_keeps_its_rates_and_shortens_its_hours():
    profile = DailyCycle(peak_rate=40.0, trough_rate=4.0)
    load = profile.next_stage([]).load
    times = arrivals(load, 7200.0, seed=1)  # one day in two hours: each hour of the day lasts 5 minutes
    assert profile.time_scale(7200.0) == pytest.approx(12.0)
    counts = np.histogram(times, bins=24, range=(0.0, 7200.0))[0]
    for hour, count in enumerate(counts):
        expected = expected_between(profile, hour, hour + 1, scale=1 / 12)
        assert abs(count - expected) < 4 * np.sqrt(expected), (hour, count, expected)


def test_several_days_repeat_the_cycle():
    load = DailyCycle(peak_rate=10.0, trough_rate=1.0, days=3).next_stage([]).load
    times = arrivals(load, 3 * 3600.0)
    per_day = np.histogram(times, bins=3, range=(0.0, 3 * 3600.0))[0]
    assert per_day.max() - per_day.min() < 4 * np.sqrt(per_day.mean())


def test_evenly_spaced_arrivals_on_a_linear_curve_match_the_ramp_schedule():
    knots = ((0.0, 2.0), (1.0, 6.0))
    flat = schedule(start_rate=mean_rate(knots), burstiness=None, seed=0, duration_s=10.0)
    ramp = schedule(start_rate=2.0, end_rate=6.0, burstiness=None, seed=0, duration_s=10.0)
    assert follow_curve(flat, knots, 10.0) == pytest.approx(ramp)


def test_a_step_trace_sends_nothing_while_its_rate_is_zero(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("time_s,rate\n# quiet first, then busy\n0,0\n600,5\n1200,1\n1800,0\n")
    profile = parse_profile(f"trace:path={path},interpolate=step")
    load = profile.next_stage([]).load
    assert load.start_rate == pytest.approx((0 + 5 + 1) / 3)
    times = arrivals(load, 1800.0, seed=2)  # real time: the trace spans 30 minutes
    assert profile.time_scale(1800.0) == 1.0
    counts = np.histogram(times, bins=3, range=(0.0, 1800.0))[0]
    assert counts[0] == 0
    assert abs(counts[1] - 3000) < 4 * np.sqrt(3000) and abs(counts[2] - 600) < 4 * np.sqrt(600)


def test_a_linear_trace_interpolates_between_rows(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("0,1\n100,9\n")
    load = parse_profile(f"trace:path={path}").next_stage([]).load
    times = arrivals(load, 100.0)
    assert len(times) == 500
    assert abs(np.sum(times < 50.0) - 150) < 4 * np.sqrt(150)  # integral of 1 + 0.08 t over [0, 50]


@pytest.mark.parametrize("content, fragment", [
    ("0,1\n10,abc\n", "line 2: time_s and rate must be numbers"),
    ("0,1\n10,2,3\n", "line 2: expected two columns"),
    ("0,1\n10,2\n5,3\n", "line 3: time_s 5 is not after the previous row's 10"),
    ("0,1\n10,-2\n", "line 2: time_s must be finite and rate finite and >= 0"),
    ("time_s,rate\n0,1\n", "needs at least two rows"),
    ("0,0\n10,0\n", "mean rate is 0"),
    ("", "needs at least two rows"),
])
def test_a_bad_trace_file_is_a_one_line_config_error(tmp_path, content, fragment):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        parse_profile(f"trace:path={path}")
    message = str(info.value)
    assert fragment in message and str(path) in message and "\n" not in message


def test_a_missing_trace_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read it"):
        parse_profile(f"trace:path={tmp_path / 'missing.csv'}")


def test_plans_and_profiles_survive_json_without_the_trace_file(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text("0,1\n60,3\n120,2\n")
    profile = parse_profile(f"trace:path={path},interpolate=step")
    plan = profile.next_stage([])
    path.unlink()
    assert RateTrace.model_validate_json(profile.model_dump_json()) == profile
    assert StagePlan.model_validate_json(plan.model_dump_json()) == plan


def test_an_open_load_with_a_curve_must_state_its_mean():
    knots = ((0.0, 1.0), (1.0, 3.0))
    assert OpenLoad(start_rate=2.0, end_rate=2.0, rate_curve=knots).is_ramp
    with pytest.raises(ValidationError, match="must be its mean"):
        OpenLoad(start_rate=3.0, end_rate=3.0, rate_curve=knots)
    with pytest.raises(ValidationError, match="from fraction 0 to 1"):
        OpenLoad(start_rate=2.0, end_rate=2.0, rate_curve=((0.0, 1.0), (0.5, 3.0)))


@pytest.mark.parametrize("spec, fragment", [
    ("day:peak_rate=4,trough_rate=8", "must not exceed peak_rate"),
    ("day:peak_rate=4,trough_rate=1,peak_at=25h", "peak_at"),
    ("day:trough_rate=1", "peak_rate"),
])
def test_bad_day_specs_are_config_errors(spec, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_profile(spec)
