"""Property-based fuzzing of the gateway's HTTP API (issue 12, "hostile input").

Bodies come from the request models' JSON schemas (gateway_fuzz_strategies.py). The
app runs in-process (httpx.ASGITransport) over a FAKE engine client and the real
tokenizer; no network, Ray or engine. Properties:

- valid bodies of every route are served: 200 and well-formed (JSON, or SSE ending
  in ``[DONE]``);
- hostile bodies and hostile HTTP (methods, paths, headers, content types, sizes)
  never give a 5xx, and every 4xx carries ``{"error": {message, type, param, code}}``;
- whatever reaches the engine is a request the installed vLLM accepts: serveout's own
  builder of its ``SamplingParams`` (serving.engine.vllm_engine), then vLLM's own input
  checks (its ``InputProcessor``, set up from serveout's engine arguments; no engine
  started) and the msgpack transport to its engine core. vLLM is imported by this
  module only (about 6 s, once, when the first test needs it).

The budget is fixed and derandomized: CI runs the same cases every time. Each test
prints (``pytest -s``) and records (``record_property``) its case count and statuses.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from serving.admission.bound import AdmissionController
from serving.api.app import build_http_app
from serving.api.request_id import request_id_from
from serving.config.model_spec import ModelCatalog
from serving.engine.protocol import GenerationRequest
from serving.gateway.metrics import GatewayMetrics
from serving.gateway.service import GatewayService, ServedModel
from serving.openai.schemas import ChatCompletionRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest
from serving.openai.validation import GREEDY_TEMPERATURE
from tests.fakes import FakeEngineClient
from tests.paths import MODELS
from tests.unit.serving.gateway.gateway_fuzz_strategies import TEXT, damaged, encode, hostile, valid

MODEL = "smollm2-135m-instruct"
MAX_MODEL_LEN = 2048
MAX_BODY_BYTES = 16_384
VALID_EXAMPLES, HOSTILE_EXAMPLES, TRANSPORT_EXAMPLES = 100, 300, 300
CHAT, COMPLETIONS, TOKENIZE, DETOKENIZE = "/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"
ROUTES = {CHAT: ChatCompletionRequest, COMPLETIONS: CompletionRequest,
          TOKENIZE: TokenizeRequest, DETOKENIZE: DetokenizeRequest}


def vllm_refusal(default_model_path):
    """A check of a request as serveout's engine replica hands it to the installed vLLM:
    it returns what vLLM refuses (None: accepted). Set up from serveout's own engine
    arguments for the fuzzed model (its context, vocabulary, max_logprobs, grammar
    backend); nothing is started."""
    from vllm.inputs import TokensPrompt
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.serial_utils import MsgpackEncoder

    from serving.engine.vllm_engine import engine_args, sampling_params

    spec = ModelCatalog(MODELS).get(MODEL)
    front = InputProcessor(engine_args(spec, default_model_path, spec.engine).create_engine_config())
    encoder = MsgpackEncoder()

    def refusal(request: GenerationRequest) -> str | None:
        try:
            prompt = TokensPrompt(prompt_token_ids=list(request.prompt_token_ids))
            core_request = front.process_inputs(request.request_id, prompt, sampling_params(request), ("generate",))
            encoder.encode(core_request)
        except Exception as exc:  # whatever vLLM raises, the request fails in the engine replica
            return f"{type(exc).__name__}: {exc}"
        return None

    return refusal


def broken_promises(request: GenerationRequest) -> list[str]:
    """serveout's own promises about what reaches the engine, where vLLM is more lenient:
    the whole answer fits the context (vLLM would cut it short), no grammar with
    ``ignore_eos`` (past the grammar's end the text would be unconstrained), and
    OpenAI's range of logit biases (vLLM takes any float)."""
    s = request.sampling
    rules = {
        "prompt + max_tokens fit the context": len(request.prompt_token_ids) + s.max_tokens <= MAX_MODEL_LEN,
        "no ignore_eos with a grammar": s.guided is None or not s.ignore_eos,
        "logit_bias within [-100, 100]": all(-100 <= b <= 100 for _, b in s.logit_bias),
    }
    return [rule for rule, holds in rules.items() if not holds]


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    content: bytes
    headers: dict = field(default_factory=lambda: {"content-type": "application/json"})


@dataclass
class Gateway:
    """The app over the fake engine, driven from one event loop."""

    runner: asyncio.Runner
    client: httpx.AsyncClient
    engine: FakeEngineClient
    vocab_size: int
    vllm_refusal: Callable[[GenerationRequest], str | None]
    statuses: Counter = field(default_factory=Counter)  # of every case sent

    def send(self, case: Case) -> httpx.Response:
        self.engine.last = None
        response = self.runner.run(self.client.request(case.method, case.path, content=case.content,
                                                       headers=case.headers))
        self.statuses[response.status_code] += 1
        return response


@pytest.fixture(scope="module")
def gateway(tokenizer, default_model_path):
    registry, engine = CollectorRegistry(), FakeEngineClient(words=("fuzz", " ok", "."))
    served = ServedModel(MODEL, MAX_MODEL_LEN, tokenizer, engine, AdmissionController(4))
    service = GatewayService([served], GatewayMetrics(registry), request_timeout_s=60)
    app = build_http_app(service, registry=registry, max_body_bytes=MAX_BODY_BYTES,
                         status=lambda: {"fake": True})
    with asyncio.Runner() as runner:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")
        gw = Gateway(runner, client, engine, tokenizer.vocab_size, vllm_refusal(default_model_path))
        yield gw
        runner.run(client.aclose())
    print(f"\nfuzz gateway: {gw.statuses.total()} fuzz cases, {server_errors(gw.statuses)} 5xx")


def server_errors(statuses: Counter) -> int:
    return sum(n for status, n in statuses.items() if status >= 500)


# --- bodies -------------------------------------------------------------------------

def _overrides(vocab_size: int) -> dict[str, dict]:
    """What the schema cannot say: the served model, the vocabulary, the context, and
    the validator-only rule that stop strings are non-empty."""
    budget = st.none() | st.integers(8, 64)
    stop_string = st.text(TEXT, min_size=1, max_size=8)
    stop = st.none() | stop_string | st.lists(stop_string, max_size=4)
    ids = st.lists(st.integers(0, vocab_size - 1), min_size=1, max_size=64)
    bias = st.none() | st.dictionaries(st.integers(0, vocab_size - 1).map(str), st.floats(-100, 100), max_size=4)
    sampling = {"model": st.just(MODEL), "max_tokens": budget, "min_tokens": st.integers(0, 8), "stop": stop,
                "logit_bias": bias}
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {
        "type": "integer", "maximum": 9}}}, "required": ["a"]}
    formats = st.none() | st.sampled_from([
        {"type": "text"}, {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}}])
    return {
        # The fuzzed model has no tool format: tools are the hostile cases' business.
        CHAT: {**sampling, "max_completion_tokens": budget, "response_format": formats, "tools": st.none(),
               "tool_choice": st.none() | st.just("none")},
        COMPLETIONS: {**sampling, "prompt": st.text(TEXT, min_size=1, max_size=200) | ids},
        TOKENIZE: {"model": st.just(MODEL)},
        DETOKENIZE: {"model": st.just(MODEL), "tokens": ids},
    }


