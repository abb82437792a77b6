"""The admin endpoint and the change it makes: a load is checked before anything is
deployed, deployed, probed and rolled back when the engines refuse it; only an admin
key may call it; every answer is an OpenAI error body or JSON. A fake cluster records
deploys and a fake probe stands for the engines (no Ray here); the HTTP test runs the
real server on loopback."""

import json
from pathlib import Path

import httpx
import pytest

from serving.admin.endpoint import AdminApi, serve_admin_api
from serving.admin.adapter_control import AdapterControl
from serving.admission.api_keys import KeyRing, parse_keys
from serving.config.loading import build_stack_config
from serving.config.model_spec import ModelCatalog
from serving.config.gateway import KeyLimits
from serving.errors import ConfigError, ServeoutError
from serving.run_state import request_headers
from tests.unit.serving.adapters.peft_folders import BASE, adapter

MODELS = Path(__file__).resolve().parents[4] / "models"
KEYS = "ops:sk-ops-0123456789abcdef admin\nclinic-app:sk-clinic-0123456789abcdef models=clinic\n"


class FakeCluster:
    """Records the configs deployed (the real one redeploys the Serve app)."""

    def __init__(self) -> None:
        self.deployed = []

    def deploy(self, config):
        self.deployed.append(config)


class Stack:
    """A control over a fake cluster serving ``clinic``; ``refuse``: what the fake
    engines answer a probe (None: they serve it)."""

    def __init__(self, tmp_path: Path, keys: str | None = None) -> None:
        model = tmp_path / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(BASE))
        self.clinic = adapter(tmp_path, name="clinic")
        config = build_stack_config({"adapters": [self.clinic.model_dump(mode="json")]},
                                    catalog=ModelCatalog(MODELS), resolve_path=lambda _: model)
        self.cluster, self.changes, self.probed, self.refuse = FakeCluster(), [], [], None
        self.control = AdapterControl(self.cluster, config, recipe=self._recipe, probe=self._probe,
                                      on_change=self.changes.append)
        ring = KeyRing(parse_keys(keys, defaults=KeyLimits())) if keys else None
        self.api = AdminApi(self.control, ring.identify if ring else None)
        self.tmp = tmp_path

    def _recipe(self, base, name):
        if name != "pharmacy":
            raise ConfigError(f"no adapter recipe {name!r}")  # as the model store says it
        return adapter(self.tmp, name="pharmacy")

    def _probe(self, name):
        self.probed.append(name)
        return self.refuse

    def call(self, method, path, body=None, key=None):
        raw = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
        return self.api.handle(method, path, f"Bearer {key}" if key else None, raw)


@pytest.fixture
def stack(tmp_path):
    return Stack(tmp_path)


OTHER = "tiny-llama-tp2-test"
TWO_BASES = {"replicas": {"num_replicas": 1, "cpus_per_rank": 1}, "gateway": {"mode": "separate"},
             "more_bases": [{"model": OTHER, "tensor_parallel_size": 1,
                             "replicas": {"num_replicas": 1, "cpus_per_rank": 1}}]}


@pytest.fixture
def two_bases(tmp_path):
    """A stack of two bases (the default model with ``clinic``, and the tiny test model)."""
    stack = Stack(tmp_path)
    data = {**TWO_BASES, "adapters": [stack.clinic.model_dump(mode="json")]}
    config = build_stack_config(data, catalog=ModelCatalog(MODELS), resolve_path=lambda _: tmp_path / "model")
    stack.control = AdapterControl(stack.cluster, config, recipe=stack._recipe, probe=stack._probe,
                                   on_change=stack.changes.append)
    stack.api = AdminApi(stack.control, None)
    return stack


