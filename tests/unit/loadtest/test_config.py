"""Config validation and summary persistence."""

import json

import pytest
from pydantic import ValidationError

from loadtest.analysis.slo import parse_slos
from loadtest.analysis.summary import SCHEMA_VERSION, load_summary
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from loadtest.errors import SummaryError
from loadtest.profiles import parse_profile
from loadtest.workloads import parse_workload

WORKLOAD = parse_workload("prompts")


def config(**kwargs):
    kwargs.setdefault("profile", parse_profile("concurrency:users=2"))
    kwargs.setdefault("workload", WORKLOAD)
    return LoadTestConfig(**kwargs)


def test_defaults_and_window():
    c = config(duration_s="1m", warmup_s="10s", cooldown_s=5)
    assert c.duration_s == 60 and c.measured_window == (10, 55)
    assert c.stage_time_limit_s == 60 + 120 + 5
    assert config(duration_s=None, max_requests=10).measured_window == (0, float("inf"))
    assert config(duration_s=None, max_requests=10).stage_time_limit_s == 600


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (dict(duration_s=None), "duration or a request count"),
        (dict(duration_s=10, warmup_s=6, cooldown_s=4), "shorter than the duration"),
        (dict(duration_s=None, max_requests=3, cooldown_s=1), "cool-down needs a duration"),
        (dict(duration_s=None, max_requests=3, profile=parse_profile("ramp:start_rate=1,end_rate=2")), "needs a duration"),
        (dict(profile=parse_profile("sweep")), "needs --slo"),
        (dict(target=TargetConfig(stream=False), slos=parse_slos("ttft_p95=1s")), "need streamed"),
        (dict(target=dict(url="localhost:8000")), "http://"),
    ],
)
def test_invalid_configs(kwargs, fragment):
    with pytest.raises(ValidationError, match=fragment):
        config(**kwargs)


def test_target_url_and_metrics_url():
    t = TargetConfig(url="http://127.0.0.1:8100/")
    assert t.url == "http://127.0.0.1:8100" and t.resolved_metrics_url == "http://127.0.0.1:8100/metrics"
    assert TargetConfig(scrape_metrics=False).resolved_metrics_url is None


def test_api_key_is_never_serialised():
    c = config(target=TargetConfig(api_key="sk-secret"))
    assert "sk-secret" not in c.model_dump_json() and "sk-secret" not in repr(c)


def test_config_round_trips_through_json():
    c = config(profile=parse_profile("sweep:rates=1,2"), slos=parse_slos("e2e_p95=2s"), duration_s=30)
    assert LoadTestConfig.model_validate_json(c.model_dump_json()) == c


def test_load_summary_errors(tmp_path):
    with pytest.raises(SummaryError, match="cannot read"):
        load_summary(tmp_path)
    (tmp_path / "summary.json").write_text("[]")
    with pytest.raises(SummaryError, match="not a JSON summary"):
        load_summary(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(SummaryError, match="schema version"):
        load_summary(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION}))
    with pytest.raises(SummaryError, match="does not match"):
        load_summary(tmp_path)


def test_generator_priority_defaults_to_realtime_on_run_and_worker(monkeypatch):
    from loadtest.cli import build_parser, config_from_args, main
    from loadtest.generator import child

    parser = build_parser()
    assert config_from_args(parser.parse_args(["run"])).generator.priority == "realtime"
    normal = config_from_args(parser.parse_args(["run", "--generator-priority", "normal"]))
    assert normal.generator.priority == "normal"
    assert LoadTestConfig.model_validate_json(normal.model_dump_json()).generator.priority == "normal"
    assert parser.parse_args(["worker", "--master", "h:1"]).generator_priority == "realtime"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--generator-priority", "high"])
    with pytest.raises(ValidationError, match="realtime"):
        GeneratorConfig(priority="high")
    served = []
    monkeypatch.setattr(child, "serve_master", lambda master, processes, **kw: served.append(kw["priority"]) or 0)
    assert main(["worker", "--master", "127.0.0.1:5557", "--generator-priority", "normal"]) == 0
    assert served == ["normal"]
