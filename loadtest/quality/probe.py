"""Asking a target the probe's items over HTTP (httpx, a few threads), at temperature 0,
not streamed: any OpenAI-compatible chat endpoint."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
from pydantic import ValidationError

from loadtest.client.openai_api import error_message, request_body
from loadtest.config import TargetConfig
from loadtest.errors import ConfigError, TargetError
from loadtest.quality.grading import grade
from loadtest.quality.items import QualityItem
from loadtest.quality.results import ItemResult
from loadtest.workloads.base import Turn

DEFAULT_MAX_TOKENS = 48
"""Output tokens per answer unless an item sets its own: room for a short sentence."""


def probe_target(url: str, model: str, *, api_key: str | None = None, timeout_s: float = 120.0) -> TargetConfig:
    """The target as the probe asks it: chat, not streamed, temperature 0, answers that
    may stop at the end of sequence."""
    try:
        return TargetConfig(url=url, model=model, api_key=api_key, stream=False, exact_output=False,
                            temperature=0.0, request_timeout_s=timeout_s, scrape_metrics=False)
    except ValidationError as exc:
        raise ConfigError("; ".join(f"--{_option(e['loc'])}: {e['msg']}" for e in exc.errors())) from None


def _option(loc: tuple) -> str:
    """The command-line option of a :class:`TargetConfig` field."""
    return {"url": "target", "request_timeout_s": "timeout", "api_key": "api-key"}.get(loc[0] if loc else "", "target")


def check_target(target: TargetConfig) -> None:
    """Fail early, with one line, when the target is unreachable or does not serve the model."""
    try:
        response = httpx.get(f"{target.url}/v1/models", timeout=target.connect_timeout_s, headers=_headers(target))
    except httpx.HTTPError as exc:
        raise TargetError(f"cannot reach {target.url}: {exc}") from None
    if response.status_code in (401, 403):
        raise TargetError(f"{target.url} refused the API key (HTTP {response.status_code}): "
                          f"{error_message(response.content)}")
    if response.status_code != 200:
        return  # not every server lists its models; the answers will show errors if any
    try:
        served = [m.get("id") for m in response.json().get("data", [])]
    except (ValueError, AttributeError):
        return
    if served and target.model not in served:
        raise TargetError(f"{target.url} does not serve {target.model!r}; it serves {served}")


def ask_items(target: TargetConfig, items: Sequence[QualityItem], *, concurrency: int = 4,
              max_tokens: int = DEFAULT_MAX_TOKENS,
              progress: Callable[[ItemResult], None] | None = None) -> list[ItemResult]:
    """Ask every item (``concurrency`` at a time) and grade its reply; results in item order."""
    if concurrency < 1:
        raise ConfigError("--concurrency must be >= 1")
    if max_tokens < 1:
        raise ConfigError("--max-tokens must be >= 1")
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(target.request_timeout_s, connect=target.connect_timeout_s)
    with httpx.Client(timeout=timeout, limits=limits, headers=_headers(target)) as client:

        def one(item: QualityItem) -> ItemResult:
            result = _ask(client, target, item, item.max_tokens or max_tokens)
            if progress is not None:
                progress(result)
            return result

        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="quality") as pool:
            return list(pool.map(one, items))


def _ask(client: httpx.Client, target: TargetConfig, item: QualityItem, max_tokens: int,
         attempts: int = 3) -> ItemResult:
    body = request_body(target, system=item.system, history=item.shots,
                        turn=Turn(content=item.prompt, max_tokens=max_tokens))
    error = "no attempt"
    for attempt in range(attempts):
        try:
            response = client.post(f"{target.url}{target.endpoint.path}", json=body)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code == 200:
                reply = _content(response)
                if reply is None:
                    return _failed(item, "an answer without choices[0].message")
                graded = grade(item, reply)
                return ItemResult(id=item.id, category=item.category, correct=graded.correct, reply=reply,
                                  got=graded.got)
            error = f"HTTP {response.status_code}: {error_message(response.content)}"
            if response.status_code not in (429, 502, 503, 504):
                break  # a client error or a server bug: asking again gives the same answer
        time.sleep(0.5 * 2**attempt)
    return _failed(item, error)


def _failed(item: QualityItem, error: str) -> ItemResult:
    return ItemResult(id=item.id, category=item.category, correct=False, reply="", got="", error=error)


def _content(response: httpx.Response) -> str | None:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else ""


def _headers(target: TargetConfig) -> dict[str, str]:
    return {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
