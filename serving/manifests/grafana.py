"""A Grafana dashboard (JSON model) for one deployment.

Rows: traffic (requests by status, rejections, TTFT and latency quantiles, tokens/s,
in-flight against the admission bound), replicas and queue, engines per replica
(waiting, running, KV cache, prefix-cache hit rate, tokens/s), routing (decisions,
requests per replica), API keys (per key, when the gateway has keys) and Ray nodes
(CPU, and GPU use on GPU specs). Every query is filtered to this deployment; the
data source is a dashboard variable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.config.model_spec import AcceleratorKind
from serving.config.stack import RoutingPolicyName, StackConfig
from serving.manifests.promql import Selectors

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
HALF, FULL, HEIGHT = 12, 24, 8
MIB = 1024 * 1024
"""``ray_node_gram_*`` are MiB (Ray's reporter divides NVML's bytes by 1024**2, and its
own dashboard multiplies them back); Grafana's ``bytes`` unit is IEC."""

# The policies that route on prefixes, and the prefix of their decision labels.
PREFIX_DECISIONS = {RoutingPolicyName.PREFIX_AFFINITY: "prefix", RoutingPolicyName.CACHE_AWARE: "cache"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """One time-series panel."""

    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    max_value: float | None = None
    threshold: float | None = None


@dataclass
class _Layout:
    """Places rows and half-width panels top to bottom (pure bookkeeping)."""

    panels: list[dict] = field(default_factory=list)
    y: int = 0
    column: int = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                            "gridPos": {"h": 1, "w": FULL, "x": 0, "y": self.y},
                            "id": len(self.panels) + 1})
        self.y += 1

    def add(self, panel: Panel) -> None:
        self.panels.append(_timeseries(panel, len(self.panels) + 1,
                                       {"h": HEIGHT, "w": HALF, "x": self.column * HALF, "y": self.y}))
        self.column += 1
        if self.column == 2:
            self._newline()

    def _newline(self) -> None:
        if self.column:
            self.y += HEIGHT
            self.column = 0


def render_grafana_dashboard(config: StackConfig) -> dict:
    """The dashboard JSON model (import it, or provision it from a ConfigMap)."""
    s = Selectors.of(config)
    layout = _Layout()
    for title, panels in _rows(config, s):
        layout.row(title)
        for panel in panels:
            layout.add(panel)
    return {
        "uid": f"serveout-{s.rayservice}"[:40],
        "title": f"serveout: {config.model.name} ({config.app_name})",
        "description": _summary(config),
        "tags": ["serveout", config.model.accelerator.value],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{
            "name": "datasource", "label": "Prometheus", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1,
        }]},
        "annotations": {"list": []},
        "panels": layout.panels,
    }


def _summary(config: StackConfig) -> str:
    scaling = config.autoscaling
    replicas = (f"autoscaling {scaling.min_replicas}..{scaling.max_replicas}" if scaling.enabled
                else f"{config.replicas.num_replicas} replicas")
    return (f"{config.model.name}: tensor parallel {config.model.tensor_parallel_size} on "
            f"{config.model.accelerator.value}, {replicas}, routing {config.routing.policy.value}")


def _quantiles(histogram: str, selector: str) -> tuple[Query, ...]:
    return tuple(
        Query(f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{selector}[5m])))",
              f"p{round(q * 100)}")
        for q in (0.5, 0.95)
    )


