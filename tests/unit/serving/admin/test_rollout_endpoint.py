"""``/v1/rollouts`` over the admin endpoint's routes with the rollout's own thread: bad
input refused with OpenAI errors while the stable version keeps serving, and the
sequence of configs deployed on abort, on a quality regression and on promotion. A
FAKE cluster records the deploys and a FAKE probe stands for the quality probe; the
stack's metrics are unreachable (no engine here), so no step is ever judged on traffic."""

import time

import httpx
import pytest
from prometheus_client import CollectorRegistry

from serving.admin.endpoint import AdminApi
from serving.admin.rollout_control import RolloutControl
from serving.admin.rollout_record import RolloutRecorder
from serving.config.rollout import TrafficSplit
from serving.config.tenancy import AuditSpec
from tests.unit.serving.adapters.peft_folders import adapter
from tests.unit.serving.admin.test_endpoint import Stack


class FakeProbe:
    """The quality probe's scores by version name."""

    def __init__(self, scores: dict[str, tuple[int, int]]) -> None:
        self.scores, self.asked = scores, []

    def __call__(self, plan, name):
        self.asked.append(name)
        return self.scores[name]


@pytest.fixture
def rollouts(tmp_path):
    stack = Stack(tmp_path)
    stack.registry, stack.probe = CollectorRegistry(), FakeProbe({"clinic": (38, 40), "clinic-v2": (37, 40)})
    stack.audit = tmp_path / "audit"
    recorder = RolloutRecorder(stack.registry, AuditSpec(enabled=True, dir=stack.audit), tmp_path)
    stack.rollouts = RolloutControl(stack.control, recorder, url="http://127.0.0.1:9", headers={},
                                    probe=stack.probe, poll_s=0.02)
    stack.api = AdminApi(stack.control, None, stack.rollouts, stack.registry)
    stack.canary = str(adapter(tmp_path, name="clinic-v2").path)
    return stack


def start(stack, **fields):
    return stack.call("POST", "/v1/rollouts", {"model": "clinic", "canary": "clinic-v2", "path": stack.canary,
                                               "drain_s": 0, **fields})


def wait_for(stack, phase):
    deadline = time.monotonic() + 10
    while (now := stack.call("GET", "/v1/rollouts")[1])["phase"] != phase:
        assert time.monotonic() < deadline, now
        time.sleep(0.02)
    return now


@pytest.mark.parametrize(("fields", "status", "words"), [
    ({"model": "radiology"}, 404, "not served"),
    ({"model": "smollm2-135m-instruct"}, 400, "base model"),
    ({"steps": [50, 25, 100]}, 400, "steps must increase"),
    ({"steps": [5, 50]}, 400, "last step"),
    ({"canary": "clinic"}, 400, "name of its own"),
    ({"judge": {"min_requests": 0}}, 400, "judge.min_requests"),
])
def test_bad_input_is_an_openai_error_and_deploys_nothing(rollouts, fields, status, words):
    code, body = start(rollouts, **fields)
    assert code == status and words in body["error"]["message"], body
    assert rollouts.cluster.deployed == []


def test_a_canary_the_engines_refuse_fails_the_rollout_and_the_stable_version_serves_on(rollouts):
    rollouts.refuse = "DoRA adapters are not supported"
    code, body = start(rollouts)
    assert code == 400 and "DoRA" in body["error"]["message"]
    assert rollouts.call("GET", "/v1/rollouts")[1]["phase"] == "failed"
    served = rollouts.cluster.deployed[-1]
    assert served.adapter_names == ("clinic",) and served.splits == ()


def test_a_canary_that_never_answers_is_refused_and_unloaded(rollouts):
    def silent(name):
        raise httpx.ReadTimeout("timed out")

    rollouts.control._probe = silent  # the engines take the adapter but never answer with it
    code, body = start(rollouts)
    assert code == 400 and "no answer" in body["error"]["message"], body
    assert rollouts.call("GET", "/v1/rollouts")[1]["phase"] == "failed"
    assert rollouts.cluster.deployed[-1].adapter_names == ("clinic",)


def test_a_second_rollout_is_refused_and_an_abort_drains_then_unloads_the_canary(rollouts):
    code, body = start(rollouts, quality={"enabled": False})
    assert code == 200 and body["phase"] == "stepping"
    code, body = start(rollouts)
    assert code == 400 and "is running" in body["error"]["message"]
    assert rollouts.call("POST", "/v1/rollouts/abort")[0] == 200
    status = wait_for(rollouts, "rolled_back")
    weights = [c.splits[0].canary_percent for c in rollouts.cluster.deployed if c.splits]
    assert weights == [5.0, 0.0]  # 5%, then none (the canary drains) ...
    final = rollouts.cluster.deployed[-1]
    assert final.adapter_names == ("clinic",) and final.splits == ()  # ... then it unloads
    assert "aborted by the operator" in status["reason"]
    assert any(e["phase"] == "rolled_back" for e in status["history"] if "phase" in e)
    assert "rolled_back" in next(rollouts.audit.glob("audit-rollout-*.jsonl")).read_text()
    metrics = rollouts.call("GET", "/metrics")[1]
    assert 'serveout_rollout_transitions_total{model="clinic",phase="rolled_back"} 1.0' in metrics


def test_a_worse_quality_score_rolls_back_before_the_canary_gets_a_request(rollouts):
    rollouts.probe.scores["clinic-v2"] = (2, 40)
    start(rollouts)
    status = wait_for(rollouts, "rolled_back")
    assert status["reason"].startswith("quality") and "2/40" in status["reason"]
    assert rollouts.probe.asked == ["clinic", "clinic-v2"]
    assert all(s.canary_percent == 0 for c in rollouts.cluster.deployed for s in c.splits)
    assert rollouts.cluster.deployed[-1].adapter_names == ("clinic",)


def test_a_promotion_leaves_the_public_name_on_the_new_adapter(rollouts):
    start(rollouts)
    assert rollouts.call("POST", "/v1/rollouts/promote")[0] == 200
    wait_for(rollouts, "promoted")
    final = rollouts.cluster.deployed[-1]
    assert final.adapter_names == ("clinic-v2",)
    assert final.splits == (TrafficSplit(name="clinic", stable="clinic-v2"),)
    assert "clinic" in final.served_names and final.alias_names == ("clinic",)
    assert rollouts.call("POST", "/v1/rollouts/promote")[0] == 400  # nothing left to promote
    rollouts.probe.scores["clinic-v3"] = (37, 40)
    code, body = start(rollouts, canary="clinic-v3")  # the next version, from the public name
    assert code == 200 and body["stable"] == "clinic-v2"
    assert not any("clinic-v2 beside clinic for" in e["line"] for e in body["history"])  # its own lines only
    rollouts.call("POST", "/v1/rollouts/abort")
    wait_for(rollouts, "rolled_back")