def test_an_adapter_loads_on_the_base_named_and_lists_with_that_parent(two_bases, tmp_path):
    folder = str(adapter(tmp_path, name="tiny-docs").path)
    status, body = two_bases.call("POST", "/v1/load_lora_adapter",
                                  {"lora_name": "tiny-docs", "lora_path": folder, "base_model_name": OTHER})
    assert (status, body["parent"]) == (200, OTHER), body
    deployed = two_bases.cluster.deployed[-1]
    assert [b.adapter_names for b in deployed.bases] == [("clinic",), ("tiny-docs",)]
    listed = {a["id"]: a["parent"] for a in two_bases.call("GET", "/v1/lora_adapters")[1]["data"]}
    assert listed == {"clinic": deployed.model.name, "tiny-docs": OTHER}
    # A name served on one base is refused on the other; an unknown base is a 404 naming the bases.
    status, body = two_bases.call("POST", "/v1/load_lora_adapter",
                                  {"lora_name": "clinic", "lora_path": folder, "base_model_name": OTHER})
    assert status == 400 and "already served on" in body["error"]["message"]
    status, body = two_bases.call("POST", "/v1/load_lora_adapter",
                                  {"lora_name": "x", "lora_path": folder, "base_model_name": "gpt-9"})
    assert status == 404 and OTHER in body["error"]["message"] and body["error"]["param"] == "base_model_name"
    assert two_bases.call("POST", "/v1/load_lora_adapter", {"lora_name": OTHER, "lora_path": folder})[0] == 400


def test_an_unload_finds_the_adapter_on_whichever_base_serves_it(two_bases, tmp_path):
    folder = str(adapter(tmp_path, name="tiny-docs").path)
    two_bases.call("POST", "/v1/load_lora_adapter",
                   {"lora_name": "tiny-docs", "lora_path": folder, "base_model_name": OTHER})
    assert two_bases.call("POST", "/v1/unload_lora_adapter", {"lora_name": "tiny-docs"})[0] == 200
    assert [b.adapter_names for b in two_bases.cluster.deployed[-1].bases] == [("clinic",), ()]


def test_a_load_deploys_the_stack_with_the_adapter_probes_it_and_answers_its_entry(stack, tmp_path):
    folder = adapter(tmp_path, name="admin-docs").path
    status, body = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": "admin-docs", "lora_path": str(folder)})
    assert status == 200 and body["id"] == "admin-docs" and body["parent"] == stack.control.config.model.name
    assert [c.adapter_names for c in stack.cluster.deployed] == [("clinic", "admin-docs")]
    assert stack.changes == stack.cluster.deployed and stack.probed == ["admin-docs"]
    assert [a["id"] for a in stack.call("GET", "/v1/lora_adapters")[1]["data"]] == ["clinic", "admin-docs"]


def test_a_load_without_a_path_uses_the_model_specs_recipe(stack):
    status, body = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": "pharmacy"})
    assert status == 200 and body["path"].endswith("pharmacy")
    status, body = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": "nope"})
    assert status == 400 and "no adapter recipe 'nope'" in body["error"]["message"]


@pytest.mark.parametrize("config, reason", [({"use_dora": True}, "DoRA"), ({"r": 64}, "max_lora_rank"),
                                            ({"bias": "all"}, "bias terms")])
def test_a_folder_vllm_would_refuse_is_a_400_naming_it_and_nothing_is_deployed(stack, tmp_path, config, reason):
    folder = adapter(tmp_path, config, name="bad").path
    status, body = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": "bad", "lora_path": str(folder)})
    assert status == 400 and reason in body["error"]["message"] and "'bad'" in body["error"]["message"]
    assert body["error"]["param"] == "lora_path" and stack.cluster.deployed == []
    status, body = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": "gone", "lora_path": "/no/such"})
    assert status == 400 and "does not exist" in body["error"]["message"] and stack.cluster.deployed == []


