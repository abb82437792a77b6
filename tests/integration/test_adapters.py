"""LoRA adapters on the base model's replicas, for real: the two adapters made at set-up
(peft, models/adapters/*.jsonl) on the vLLM CPU engine, called by name with the official
OpenAI SDK; adapters changed at run time without an engine restart; a broken adapter
refused by name while everything else keeps serving; the admin endpoint over HTTP; a
rollout (``serving rollout``) that rolls a worse adapter back and promotes a good one
under traffic, losing no request."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest
from openai import OpenAI
from prometheus_client import CollectorRegistry

from serving.admin.endpoint import AdminApi, serve_admin_api
from serving.admin.adapter_control import AdapterControl, refusal
from serving.admin.quality_probe import probe_quality
from serving.admin.rollout_control import RolloutControl
from serving.admin.rollout_record import RolloutRecorder
from serving.config.rollout import RolloutPlan, TrafficSplit
from serving.config.tenancy import AuditSpec
from tests.integration.metrics_reading import samples, wait_until
from tests.integration.settings import MODEL, PORT, replicas
from tests.paths import REPO
from benchmarks.chaos import replica_pids

pytestmark = pytest.mark.integration

QUESTION = "What are your opening hours?"
ADAPTED = {"replicas": replicas(2), "gateway": {"max_in_flight": 24, "port": PORT},
           "adapters": ["clinic", "pharmacy"]}


@pytest.fixture(scope="module")
def lora_stack(stack):
    stack.ensure(ADAPTED)
    return stack


@pytest.fixture(scope="module")
def client(lora_stack) -> OpenAI:
    return OpenAI(base_url=f"{lora_stack.url}/v1", api_key="unused", timeout=120, max_retries=0)


def greedy(client: OpenAI, model: str, question: str = QUESTION) -> str:
    answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                            temperature=0, max_tokens=24)
    assert answer.model == model
    return answer.choices[0].message.content


def test_models_lists_the_base_and_each_adapter_with_its_parent(client):
    cards = {m.id: m for m in client.models.list().data}
    assert set(cards) == {MODEL, "clinic", "pharmacy"}
    assert cards[MODEL].parent is None and cards[MODEL].root == MODEL
    assert cards["clinic"].parent == MODEL and cards["pharmacy"].parent == MODEL
    assert "/" not in cards["clinic"].root  # no server path shown to clients


def test_each_adapter_answers_in_its_own_voice_and_unlike_the_base(client):
    base, clinic, pharmacy = (greedy(client, m) for m in (MODEL, "clinic", "pharmacy"))
    assert clinic.startswith("Clinic desk:"), clinic
    assert pharmacy.startswith("Pharmacist:"), pharmacy
    assert len({base, clinic, pharmacy}) == 3
    assert greedy(client, "clinic") == clinic  # greedy: the same answer again, on any replica


def test_an_adapter_streams_and_batches_beside_the_base(client):
    stream = client.chat.completions.create(model="pharmacy", messages=[{"role": "user", "content": QUESTION}],
                                            temperature=0, max_tokens=24, stream=True)
    chunks = list(stream)
    assert {c.model for c in chunks} == {"pharmacy"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Pharmacist:")


def test_every_replica_reports_its_adapters_in_host_memory_and_none_evicted(lora_stack, client):
    greedy(client, "clinic")

    def residency() -> dict[tuple[str, str], str]:
        return {(dict(k)["replica"], dict(k)["adapter"]): dict(k)["state"]
                for k in samples(lora_stack.url, "serveout_engine_adapter_residency")}

    seen = wait_until(lambda: len(residency()) == 4 and residency(), timeout_s=60)
    assert sorted(adapter for _, adapter in seen) == ["clinic", "clinic", "pharmacy", "pharmacy"], seen
    assert set(seen.values()) <= {"cached", "active"}, seen  # 2 adapters, 16 host slots: none evicted
    assert set(samples(lora_stack.url, "serveout_engine_adapter_evictions_total").values()) == {0.0}


def test_an_unknown_model_is_a_404_listing_what_is_served(client):
    with pytest.raises(openai.NotFoundError) as caught:
        greedy(client, "radiology")
    error = caught.value.body
    assert error["code"] == "model_not_found" and error["param"] == "model"
    for name in (MODEL, "clinic", "pharmacy"):
        assert name in error["message"]


def test_adapters_change_at_run_time_and_a_broken_one_is_refused_by_name(lora_stack, client, tmp_path):
    before = replica_pids(lora_stack.config.app_name)
    clinic = lora_stack.build(ADAPTED).adapters[0]
    (tmp_path / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8, "use_dora": true}')
    changed = {**ADAPTED, "adapters": [
        {"name": "clinic-v2", "path": str(clinic.path), "rank": 8},
        {"name": "dora", "path": str(tmp_path)},
        {"name": "missing", "path": str(tmp_path / "nowhere")},
    ]}
    lora_stack.ensure(changed)
    try:
        assert greedy(client, "clinic-v2").startswith("Clinic desk:")
        assert greedy(client, MODEL)  # the base serves throughout
        for name, reason in (("dora", "DoRA"), ("missing", "does not exist")):
            response = httpx.post(f"{lora_stack.url}/v1/chat/completions", timeout=60, json={
                "model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
            assert response.status_code == 404, response.text
            assert name in response.json()["error"]["message"] and reason in response.json()["error"]["message"]
        with pytest.raises(openai.NotFoundError):
            greedy(client, "pharmacy")  # removed
        assert replica_pids(lora_stack.config.app_name) == before  # no engine restarted
    finally:
        lora_stack.ensure(ADAPTED)


def test_the_admin_endpoint_loads_and_unloads_adapters_on_every_replica(lora_stack, client, tmp_path):
    before = replica_pids(lora_stack.config.app_name)
    control = AdapterControl(lora_stack.cluster, lora_stack.config, probe=lambda n: refusal(lora_stack.url, {}, n),
                             recipe=lambda base, n: lora_stack.store.adapters.spec(lora_stack.catalog.get(base), n))
    server = serve_admin_api(AdminApi(control, identify=None), "127.0.0.1", 0)
    admin = f"http://127.0.0.1:{server.server_address[1]}"
    clinic = lora_stack.config.adapters[0]
    (tmp_path / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8, "use_dora": true}')
    try:
        loaded = httpx.post(f"{admin}/v1/load_lora_adapter", timeout=300,
                            json={"lora_name": "clinic-v3", "lora_path": str(clinic.path)})
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["parent"] == MODEL
        assert "clinic-v3" in {m.id for m in client.models.list().data}
        for _ in range(4):  # whichever replica the router picks serves it
            assert greedy(client, "clinic-v3").startswith("Clinic desk:")
        refused = httpx.post(f"{admin}/v1/load_lora_adapter", timeout=60,
                             json={"lora_name": "dora", "lora_path": str(tmp_path)})
        assert refused.status_code == 400 and "DoRA" in refused.json()["error"]["message"]
        gone = httpx.post(f"{admin}/v1/unload_lora_adapter", timeout=300, json={"lora_name": "clinic-v3"})
        assert gone.status_code == 200, gone.text
        with pytest.raises(openai.NotFoundError):
            greedy(client, "clinic-v3")
        assert greedy(client, "pharmacy")  # the others served throughout
        assert replica_pids(lora_stack.config.app_name) == before  # no engine restarted
    finally:
        server.shutdown()
        lora_stack.config = control.config
        lora_stack.ensure(ADAPTED)


def test_a_rollout_rolls_a_worse_adapter_back_and_promotes_a_good_one_losing_nothing(lora_stack, client, tmp_path):
    clinic, pharmacy = (a.path for a in lora_stack.build(ADAPTED).adapters)
    control = AdapterControl(lora_stack.cluster, lora_stack.config, probe=lambda n: refusal(lora_stack.url, {}, n),
                             recipe=lambda base, n: lora_stack.store.adapters.spec(lora_stack.catalog.get(base), n))
    rollouts = RolloutControl(control, RolloutRecorder(CollectorRegistry(), AuditSpec(), tmp_path),
                              url=lora_stack.url, headers={}, poll_s=0.5,
                              probe=lambda plan, name: probe_quality(lora_stack.url, name, plan.quality))
    # 6 items: all right against all wrong is then outside the Wilson intervals' noise
    lines = (REPO / "models/adapters/clinic.jsonl").read_text().splitlines()
    questions = [json.loads(line)["user"] for line in lines[:6]]
    items = tmp_path / "clinic.jsonl"  # graded on agreeing with what clinic answers today
    items.write_text("".join(json.dumps({"id": f"q{i}", "category": "clinic", "source": "clinic's answer", "prompt": q,
                                         "max_tokens": 24, "answers": [greedy(client, "clinic", q)]}) + "\n"
                             for i, q in enumerate(questions)))
    answers: list[str] = []
    stop = threading.Event()

    def traffic(worker: int) -> None:  # sticky sessions on the public name, all along
        n = 0
        while not stop.is_set():
            n += 1
            try:
                answer = client.chat.completions.create(
                    model="clinic", messages=[{"role": "user", "content": QUESTION}], temperature=0, max_tokens=8,
                    extra_headers={"x-session-id": f"s{worker}-{n % 5}"})
                answers.append(answer.choices[0].message.content)
            except openai.OpenAIError as exc:  # a lost request: the assertion below names it
                answers.append(f"lost: {exc}")

    def finished(phase: str) -> dict:
        deadline = time.monotonic() + 120
        while (status := rollouts.status())["phase"] != phase:
            assert time.monotonic() < deadline and status["phase"] in ("loading", "stepping", "promoting",
                                                                     "rolling_back"), status
            time.sleep(0.2)
        return status

    workers = [threading.Thread(target=traffic, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    try:
        rollouts.start(RolloutPlan(model="clinic", canary="clinic-worse", path=pharmacy, drain_s=2,
                                   quality={"items": items, "limit": None}))
        status = finished("rolled_back")
        assert status["reason"].startswith("quality"), status
        assert control.config.adapter_names == ("clinic", "pharmacy") and control.config.splits == ()
        rollouts.start(RolloutPlan(model="clinic", canary="clinic-same", path=clinic, steps=(50, 100), drain_s=2,
                                   judge={"min_requests": 2, "step_timeout_s": 10}, quality={"enabled": False}))
        finished("promoted")
        assert control.config.splits == (TrafficSplit(name="clinic", stable="clinic-same"),)
        assert "clinic" not in control.config.adapter_names
        assert greedy(client, "clinic").startswith("Clinic desk:")  # the public name, now on clinic-same
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        lora_stack.config = control.config
        lora_stack.ensure(ADAPTED)
    assert len(answers) > 10 and all(a.startswith("Clinic desk:") for a in answers)  # none lost, none worse
