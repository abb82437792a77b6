"""Server-side timeline samples from a target's ``/metrics`` (pure).

Two vocabularies are understood: serveout's gateway (``serveout_*``) and a bare vLLM
server (``vllm:*``). When both are present the serveout names win. A metric the
target does not export leaves its field ``None``. Series carrying a ``model`` or
``model_name`` label are kept only when it names a tested model (``--model``, and every
model of a ``--model-mix``: serveout counts an adapter's tokens under its own name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence, Set as AbstractSet

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from pydantic import BaseModel, ConfigDict

from loadtest.errors import ParseError


class ServerSample(BaseModel):
    """One scrape of the target. ``t`` is seconds since the run started."""

    model_config = ConfigDict(frozen=True)

    t: float
    waiting: float | None = None
    running: float | None = None
    queue_depth: float | None = None
    kv_cache_usage: float | None = None
    kv_cache_usage_max: float | None = None
    replicas_ready: float | None = None
    replicas_desired: float | None = None
    in_flight: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None


Aggregate = Callable[[Sequence[float]], float]


def _sum(values: Sequence[float]) -> float:
    return float(sum(values))


def _mean(values: Sequence[float]) -> float:
    return float(sum(values)) / len(values)


def _max(values: Sequence[float]) -> float:
    return float(max(values))


# field -> ordered alternatives of (metric name, required labels, aggregate)
_SOURCES: dict[str, tuple[tuple[str, tuple[tuple[str, str], ...], Aggregate], ...]] = {
    "waiting": (
        ("serveout_engine_waiting_requests", (), _sum),
        ("vllm:num_requests_waiting", (), _sum),
    ),
    "running": (
        ("serveout_engine_running_requests", (), _sum),
        ("vllm:num_requests_running", (), _sum),
    ),
    "queue_depth": (("serveout_queue_depth", (), _sum),),
    "kv_cache_usage": (
        ("serveout_engine_kv_cache_usage", (), _mean),
        ("vllm:kv_cache_usage_perc", (), _mean),
        ("vllm:gpu_cache_usage_perc", (), _mean),
    ),
    "kv_cache_usage_max": (
        ("serveout_engine_kv_cache_usage", (), _max),
        ("vllm:kv_cache_usage_perc", (), _max),
        ("vllm:gpu_cache_usage_perc", (), _max),
    ),
    "replicas_ready": (("serveout_replicas", (("state", "ready"),), _sum),),
    "replicas_desired": (("serveout_replicas", (("state", "desired"),), _sum),),
    "in_flight": (("serveout_in_flight_requests", (), _sum),),
    "prompt_tokens_total": (
        ("serveout_prompt_tokens_total", (), _sum),
        ("vllm:prompt_tokens_total", (), _sum),
    ),
    "generation_tokens_total": (
        ("serveout_generation_tokens_total", (), _sum),
        ("vllm:generation_tokens_total", (), _sum),
    ),
    "prefix_cache_queries_total": (
        ("serveout_engine_prefix_cache_queries_total", (), _sum),
        ("vllm:prefix_cache_queries_total", (), _sum),
    ),
    "prefix_cache_hits_total": (
        ("serveout_engine_prefix_cache_hits_total", (), _sum),
        ("vllm:prefix_cache_hits_total", (), _sum),
    ),
}

KNOWN_METRICS = frozenset(name for options in _SOURCES.values() for name, _, _ in options)


def parse_samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition (sample names keep their ``_total``,
    ``_bucket``... suffixes); raises :class:`ParseError` on malformed text."""
    try:
        return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except ValueError as exc:
        raise ParseError(f"malformed metrics text: {exc}") from None


def extract_server_sample(samples: Iterable[Sample], *, t: float, model: str | AbstractSet[str]) -> ServerSample:
    """Aggregate one scrape into a :class:`ServerSample` for ``model`` (or several)."""
    models = {model} if isinstance(model, str) else model
    by_name: dict[str, list[Sample]] = {}
    for sample in samples:
        if sample.name not in KNOWN_METRICS:
            continue
        served = sample.labels.get("model", sample.labels.get("model_name"))
        if served is not None and served not in models:
            continue
        by_name.setdefault(sample.name, []).append(sample)
    values: dict[str, float | None] = {}
    for field, options in _SOURCES.items():
        values[field] = None
        for name, required, aggregate in options:
            matching = [
                s.value
                for s in by_name.get(name, ())
                if all(s.labels.get(k) == v for k, v in required)
            ]
            if matching:
                values[field] = aggregate(matching)
                break
    if values["queue_depth"] is None and values["waiting"] is not None and values["running"] is not None:
        values["queue_depth"] = values["waiting"] + values["running"]
    return ServerSample(t=t, **values)


def counter_delta(
    timeline: Sequence[ServerSample], field: str
) -> float | None:
    """Increase of a counter field between the first and last sample that carry it."""
    points = [getattr(s, field) for s in timeline if getattr(s, field) is not None]
    if len(points) < 2:
        return None
    return float(points[-1] - points[0])
