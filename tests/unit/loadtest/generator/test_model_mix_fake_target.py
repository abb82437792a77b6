"""``--model-mix`` end to end against the FAKE OpenAI server (which lists a base and two
adapters and counts requests by the model they name): what is sent, recorded and
summarised per model, the same for the same seed; models it does not serve are refused
before any request."""

import json
from collections import Counter

import pytest

from loadtest import RunOptions, load_summary, parse_profile, parse_workload, run_load_test
from loadtest.analysis.records import read_records
from loadtest.cli import EXIT_FAILED, main
from loadtest.config import LoadTestConfig, TargetConfig
from loadtest.errors import TargetError
from loadtest.workloads.model_mix import parse_model_mix
from tests.unit.loadtest.fake_openai_server import BASE, FakeServer


@pytest.fixture()
def server():
    with FakeServer() as s:
        yield s


def config(server, path, mix, *, requests=40, seed=5):
    return LoadTestConfig(
        target=TargetConfig(url=server.url, model=BASE, scrape_interval_s=0.5),
        workload=parse_workload(f"jsonl:path={path},output_len=4"),
        profile=parse_profile("concurrency:users=4"),
        duration_s=None,
        max_requests=requests,
        seed=seed,
        model_mix=parse_model_mix(mix),
    )


def prompts(tmp_path, own_model: str | None = None):
    """Nine plain lines and, with ``own_model``, a tenth naming its own model."""
    lines = [{"prompt": f"question {i}"} for i in range(9)]
    if own_model is not None:
        lines.append({"prompt": "own", "model": own_model})
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_sessions_spread_over_the_mix_and_every_figure_follows(tmp_path, server):
    out = tmp_path / "out"
    summary = run_load_test(config(server, prompts(tmp_path, own_model="pharmacy"), "clinic=3,fake-model=1"),
                            RunOptions(out_dir=out))
    records = read_records(out / "records.jsonl")
    sent = Counter(r.model for r in records)
    assert sent == server.state.models  # recorded as the server received it
    # 40 sessions (one request each): the JSONL line naming pharmacy comes 4 times and keeps
    # it; the other 36 sessions split exactly 3:1
    assert sent == {"clinic": 27, "fake-model": 9, "pharmacy": 4}
    stage = summary.headline
    assert {m.model: (m.requests, m.errors) for m in stage.models} == {"clinic": (27, 0), "fake-model": (9, 0),
                                                                       "pharmacy": (4, 0)}
    assert [m.share for m in stage.models] == [27 / 40, 9 / 40, 4 / 40]
    assert all(m.ttft.count == m.requests and m.output_tokens_per_s for m in stage.models)
    assert "| `clinic` | 27 | 67.5% | 0 |" in (out / "report.md").read_text()
    assert load_summary(out) == summary and summary.config.model_mix == parse_model_mix("clinic=3,fake-model=1")
    # the same seed gives every session the same model
    again = tmp_path / "again"
    run_load_test(config(server, prompts(tmp_path, own_model="pharmacy"), "clinic=3,fake-model=1"),
                  RunOptions(out_dir=again))
    by_session = lambda rs: sorted((r.session, r.model) for r in rs)  # noqa: E731
    assert by_session(read_records(again / "records.jsonl")) == by_session(records)


def test_a_zipf_mix_follows_the_listed_order(tmp_path, server):
    summary = run_load_test(config(server, prompts(tmp_path), "zipf:1:2", requests=30))
    # the first two listed (the base, then clinic), shares 2/3 and 1/3
    assert server.state.models == {"fake-model": 20, "clinic": 10}
    assert [(m.model, m.requests) for m in summary.headline.models] == [("fake-model", 20), ("clinic", 10)]


@pytest.mark.parametrize(("mix", "says"), [("clinic=1,dentist=1", "does not serve 'dentist'"),
                                           ("zipf:1:4", "lists only 3 models")])
def test_models_the_target_does_not_serve_are_refused_before_any_load(tmp_path, server, mix, says):
    with pytest.raises(TargetError, match=says):
        run_load_test(config(server, prompts(tmp_path), mix))
    assert server.state.requests == 0
    code = main(["run", "--target", server.url, "--model", BASE, "--model-mix", mix, "--requests", "5",
                 "--workload", f"jsonl:path={prompts(tmp_path)}", "--out", str(tmp_path / "o"), "--quiet"])
    assert code == EXIT_FAILED and server.state.requests == 0
