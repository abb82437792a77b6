"""``serving adapters``' hand-off with ``serving up``: the requested set is redeployed,
recorded, or refused with the reason (a fake cluster records deploys: no Ray here)."""

import json
import os
import signal
from pathlib import Path

import pytest

from serving import adapters_cli
from serving.config.loading import build_stack_config
from serving.config.model_spec import ModelCatalog
from serving.config.adapters import AdapterSpec
from serving.errors import ServeoutError
from serving.run_state import adapters_request_file, read_state, write_state

MODELS = Path(__file__).resolve().parents[3] / "models"
URL = "http://127.0.0.1:8000"


class FakeCluster:
    """Records the configs deployed (the real one redeploys the Serve app)."""

    def __init__(self) -> None:
        self.deployed = []

    def deploy(self, config):
        self.deployed.append(config)
        return URL


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEOUT_HOME", str(tmp_path))
    adapters = [{"name": "clinic", "path": str(tmp_path / "clinic"), "rank": 8}]
    return build_stack_config({"adapters": adapters}, catalog=ModelCatalog(MODELS),
                              resolve_path=lambda n: Path("/m") / n)


def request(adapters: list[dict], request_id: str = "r1") -> None:
    adapters_request_file().parent.mkdir(parents=True, exist_ok=True)
    adapters_request_file().write_text(json.dumps({"id": request_id, "adapters": adapters}))


def test_a_request_redeploys_the_stack_with_the_new_adapters_and_records_them(config, tmp_path):
    cluster = FakeCluster()
    request([{"name": "pharmacy", "path": str(tmp_path / "p")}, {"name": "clinic", "path": str(tmp_path / "c2")}])
    served = adapters_cli.apply_adapter_request(cluster, config, URL)
    assert served.adapter_names == ("pharmacy", "clinic")
    assert cluster.deployed == [served]
    assert served.model_dump(exclude={"adapters"}) == config.model_dump(exclude={"adapters"})
    state = read_state()
    assert (state["adapters_request"], state["adapters_error"]) == ("r1", None)
    assert [a["name"] for a in state["adapters"]] == ["pharmacy", "clinic"]


@pytest.mark.parametrize("adapters, reason", [
    ([{"name": "smollm2-135m-instruct", "path": "/a"}], "base model's name"),
    ([{"name": "x", "path": "/a"}, {"name": "x", "path": "/b"}], "declared twice"),
    ([{"name": "x", "path": "/a", "rank": 64}], "max_lora_rank"),
    ([{"name": "bad name!", "path": "/a"}], "pattern"),
])
def test_a_bad_set_is_refused_with_its_reason_and_nothing_is_deployed(config, adapters, reason):
    cluster = FakeCluster()
    request(adapters, "r2")
    assert adapters_cli.apply_adapter_request(cluster, config, URL) is config
    assert cluster.deployed == []
    state = read_state()
    assert state["adapters_request"] == "r2" and reason in state["adapters_error"]
    assert [a["name"] for a in state["adapters"]] == ["clinic"]  # unchanged


def test_the_command_side_waits_for_its_own_request_and_raises_the_refusal(config, monkeypatch):
    write_state(URL, config, netns=False)
    sent = []

    def fake_kill(pid, signum):  # stands for serving up: handles the request at once
        if signum == 0:
            return
        sent.append(signum)
        adapters_cli.apply_adapter_request(FakeCluster(), config, URL)

    monkeypatch.setattr(os, "kill", fake_kill)
    state = read_state()
    done = adapters_cli.request_adapters(state, [AdapterSpec(name="pharmacy", path="/p")], timeout_s=5)
    assert sent == [signal.SIGUSR1] and [a["name"] for a in done["adapters"]] == ["pharmacy"]
    with pytest.raises(ServeoutError, match="declared twice"):
        adapters_cli.request_adapters(state, [AdapterSpec(name="a", path="/p"), AdapterSpec(name="a", path="/q")],
                                      timeout_s=5)