def _rows(config: StackConfig, s: Selectors) -> list[tuple[str, list[Panel]]]:
    g, e, r = s.gateway(), s.engine(), s.ray()
    traffic = [
        Panel("Requests/s by status", (Query(
            f"sum by (status) (rate(serveout_requests_total{g}[1m]))", "{{status}}"),), "reqps"),
        Panel("Rejections/s by reason", (Query(
            f"sum by (reason) (rate(serveout_rejected_requests_total{g}[1m]))", "{{reason}}"),),
            "reqps", "Requests refused with 429: overloaded / fair_share (the server is full), "
            "rpm / tpm / concurrency (an API key's own limits)."),
        Panel("Time to first token", _quantiles("serveout_time_to_first_token_seconds", g), "s"),
        Panel("Request latency", _quantiles("serveout_request_latency_seconds", g), "s"),
        Panel("Tokens/s", (
            Query(f"sum(rate(serveout_generation_tokens_total{g}[1m]))", "generated"),
            Query(f"sum(rate(serveout_prompt_tokens_total{g}[1m]))", "prompt"),
        ), "short"),
        Panel("In-flight requests", (Query(f"sum(serveout_in_flight_requests{g})", "in flight"),),
              "short", "Admitted and unfinished; the line is gateway.max_in_flight.",
              threshold=config.gateway.max_in_flight),
    ]
    queue = [Query(f"sum(serveout_queue_depth{e})", "engine waiting + running")]
    if config.autoscaling.enabled:
        ready = s.gateway(state="ready")
        queue.append(Query(
            f"sum(serveout_replicas{ready}) * {config.autoscaling.target_queue_per_replica:g}",
            "autoscaling target"))
    replicas = [
        Panel("Replicas", (Query(f"max by (state) (serveout_replicas{g})", "{{state}}"),), "short",
              "desired = ready + starting as Serve reports them."),
        Panel("Queue depth", tuple(queue), "short"),
    ]
    engines = [
        Panel("Waiting per replica", (Query(
            f"serveout_engine_waiting_requests{e}", "{{replica}}"),), "short"),
        Panel("Running per replica", (Query(
            f"serveout_engine_running_requests{e}", "{{replica}}"),), "short",
            threshold=config.max_ongoing_per_replica),
        Panel("KV cache use per replica", (Query(
            f"serveout_engine_kv_cache_usage{e}", "{{replica}}"),), "percentunit", max_value=1),
        Panel("Prefix-cache hit rate per replica", (Query(
            f"sum by (replica) (rate(serveout_engine_prefix_cache_hits_total{e}[5m]))"
            f" / sum by (replica) (rate(serveout_engine_prefix_cache_queries_total{e}[5m]))",
            "{{replica}}"),), "percentunit", "Prompt tokens found in the engine's prefix cache.",
            max_value=1),
        Panel("Generated tokens/s per replica", (Query(
            f"sum by (replica) (rate(serveout_engine_generation_tokens_total{e}[1m]))",
            "{{replica}}"),), "short"),
    ]
    routing = [
        Panel("Routing decisions/s", (Query(
            f"sum by (decision) (rate(serveout_routing_decisions_total{e}[1m]))", "{{decision}}"),),
            "reqps", f"Policy: {config.routing.policy.value}."),
        Panel("Routed requests/s per replica", (Query(
            f"sum by (replica) (rate(serveout_routed_requests_total{e}[1m]))", "{{replica}}"),),
            "reqps"),
    ]
    family = PREFIX_DECISIONS.get(config.routing.policy)
    if family is not None:  # the share of requests sent where the policy knew a prefix of theirs
        deployment = s.deployment.replace('"', '\\"')
        routing.append(Panel("Prefix hit rate at routing time", (Query(
            f'sum(rate(serveout_routing_decisions_total{{deployment="{deployment}",decision="{family}_hit"}}[5m]))'
            f' / sum(rate(serveout_routing_decisions_total{{deployment="{deployment}",decision=~"{family}_.*"}}[5m]))',
            "hit rate"),), "percentunit", max_value=1))
    nodes = [Panel("Ray node CPU use", (Query(f"ray_node_cpu_utilization{r}", "{{pod}}"),), "percent")]
    if config.model.accelerator is not AcceleratorKind.CPU:
        nodes += [
            Panel("GPU use", (Query(f"ray_node_gpus_utilization{r}", "{{pod}} gpu {{GpuIndex}}"),),
                  "percent"),
            Panel("GPU memory used", (Query(f"ray_node_gram_used{r} * {MIB}",
                                            "{{pod}} gpu {{GpuIndex}}"),), "bytes",
                  "Ray reports GPU memory in MiB; shown in bytes (IEC units)."),
        ]
    rows = [("Traffic", traffic), ("Replicas and queue", replicas), ("Engines", engines),
            ("Routing", routing)]
    if config.adapters:
        rows.append(("Models and LoRA adapters", _model_panels(g, e)))
    if config.gateway.api_keys_file is not None:
        rows.append(("API keys", _key_panels(r)))
    return rows + [("Ray nodes", nodes)]