def _coherent(body: dict) -> dict:
    """The cross-field rules: stream_options needs stream; greedy sampling gives one choice;
    top_logprobs needs logprobs; a grammar ends the answer (no ignore_eos); each role's
    message shape (tool turns answer a call id, assistant calls carry JSON arguments)."""
    if body.get("stream_options") is not None:
        body["stream"] = True
    if body.get("temperature", 1.0) < GREEDY_TEMPERATURE:
        body["n"] = 1
    if body.get("top_logprobs") is not None:
        body["logprobs"] = True
    if (body.get("response_format") or {}).get("type", "text") != "text":
        body["ignore_eos"] = False
    for message in body.get("messages") or ():
        if message.get("role") != "assistant":
            message.pop("tool_calls", None)
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = "{}"
        if message.get("content") is None and not message.get("tool_calls"):
            message["content"] = "x"
        if message.get("role") == "tool" and not message.get("tool_call_id"):
            message["tool_call_id"] = "call_1"
    return body


def valid_bodies(path: str, vocab_size: int) -> st.SearchStrategy[dict]:
    schema = ROUTES[path].model_json_schema()
    bodies = valid(schema, overrides=_overrides(vocab_size)[path])
    if path == TOKENIZE:  # exactly one of prompt and messages
        bodies = st.one_of(bodies.map(lambda b: {**b, "prompt": b.get("prompt") or "x", "messages": None}),
                           bodies.filter(lambda b: b.get("messages") is not None)
                           .map(lambda b: {**b, "prompt": None}))
    return bodies.map(_coherent)