def test_an_adapter_the_engines_refuse_is_rolled_back_and_the_reason_answered(stack, tmp_path):
    stack.refuse = "adapter 'x' was not loaded: out of memory"
    before = stack.control.config
    status, body = stack.call("POST", "/v1/load_lora_adapter",
                              {"lora_name": "x", "lora_path": str(adapter(tmp_path, name="x").path)})
    assert status == 400 and "out of memory" in body["error"]["message"]
    assert [c.adapter_names for c in stack.cluster.deployed] == [("clinic", "x"), ("clinic",)]
    assert stack.control.config == before


def test_loading_again_changes_nothing_and_another_folder_for_a_served_name_is_refused(stack, tmp_path):
    status, _ = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": "clinic", "lora_path": str(stack.clinic.path)})
    assert status == 200 and stack.cluster.deployed == []
    other = adapter(tmp_path, name="clinic2").path
    status, body = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": "clinic", "lora_path": str(other)})
    assert status == 400 and "unload it first" in body["error"]["message"] and stack.cluster.deployed == []
    base = stack.control.config.model.name
    status, body = stack.call("POST", "/v1/load_lora_adapter", {"lora_name": base, "lora_path": str(other)})
    assert status == 400 and "base model" in body["error"]["message"]


def test_an_unload_redeploys_without_it_and_an_unknown_name_is_a_404_listing_the_served(stack):
    status, body = stack.call("POST", "/v1/unload_lora_adapter", {"lora_name": "pharmacy"})
    assert status == 404 and "serves clinic" in body["error"]["message"]
    assert body["error"]["code"] == "model_not_found"
    status, body = stack.call("POST", "/v1/unload_lora_adapter", {"lora_name": "clinic"})
    assert (status, body["deleted"]) == (200, True)
    assert [c.adapter_names for c in stack.cluster.deployed] == [()]


@pytest.mark.parametrize("method, path, body, status", [
    ("POST", "/v1/load_lora_adapter", b"{not json", 400), ("POST", "/v1/load_lora_adapter", [1, 2], 400),
    ("POST", "/v1/load_lora_adapter", {"lora_path": "/x"}, 400),
    ("POST", "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/x", "rank": "8"}, 400),
    ("GET", "/v1/load_lora_adapter", None, 405), ("GET", "/v1/nothing", None, 404)])
def test_bad_requests_get_openai_error_bodies(stack, method, path, body, status):
    got, answer = stack.call(method, path, body)
    assert got == status and set(answer["error"]) == {"message", "type", "param", "code"}
    assert stack.cluster.deployed == []


def test_with_keys_only_an_admin_key_may_change_adapters(tmp_path):
    stack = Stack(tmp_path, KEYS)
    assert stack.call("GET", "/v1/lora_adapters")[0] == 401
    status, body = stack.call("GET", "/v1/lora_adapters", key="sk-clinic-0123456789abcdef")
    assert status == 403 and body["error"]["code"] == "permission_denied"
    assert stack.call("GET", "/v1/lora_adapters", key="sk-ops-0123456789abcdef")[0] == 200


def test_the_server_answers_over_http_with_json(stack):
    server = serve_admin_api(stack.api, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        listed = httpx.get(f"{url}/v1/lora_adapters", timeout=5)
        assert listed.status_code == 200 and listed.json()["data"][0]["id"] == "clinic"
        missing = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "x"}, timeout=5)
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/json"
        huge = httpx.post(f"{url}/v1/load_lora_adapter", content=b"x" * 70_000, timeout=5)
        assert huge.status_code == 413 and "error" in huge.json()
    finally:
        server.shutdown()


def test_the_cli_sends_the_first_admin_key_and_says_when_there_is_none(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(KEYS)
    state = {"api_keys_file": str(keys)}
    assert request_headers(state, admin=True) == {"Authorization": "Bearer sk-ops-0123456789abcdef"}
    keys.write_text("clinic-app:sk-clinic-0123456789abcdef\n")
    with pytest.raises(ServeoutError, match="no admin key"):
        request_headers(state, admin=True)
    assert request_headers({"api_keys_file": None}, admin=True) == {}