def _model_panels(g: str, e: str) -> list[Panel]:
    """Traffic per served model (the base and each adapter) and the adapters' engine state."""
    return [
        Panel("Requests/s per model", (Query(
            f"sum by (model) (rate(serveout_requests_total{g}[1m]))", "{{model}}"),), "reqps"),
        Panel("Generated tokens/s per model", (Query(
            f"sum by (model) (rate(serveout_generation_tokens_total{g}[1m]))", "{{model}}"),), "short"),
        Panel("Time to first token p95 per model", (Query(
            f"histogram_quantile(0.95, sum by (model, le) "
            f"(rate(serveout_time_to_first_token_seconds_bucket{g}[5m])))", "{{model}}"),), "s"),
        Panel("Adapters loaded per replica", (
            Query(f"serveout_engine_adapters_loaded{e}", "{{replica}}"),
            Query(f"serveout_engine_adapters_refused{e}", "{{replica}} refused"),
        ), "short", "A refused adapter answers 404 naming why; the engine's log says more."),
        Panel("Adapters in host memory and in the batch per replica", (
            Query(f"serveout_engine_adapters_cached{e}", "{{replica}} cached"),
            Query(f"serveout_engine_adapters_active{e}", "{{replica}} active"),
        ), "short", "Cached: in the engine's host LRU (lora.max_cpu_loras); active: in the running batch's "
            "slots (lora.max_loras). Which adapter is where: serveout_engine_adapter_residency."),
        Panel("Adapter evictions and loads/s", (
            Query(f"sum by (replica) (rate(serveout_engine_adapter_evictions_total{e}[5m]))", "{{replica}} evicted"),
            Query(f"sum by (replica) (rate(serveout_engine_adapter_loads_total{e}[5m]))", "{{replica}} loaded"),
        ), "short", "An evicted adapter is read from disk again by its next request, inside an engine step: "
            "steady evictions mean more adapters than lora.max_cpu_loras are in use."),
        Panel("Adapter slot waits/s", (Query(
            f"sum by (adapter) (rate(serveout_adapter_slot_waits_total{e}[1m]))", "{{adapter}}"),),
            "reqps", "Requests routed while every replica's LoRA slots held other adapters: "
            "raise lora.max_loras or add replicas."),
    ]


def _key_panels(r: str) -> list[Panel]:
    """Per-key series carry no ``model`` label: they are selected by the scrape's ``rayservice``."""
    return [
        Panel("Requests/s per API key", (Query(
            f"sum by (key, status) (rate(serveout_key_requests_total{r}[1m]))",
            "{{key}} {{status}}"),), "reqps"),
        Panel("429s/s per API key", (Query(
            f"sum by (key, reason) (rate(serveout_key_rejected_requests_total{r}[1m]))",
            "{{key}} {{reason}}"),), "reqps", "Refusals by reason: a key's own limits or its fair share."),
        Panel("Tokens/s per API key", (Query(
            f"sum by (key, kind) (rate(serveout_key_tokens_total{r}[1m]))", "{{key}} {{kind}}"),),
            "short"),
        Panel("Authentication failures/s", (Query(
            f"sum by (reason) (rate(serveout_auth_failures_total{r}[1m]))", "{{reason}}"),),
            "reqps", "401s: no key (missing) or an unknown key (invalid)."),
    ]


def _timeseries(panel: Panel, panel_id: int, grid: dict) -> dict:
    defaults: dict = {"unit": panel.unit, "min": 0}
    if panel.max_value is not None:
        defaults["max"] = panel.max_value
    if panel.threshold is not None:
        defaults["thresholds"] = {"mode": "absolute", "steps": [
            {"color": "green", "value": None}, {"color": "red", "value": panel.threshold}]}
        defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": q.expr,
             "legendFormat": q.legend}
            for i, q in enumerate(panel.queries)
        ],
    }