# --- what every answer must look like ---------------------------------------------

def check(gw: Gateway, case: Case, response: httpx.Response, *, served: bool) -> None:
    """The answer's properties; ``served``: the case must get a 200."""
    status = response.status_code
    assert status < 500, f"{status} for {case}: {response.text[:500]}"
    assert status == 200 or not served, f"{status} for {case}: {response.text[:500]}"
    assert request_id_from(response.headers.get("x-request-id")) == response.headers["x-request-id"]
    if 400 <= status < 500 and case.method != "HEAD":
        body = response.json()
        assert list(body) == ["error"] and set(body["error"]) == {"message", "type", "param", "code"}, body
        error = body["error"]
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["type"], str)
        assert all(error[k] is None or isinstance(error[k], str) for k in ("param", "code")), body
    if gw.engine.last is not None:
        refused = gw.vllm_refusal(gw.engine.last)
        assert refused is None, f"the installed vLLM refuses {gw.engine.last} from {case}: {refused}"
        broken = broken_promises(gw.engine.last)
        assert not broken, f"serveout let through {broken} in {case}"
    if status != 200 or case.method != "POST":
        return
    path = response.request.url.path
    if path in (CHAT, COMPLETIONS):
        assert gw.engine.last is not None, "a 200 completion the engine never saw"
        _check_completion(response, chat=path == CHAT, n=gw.engine.last.sampling.n)
    elif path == TOKENIZE:
        body = response.json()
        assert body["count"] == len(body["tokens"]) and all(isinstance(t, int) for t in body["tokens"])
    elif path == DETOKENIZE:
        assert isinstance(response.json()["prompt"], str)


def _check_completion(response: httpx.Response, *, chat: bool, n: int) -> None:
    kind = "chat.completion" if chat else "text_completion"
    if not response.headers["content-type"].startswith("text/event-stream"):
        body = response.json()
        assert body["object"] == kind and [c["index"] for c in body["choices"]] == list(range(n))
        assert all(c["finish_reason"] in ("stop", "length") for c in body["choices"])
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        return
    events = response.text.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]", response.text[-200:]
    assert all(e.startswith("data: ") for e in events[:-1])
    chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(c.get("object") == (f"{kind}.chunk" if chat else kind) for c in chunks), chunks
    finished = [ch["index"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert sorted(finished) == list(range(n)) and all(
        ch["finish_reason"] in ("stop", "length") for c in chunks for ch in c["choices"] if ch["finish_reason"])


def fuzz(gw: Gateway, name: str, cases: st.SearchStrategy[Case], max_examples: int, record_property,
         *, served: bool = False) -> Counter:
    """Run ``check`` on ``max_examples`` derandomized cases; record and print the tally."""
    statuses: Counter = Counter()

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example, HealthCheck.filter_too_much])
    @given(case=cases)
    def run(case: Case) -> None:
        response = gw.send(case)
        statuses[response.status_code] += 1
        check(gw, case, response, served=served)

    run()
    tally = dict(sorted(statuses.items()))
    record_property("fuzz_cases", statuses.total())
    record_property("fuzz_statuses", tally)
    print(f"\nfuzz {name}: {statuses.total()} fuzz cases, {server_errors(statuses)} 5xx, statuses {tally}")
    return statuses


