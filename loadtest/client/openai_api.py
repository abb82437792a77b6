"""OpenAI request bodies for a session turn, and error classification (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from loadtest.analysis.records import ErrorKind
from loadtest.config import Endpoint, TargetConfig
from loadtest.workloads.base import Turn
from loadtest.workloads.synthetic import COMPLETION_SEPARATOR


def request_body(
    target: TargetConfig,
    *,
    system: str | None,
    history: Sequence[tuple[str, str]],
    turn: Turn,
    extra: Mapping[str, Any] | None = None,
    content: str | None = None,
) -> dict[str, Any]:
    """The JSON body for ``turn`` after ``history`` ((user, assistant) pairs), with the
    target's ``extra_body`` and then ``extra`` (a session's own fields) added as given
    (``stream_options`` merged); ``content`` replaces the turn's message (a fan-out branch)."""
    content = turn.content if content is None else content
    body: dict[str, Any] = {"model": target.model, "stream": target.stream}
    if target.endpoint is Endpoint.CHAT:
        messages = [] if system is None else [{"role": "system", "content": system}]
        for user, assistant in history:
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": assistant})
        messages.append({"role": "user", "content": content})
        body["messages"] = messages
    else:
        body["prompt"] = completion_prompt(system, history, content)
    if turn.max_tokens is not None:
        body["max_tokens"] = turn.max_tokens
        if target.exact_output:
            body["ignore_eos"] = True  # vLLM's extra parameter: generate until max_tokens
    if target.temperature is not None:
        body["temperature"] = target.temperature
    if target.stream:
        body["stream_options"] = {"include_usage": True}
    for fields in (target.extra_body, extra or {}):
        for key, value in fields.items():
            if key == "stream_options" and isinstance(value, dict):
                body[key] = {**body.get(key, {}), **value}
            else:
                body[key] = value
    return body


def request_model(target: TargetConfig, extra: Mapping[str, Any] | None) -> str:
    """The model a request names: its session's own ``model`` (a JSONL line's, or the
    model mix's), else the target's."""
    model = (extra or {}).get("model")
    return target.model if model is None else str(model)


def completion_prompt(system: str | None, history: Sequence[tuple[str, str]], content: str) -> str:
    """A plain-text prompt: the system text, then the transcript, then the new message."""
    if not history:
        return content if system is None else system + COMPLETION_SEPARATOR + content
    parts = [] if system is None else [system]
    for user, assistant in history:
        parts.append(f"User: {user}\nAssistant: {assistant}")
    parts.append(f"User: {content}\nAssistant:")
    return COMPLETION_SEPARATOR.join(parts)


def classify_status(status: int) -> ErrorKind | None:
    """The error kind of an HTTP status (``None`` for success)."""
    if status < 400:
        return None
    if status == 429:
        return ErrorKind.HTTP_429
    if status < 500:
        return ErrorKind.HTTP_4XX
    return ErrorKind.HTTP_5XX


MAX_RETRY_AFTER_S = 10.0
"""The longest a closed-loop user pauses on a ``Retry-After`` (the Locust user and the
simulator's model of it)."""


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds (HTTP dates are ignored)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_message(body: bytes, limit: int = 300) -> str:
    """A short message from an error body (OpenAI ``{"error": {"message"}}`` if present)."""
    text = body.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return text[:limit]
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:limit]
        if isinstance(error, str):
            return error[:limit]
        if parsed.get("message"):
            return str(parsed["message"])[:limit]
        if parsed.get("detail"):
            return str(parsed["detail"])[:limit]
    return text[:limit]
