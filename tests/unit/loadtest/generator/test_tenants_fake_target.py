"""Tenants end to end against the FAKE OpenAI server (which counts requests by their
``Authorization`` and ``X-Serveout-Priority-Class`` headers): every request carries its
tenant's key and class, in one process and with two workers; the reports name both
tenants and no key."""

import json
from collections import Counter

import pytest

from loadtest import RunOptions, load_summary, parse_profile, parse_workload, run_load_test
from loadtest.analysis.records import read_records
from loadtest.config import GeneratorConfig, LoadTestConfig, TargetConfig
from loadtest.workloads.tenant_mix import parse_tenants
from tests.fixtures import TINY_TOKENIZER
from tests.unit.loadtest.fake_openai_server import BASE, FakeServer

pytestmark = pytest.mark.timeout(300)

CHAT_KEY, BULK_KEY = "sk-fake-chat-0001", "sk-fake-bulk-0002"


@pytest.fixture()
def server():
    with FakeServer() as s:
        yield s


def config(server, tmp_path, workers: int) -> LoadTestConfig:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(8)))
    return LoadTestConfig(
        target=TargetConfig(url=server.url, model=BASE, scrape_metrics=False),
        workload=parse_workload(f"jsonl:path={path},output_len=4"),
        profile=parse_profile("concurrency:users=4"),
        duration_s=None,
        max_requests=40,
        seed=3,
        generator=GeneratorConfig(workers=workers),
        tenants=parse_tenants(["name=chat,key=env:FAKE_CHAT_KEY,class=interactive,weight=3,e2e_p95=30s",
                               f"name=bulk,key={BULK_KEY},class=batch,weight=1"]),
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_each_request_carries_its_tenant_s_key_and_class(tmp_path, server, monkeypatch, workers):
    monkeypatch.setenv("FAKE_CHAT_KEY", CHAT_KEY)
    out = tmp_path / "out"
    summary = run_load_test(config(server, tmp_path, workers), RunOptions(out_dir=out))
    records = read_records(out / "records.jsonl")
    by_tenant = Counter((r.tenant, r.priority_class) for r in records)
    assert by_tenant == {("chat", "interactive"): 30, ("bulk", "batch"): 10}  # 40 sessions of one request, 3:1
    assert server.state.callers == {(f"Bearer {CHAT_KEY}", "interactive"): 30, (f"Bearer {BULK_KEY}", "batch"): 10}
    stage = summary.headline
    assert [(t.tenant, t.priority_class, t.requests, t.errors) for t in stage.tenants] == [
        ("chat", "interactive", 30, 0), ("bulk", "batch", 10, 0)]
    assert stage.tenants[0].slo.passed is True and stage.tenants[1].slo.passed is None
    assert [c.priority_class for c in stage.classes] == ["interactive", "batch"]
    assert load_summary(out).stages == summary.stages  # (the config reads back with the literal key hidden)
    markdown = (out / "report.md").read_text()
    assert "| `chat` | interactive | 30 | 75.0% | 0 | 0 |" in markdown and "| `bulk` | batch | 10 |" in markdown
    for path in (p for p in out.rglob("*") if p.is_file()):
        text = path.read_bytes()
        assert CHAT_KEY.encode() not in text and BULK_KEY.encode() not in text, path


def test_without_an_api_key_the_model_check_and_metrics_use_the_first_tenant_s_key(tmp_path, server, monkeypatch):
    monkeypatch.setenv("FAKE_CHAT_KEY", CHAT_KEY)
    cfg = config(server, tmp_path, 1)
    cfg = cfg.model_copy(update={"target": cfg.target.model_copy(update={"scrape_metrics": True})})
    run_load_test(cfg, RunOptions(out_dir=tmp_path / "out"))
    assert server.state.get_auth[("/v1/models", f"Bearer {CHAT_KEY}")] >= 1  # a gateway with keys answers it
    assert server.state.get_auth[("/metrics", f"Bearer {CHAT_KEY}")] >= 1
    assert not [k for k in server.state.get_auth if k[1] is None]


def test_a_tenant_with_a_workload_of_its_own_sends_its_own_requests(tmp_path, server, monkeypatch):
    monkeypatch.setenv("FAKE_CHAT_KEY", CHAT_KEY)
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(f"- {{name: chat, key: 'env:FAKE_CHAT_KEY', class: interactive, weight: 3}}\n"
                       f"- {{name: bulk, key: {BULK_KEY}, class: batch, workload: 'random:input_len=300,output_len=8'}}\n")
    cfg = config(server, tmp_path, 1).model_copy(update={
        "tenants": parse_tenants(path=tenants), "tokenizer": TINY_TOKENIZER,
        "workload": parse_workload("random:input_len=16,output_len=4")})
    out = tmp_path / "out"
    run_load_test(cfg, RunOptions(out_dir=out, reports=("json",)))
    records = read_records(out / "records.jsonl")
    prompts = {t: sorted({r.expected_prompt_tokens for r in records if r.tenant == t}) for t in ("chat", "bulk")}
    outputs = {t: {r.requested_output_tokens for r in records if r.tenant == t} for t in ("chat", "bulk")}
    assert Counter(r.tenant for r in records) == {"chat": 30, "bulk": 10}
    assert max(prompts["chat"]) < 100 and min(prompts["bulk"]) >= 300, prompts  # the run's prompts, bulk's own
    assert outputs == {"chat": {4}, "bulk": {8}}
    assert server.state.callers[(f"Bearer {BULK_KEY}", "batch")] == 10