# --- the properties -----------------------------------------------------------------

@pytest.mark.parametrize("path", list(ROUTES))
def test_valid_bodies_are_served(gateway, path, record_property):
    bodies = valid_bodies(path, gateway.vocab_size)
    cases = st.builds(lambda body, ascii_only: Case("POST", path, encode(body, ascii_only=ascii_only)),
                      bodies, st.booleans())
    fuzz(gateway, f"valid {path}", cases, VALID_EXAMPLES, record_property, served=True)


@pytest.mark.parametrize("path", list(ROUTES))
def test_hostile_bodies_are_client_errors(gateway, path, record_property):
    schema = ROUTES[path].model_json_schema()
    bodies = hostile(valid_bodies(path, gateway.vocab_size), schema)
    raw = st.builds(lambda body, ascii_only: encode(body, ascii_only=ascii_only), bodies, st.booleans())
    cases = raw.flatmap(damaged).map(lambda content: Case("POST", path, content))
    statuses = fuzz(gateway, f"hostile {path}", cases, HOSTILE_EXAMPLES, record_property)
    assert any(400 <= s < 500 for s in statuses), statuses  # the fuzzer did reach the refusals


PATHS = [*ROUTES, "/v1/models", "/health", "/status", "/metrics", "/", "/v1", "/v1/chat/completions/",
         "//v1/completions", "/v1/completions?stream=true", "/tokenize/../detokenize", "/%00", "/%ff",
         "/docs", "/openapi.json", f"/v1/models/{MODEL}", "/" + "a" * 5000]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "FUZZ"]
HEADER_BYTES = st.binary(max_size=64) | st.sampled_from([b"", b"\r\n", b"\x00", b"x" * 8000, "é".encode()])
HEADERS = st.fixed_dictionaries({}, optional={
    "content-type": st.sampled_from([b"application/json", b"text/plain", b"application/x-www-form-urlencoded",
                                     b"multipart/form-data; boundary=x", b"application/json; charset=utf-16"])
    | HEADER_BYTES,
    "x-request-id": HEADER_BYTES | st.text(TEXT, max_size=140).map(str.encode),
    "authorization": st.sampled_from([b"Bearer", b"Bearer ", b"Basic Zm9vOmJhcg==", b"Bearer " + b"k" * 5000])
    | HEADER_BYTES,
    "x-session-id": HEADER_BYTES,
    # Real HTTP servers (h11, httptools) refuse a Content-Length that is not ASCII digits
    # before the app sees it; read_body also survives ones int() cannot parse.
    "content-length": st.text("0123456789", min_size=1, max_size=40) | st.just("9" * 5000) | st.just("²".encode()),
    "accept": st.sampled_from([b"text/event-stream", b"*/*", b"application/xml"]) | HEADER_BYTES,
})


def test_hostile_http_is_never_a_server_error(gateway, record_property):
    def body_for(path: str) -> st.SearchStrategy[bytes]:
        shaped = st.just(b"{}")
        if path in ROUTES:
            shaped = valid_bodies(path, gateway.vocab_size).map(lambda b: encode(b, ascii_only=True))
        return st.one_of(shaped, st.binary(max_size=256), st.just(b""), st.just(b" " * (MAX_BODY_BYTES + 1)))

    printable = st.characters(min_codepoint=33, max_codepoint=126)  # httpx refuses the rest in a URL
    paths = st.sampled_from(PATHS) | st.text(printable, max_size=30).map("/{}".format)
    methods = st.sampled_from(["GET", "POST"]) | st.sampled_from(METHODS)
    # The body is shaped for some route, not always the one it is sent to.
    cases = st.builds(lambda method, path, headers, content: Case(method, path, content, headers),
                      methods, paths, HEADERS, paths.flatmap(body_for))
    statuses = fuzz(gateway, "hostile HTTP", cases, TRANSPORT_EXAMPLES, record_property)
    assert any(400 <= s < 500 for s in statuses) and 200 in statuses, statuses
