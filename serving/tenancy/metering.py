"""The usage counters per API key and model (Prometheus; always on).

| name | type | labels |
| --- | --- | --- |
| serveout_usage_requests_total | counter | key, model |
| serveout_usage_prompt_tokens_total | counter | key, model, cached (true / false) |
| serveout_usage_output_tokens_total | counter | key, model |
| serveout_usage_engine_seconds_total | counter | key, model |
| serveout_usage_write_failures_total | counter | store (usage / audit) |
| serveout_usage_pending_records | gauge | |

``key`` is a key's name from the keys file (``anonymous`` without keys) and ``model`` a
served model id or ``unknown`` (a request naming no served model): bounded label sets,
never a key nor client input. Counting one request is a dictionary lookup and four
increments on the event loop.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from serving.tenancy.records import RequestRecord


class UsageMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("serveout_usage_requests", "Requests answered per API key name and model "
                                "(every status).", ["key", "model"], registry=registry)
        self.prompt_tokens = Counter("serveout_usage_prompt_tokens", "Prompt tokens per API key name and "
                                     "model, by whether the engine found them in its prefix cache.",
                                     ["key", "model", "cached"], registry=registry)
        self.output_tokens = Counter("serveout_usage_output_tokens", "Generated tokens per API key name and "
                                     "model.", ["key", "model"], registry=registry)
        self.engine_seconds = Counter("serveout_usage_engine_seconds", "Seconds requests spent from their "
                                      "hand-off to the engine to their end, per API key name and model.",
                                      ["key", "model"], registry=registry)
        self.write_failures = Counter("serveout_usage_write_failures", "Batches the usage store or the audit "
                                      "trail could not write (retried; serving goes on).", ["store"],
                                      registry=registry)
        self.pending = Gauge("serveout_usage_pending_records", "Records waiting for the next write.",
                             registry=registry)
        self._children: dict[tuple[str, str], tuple] = {}

    def count(self, r: RequestRecord) -> None:
        children = self._children.get((r.key, r.model))
        if children is None:
            children = self._children[(r.key, r.model)] = (
                self.requests.labels(r.key, r.model), self.prompt_tokens.labels(r.key, r.model, "true"),
                self.prompt_tokens.labels(r.key, r.model, "false"), self.output_tokens.labels(r.key, r.model),
                self.engine_seconds.labels(r.key, r.model))
        requests, cached, uncached, output, engine = children
        requests.inc()
        if r.prompt_tokens:
            hit = r.cached_tokens or 0
            if hit:
                cached.inc(hit)
            uncached.inc(r.prompt_tokens - hit)
        if r.output_tokens:
            output.inc(r.output_tokens)
        if r.engine_s:
            engine.inc(r.engine_s)

    def forget_children(self) -> None:
        """Drop the cached series handles (a keys file reload may remove names)."""
        self._children.clear()
