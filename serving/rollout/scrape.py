"""The gateway's ``/metrics`` text -> each model's :class:`VersionCounts` (pure).

Summed over endpoints and replicas (``gateway_replica``); an error is any status but
200 and 499 (the client went away) answered for that model (version)."""

from __future__ import annotations

from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from serving.rollout.evidence import Buckets, VersionCounts

REQUESTS = "serveout_requests_total"
TTFT = "serveout_time_to_first_token_seconds_bucket"
TPOT = "serveout_time_per_output_token_seconds_bucket"
IN_FLIGHT = "serveout_in_flight_requests"
NOT_ERRORS = frozenset({"200", "499"})


def version_counts(text: str, models: tuple[str, ...]) -> dict[str, VersionCounts]:
    """Each of ``models``' counts in one scrape (zeros for a model with no series)."""
    requests: dict[str, float] = defaultdict(float)
    errors: dict[str, float] = defaultdict(float)
    in_flight: dict[str, float] = defaultdict(float)
    hist: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    wanted = set(models)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            model = sample.labels.get("model")
            if model not in wanted:
                continue
            if sample.name == REQUESTS:
                requests[model] += sample.value
                if sample.labels.get("status") not in NOT_ERRORS:
                    errors[model] += sample.value
            elif sample.name in (TTFT, TPOT):
                hist[model, sample.name][float(sample.labels["le"])] += sample.value
            elif sample.name == IN_FLIGHT:
                in_flight[model] += sample.value
    return {m: VersionCounts(int(requests[m]), int(errors[m]), _buckets(hist.get((m, TTFT))),
                             _buckets(hist.get((m, TPOT))), int(in_flight[m])) for m in models}


def _buckets(edges: dict[float, float] | None) -> Buckets:
    return tuple(sorted(edges.items())) if edges else ()
