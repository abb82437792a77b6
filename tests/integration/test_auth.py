"""API keys on the real stack, with the official openai client: 401 without or with a
wrong key, 200 with a right one, 429 + Retry-After past a key's rpm, fair sharing of the
admission bound between a heavy key and a light one, a keys file changed on disk
taking effect without a restart and without cutting a stream, priority classes (a
request lowers its class, a raised or unknown one is refused, a keys file naming an
unknown class keeps the last good keys); OpenAI's rate-limit
headers (streamed, whole and on a 429), the usage store and the audit trail.

Two engine replicas serve HTTP themselves (the direct mode): each enforces half of the
app's bound and of every key's limits."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.metrics_reading import wait_until
from tests.integration.settings import BASE, MODEL, PORT

pytestmark = pytest.mark.integration

LIMIT = 8  # gateway.max_in_flight: 4 per replica, of which each of two active keys gets 2
KEYS = {"heavy": "sk-heavy-0123456789abcdef", "light": "sk-light-0123456789abcdef",
        "limited": "sk-limited-0123456789abcdef", "metered": "sk-metered-0123456789abcdef",
        "nightly": "sk-nightly-0123456789abcdef"}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}


KEYS_TEXT = ("# test keys\n"
             f"heavy:{KEYS['heavy']}\nlight:{KEYS['light']}\nlimited:{KEYS['limited']} rpm=2\n"
             f"metered:{KEYS['metered']} rpm=20 tpm=600\nnightly:{KEYS['nightly']} class=batch\n")


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("auth") / "keys.txt"
    path.write_text(KEYS_TEXT)
    return path


@pytest.fixture(scope="module")
def auth_stack(stack, keys_file):
    path = keys_file
    stack.ensure({"replicas": BASE["replicas"],
                  "gateway": {"port": PORT, "max_in_flight": LIMIT, "api_keys_file": str(path),
                              # the light key stays active through the whole fairness test
                              "fair_share_window_s": 120},
                  "usage": {"path": str(path.parent / "usage.sqlite"), "flush_interval_s": 0.2},
                  "audit": {"enabled": True, "dir": str(path.parent / "audit")}})
    return stack


def client(stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, timeout=120, max_retries=0)


def test_no_key_or_a_wrong_key_is_401_in_openais_shape(auth_stack):
    response = httpx.post(f"{auth_stack.url}/v1/chat/completions", json=CHAT, timeout=30)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError) as err:
        client(auth_stack, "sk-wrong-0123456789abcdef").chat.completions.create(**CHAT)
    assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
    for path in ("/metrics", "/status", "/v1/models"):
        assert httpx.get(f"{auth_stack.url}{path}", timeout=30).status_code == 401, path
    tokenize = httpx.post(f"{auth_stack.url}/tokenize", json={"model": MODEL, "prompt": "hi"}, timeout=30)
    assert tokenize.status_code == 401
    assert httpx.get(f"{auth_stack.url}/health", timeout=30).status_code == 200  # stays open


def test_a_right_key_is_served_and_counted_by_name(auth_stack):
    light = client(auth_stack, KEYS["light"])
    reply = light.chat.completions.create(**CHAT)
    assert reply.usage.completion_tokens > 0
    assert [m.id for m in light.models.list().data] == [MODEL]
    headers = {"Authorization": f"Bearer {KEYS['light']}"}

    def light_served() -> tuple[float, str]:
        metrics = httpx.get(f"{auth_stack.url}/metrics", headers=headers, timeout=30).text
        counted = [s for family in text_string_to_metric_families(metrics) for s in family.samples
                   if s.name == "serveout_key_requests_total" and s.labels.get("key") == "light"
                   and s.labels.get("status") == "200"]
        return sum(s.value for s in counted), metrics

    # By the key's name (one series per replica; each publishes its series about once a second).
    assert wait_until(lambda: light_served()[0] >= 1, timeout_s=20)
    assert all(key not in light_served()[1] for key in KEYS.values())


def test_past_a_keys_rpm_is_429_with_retry_after(auth_stack):
    limited = client(auth_stack, KEYS["limited"])
    served = 0
    with pytest.raises(openai.RateLimitError) as err:
        for _ in range(3):  # rpm=2 for the app (1 per replica): the third at the latest is refused
            limited.chat.completions.create(**CHAT)
            served += 1
    assert 1 <= served <= 2
    assert err.value.code == "rate_limit_exceeded"
    assert 1 <= int(err.value.response.headers["retry-after"]) <= 60
    headers = err.value.response.headers  # the 429 says where the budget stands
    assert headers["x-ratelimit-limit-requests"] == "1"  # rpm=2, half on each replica
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"].endswith("s")
    assert "x-ratelimit-limit-tokens" not in headers  # the key has no tpm


def test_a_heavy_key_cannot_starve_a_light_one(auth_stack):
    """Heavy: 6 concurrent senders; light: 2 (a third of it) against a bound of 4. Each
    sender sends 5 requests one after another, waiting Retry-After after a 429."""
    # Fair share is per replica: make the light key active on both before the contest.
    served_by = set()
    for _ in range(20):
        raw = client(auth_stack, KEYS["light"]).chat.completions.with_raw_response.create(**CHAT)
        served_by.add(raw.headers["x-serveout-replica"])
        if len(served_by) == 2:
            break
    assert len(served_by) == 2, served_by
    counts: Counter[tuple[str, int]] = Counter()
    reasons: Counter[tuple] = Counter()

    async def sender(name: str) -> None:
        async with openai.AsyncOpenAI(base_url=f"{auth_stack.url}/v1", api_key=KEYS[name],
                                      timeout=120, max_retries=0) as api:
            for _ in range(5):
                try:
                    await api.chat.completions.create(**CHAT)
                    counts[name, 200] += 1
                except openai.RateLimitError as exc:
                    counts[name, 429] += 1
                    reasons[name, exc.message[:90]] += 1
                    await asyncio.sleep(int(exc.response.headers["retry-after"]))
                except openai.APIStatusError as exc:
                    counts[name, exc.status_code] += 1

    async def contest() -> None:
        await asyncio.gather(*(sender("heavy") for _ in range(6)), *(sender("light") for _ in range(2)))

    asyncio.run(asyncio.wait_for(contest(), timeout=300))
    figures = {f"{name} {status}": n for (name, status), n in sorted(counts.items())}
    print(f"fairness (bound {LIMIT}; heavy 6 senders x 5, light 2 x 5): {figures}; refusals {dict(reasons)}")
    assert counts["light", 200] == 10, figures  # every light request admitted
    assert counts["heavy", 429] > 0, figures  # the heavy key takes the refusals
    assert set(status for _, status in counts) <= {200, 429}, figures


def test_a_request_may_lower_its_class_never_raise_it_and_a_bad_class_keeps_the_keys(auth_stack, keys_file):
    nightly, light = client(auth_stack, KEYS["nightly"]), client(auth_stack, KEYS["light"])
    assert nightly.chat.completions.create(**CHAT).usage.completion_tokens > 0  # its class: batch
    lower = {"X-Serveout-Priority-Class": "sheddable"}
    assert light.chat.completions.create(**CHAT, extra_headers=lower).usage.completion_tokens > 0
    with pytest.raises(openai.PermissionDeniedError) as err:
        nightly.chat.completions.create(**CHAT, extra_headers={"X-Serveout-Priority-Class": "interactive"})
    assert err.value.code == "permission_denied" and "may not raise" in str(err.value)
    with pytest.raises(openai.BadRequestError) as err:
        nightly.chat.completions.create(**CHAT, extra_headers={"X-Serveout-Priority-Class": "urgent"})
    assert err.value.param == "X-Serveout-Priority-Class"
    headers = {"Authorization": f"Bearer {KEYS['light']}"}

    def series(name: str) -> dict[tuple, float]:
        text = httpx.get(f"{auth_stack.url}/metrics", headers=headers, timeout=30).text
        found: dict[tuple, float] = {}
        for s in (s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name):
            label = (s.labels.get("priority_class"), s.labels.get("reason"))
            found[label] = found.get(label, 0.0) + s.value
        return found

    assert {c for c, _ in series("serveout_class_in_flight_requests")} >= {"interactive", "batch", "sheddable"}
    # A keys file naming an unknown class is refused: the replicas keep the last good keys.
    try:
        keys_file.write_text(KEYS_TEXT + "extra:sk-extra-0123456789abcdef class=urgent\n")
        assert wait_until(lambda: sum(series("serveout_keys_reload_failures_total").values()) >= 1,
                          timeout_s=20, period_s=0.5)
        assert nightly.chat.completions.create(**CHAT).usage.completion_tokens > 0
        with pytest.raises(openai.AuthenticationError):
            client(auth_stack, "sk-extra-0123456789abcdef").models.list()
    finally:
        keys_file.write_text(KEYS_TEXT)


def test_a_changed_keys_file_takes_effect_without_a_restart_or_a_cut_stream(auth_stack, keys_file):
    new_key = "sk-rotated-0123456789abcdef"
    light = client(auth_stack, KEYS["light"])
    stream = light.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a long story."}], max_tokens=96,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = iter(stream)
    next(chunks)  # under way
    try:
        keys_file.write_text(KEYS_TEXT.replace(f"heavy:{KEYS['heavy']}", f"rotated:{new_key}"))

        def rotated() -> bool:
            try:
                client(auth_stack, new_key).models.list()
                return True
            except openai.AuthenticationError:
                return False

        assert wait_until(rotated, timeout_s=30, period_s=0.5), "the new key was never accepted"
        def removed() -> bool:
            try:
                client(auth_stack, KEYS["heavy"]).models.list()
                return False
            except openai.AuthenticationError:
                return True

        # Every replica re-reads the file (each within a few seconds of the change).
        assert all(wait_until(removed, timeout_s=30, period_s=0.5) for _ in range(8)), "the removed key works"
        assert all(rotated() for _ in range(8))
        usage = [c.usage for c in chunks if c.usage]
        assert usage and usage[0].completion_tokens == 96  # the stream under way completed
    finally:
        keys_file.write_text(KEYS_TEXT)


def test_rate_limit_headers_on_whole_and_streamed_answers_then_usage_and_audit(auth_stack, keys_file):
    """The metered key (rpm=20, tpm=600: each replica enforces half, refilling slowly
    enough that a request's own decrement shows) gets OpenAI's
    headers on a whole answer and before a stream's first frame; the usage store then
    holds exactly the tokens the answers reported, `serving usage` shows them, and the
    audit trail verifies."""
    from serving.tenancy.audit_files import verify_path
    from serving.tenancy.usage_store import UsageStore

    api = client(auth_stack, KEYS["metered"])
    reported = {"requests": 0, "tokens": 0}
    for _ in range(3):
        raw = api.chat.completions.with_raw_response.create(**CHAT)
        headers, usage = raw.headers, raw.parse().usage
        assert headers["x-ratelimit-limit-requests"] == "10"
        assert headers["x-ratelimit-limit-tokens"] == "300"
        assert int(headers["x-ratelimit-remaining-requests"]) < 10  # this one was counted (1 refills in 6 s)
        assert int(headers["x-ratelimit-remaining-tokens"]) < 300  # charged its usage (5 refill per second)
        assert headers["x-ratelimit-reset-requests"].endswith("s")
        reported["requests"] += 1
        reported["tokens"] += usage.total_tokens
    with httpx.stream("POST", f"{auth_stack.url}/v1/chat/completions", timeout=60,
                      headers={"Authorization": f"Bearer {KEYS['metered']}"},
                      json={**CHAT, "stream": True, "stream_options": {"include_usage": True}}) as response:
        assert response.status_code == 200
        assert response.headers["x-ratelimit-limit-tokens"] == "300"  # before the first frame
        # streamed: the reservation (prompt + max_tokens) is what the budget holds back
        assert int(response.headers["x-ratelimit-remaining-tokens"]) < 300
        frames = [line for line in response.iter_lines() if line.startswith("data: {")]
    import json
    streamed = json.loads(frames[-1][6:])["usage"]
    reported["requests"] += 1
    reported["tokens"] += streamed["total_tokens"]

    store_path = keys_file.parent / "usage.sqlite"

    def stored() -> dict:
        if not store_path.exists():
            return {}
        rows = [r for r in UsageStore(store_path, read_only=True).rows(0) if r.key == "metered"]
        return {"requests": sum(r.usage.requests for r in rows),
                "tokens": sum(r.usage.prompt_tokens + r.usage.output_tokens for r in rows)}

    assert wait_until(lambda: stored() == reported, timeout_s=20), (stored(), reported)
    from serving.cli import main
    assert main(["usage", "--since", "1h", "--by", "key,model", "--store", str(store_path)]) == 0
    audit = keys_file.parent / "audit"
    verdicts, broken = verify_path(audit)
    assert broken is None, broken
    assert main(["audit", "verify", str(audit)]) == 0
    text = "".join(open(v.file).read() for v in verdicts)
    assert text.count('"key":"metered"') >= 4 and '"status":429' in text  # the limited key's refusal too
    assert "Say hi" not in text  # no content by default
