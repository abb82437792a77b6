"""The result of a load test: a typed, versioned summary (``summary.json``).

Field names are a public contract (the sweep and the docs rely on them): add fields,
never rename them without bumping :data:`SCHEMA_VERSION`. Times are in seconds, rates
per second, fractions within [0, 1].

Verdicts: a stage's ``passed`` is ``None`` when nothing was asked of it (no SLO, no
error-rate bound), else ``True`` or ``False``. A stage whose measurement is invalid
(``validity.valid`` is false: arrivals left late, the client concurrency cap was hit,
the generator was CPU-saturated or its event loop lagged, or due arrivals were never
sent) is never a pass: ``passed`` is ``False`` and ``verdict_reason`` starts with
``"invalid measurement: "``. ``slo.passed`` stays the SLO verdict on the figures alone.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadtest.analysis.per_model import ModelFigures
from loadtest.analysis.per_tenant import ClassFigures, TenantFigures
from loadtest.analysis.records import ErrorKind
from loadtest.analysis.server_metrics import ServerSample
from loadtest.analysis.slo import SLOReport
from loadtest.analysis.stats import Distribution
from loadtest.config import LoadTestConfig
from loadtest.errors import SummaryError
from loadtest.profiles import StagePlan

SCHEMA_VERSION = 1


class WorkerReport(BaseModel):
    """One worker process of a distributed stage, as the summary shows it: CPU in percent
    of one core (from the worker's own samples), event-loop lag, the records it sent and
    its wall clock's offset from the master's (``None`` when unmeasured)."""

    model_config = ConfigDict(frozen=True)

    index: int
    host: str
    pid: int
    records: int
    cpu_seconds_load: float | None = None
    cpu_percent_mean: float | None = None
    cpu_percent_p90: float | None = None
    cpu_percent_max: float | None = None
    loop_lag_p99_s: float | None = None
    loop_lag_max_s: float | None = None
    cpu_wait_s: float | None = None
    cpu_wait_at_lag_max_s: float | None = None
    saturated: bool = False
    clock_offset_s: float | None = None
    clock_rtt_s: float | None = None
    stop_reason: str | None = None


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Window(_Model):
    """The measured window on the stage clock and its length (the rates' denominator)."""

    start_s: float
    end_s: float
    duration_s: float


class RequestCounts(_Model):
    """``sent`` counts every request of the stage; the rest only measured ones."""

    sent: int
    measured: int
    ok: int
    failed: int
    excluded_warmup: int
    excluded_cooldown: int
    errors: dict[ErrorKind, int] = {}
    error_rate: float | None = None
    cancelled: int = Field(0, description="abandoned by the client on purpose (--cancel): not failures")
    cancel_planned: int = Field(0, description="requests the client was to abandon (some finished first)")


class Latency(_Model):
    """Latency distributions of successful measured requests. ``itl`` pools every
    inter-chunk gap; ``tpot`` has one value per request with more than one token."""

    ttft: Distribution
    itl: Distribution
    tpot: Distribution
    e2e: Distribution


class Throughput(_Model):
    """Rates over the measured window. ``request_rate`` counts successful requests that
    *started* in the window (under overload it follows the offered rate);
    ``completed_rate`` counts successful requests that *completed* in it (as vLLM's
    benchmark does: the rate the server actually served)."""

    request_rate: float | None = None
    completed_rate: float | None = None
    output_tokens_per_s: float | None = None
    input_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None


class Tokens(_Model):
    """Token totals of measured successful requests and where the counts came from."""

    prompt_total: int
    output_total: int
    from_usage: int
    from_tokenizer: int
    unknown: int
    output_len: Distribution
    output_len_mismatches: int
    prompt_len_mismatches: int


class Arrivals(_Model):
    """Open-loop schedule keeping. ``scheduled``: arrivals sent (requests with a scheduled
    start); ``late``: those that left more than ``late_threshold_s`` after it; ``due``:
    arrivals the schedule placed inside the stage's duration (``None`` when unknown);
    ``dropped``: due but never sent when the duration ended; ``achieved_rate``: arrivals
    sent per second of the stage; ``slot_waits``: arrivals that found all
    ``max_concurrency`` client slots busy (the client's concurrency cap was hit)."""

    scheduled: int = 0
    late: int = 0
    late_threshold_s: float = 0.05
    lag_p99_s: float | None = None
    lag_max_s: float | None = None
    due: int | None = None
    dropped: int = 0
    achieved_rate: float | None = None
    max_concurrency: int | None = None
    slot_waits: int = 0


class Validity(_Model):
    """Whether a stage measured what it claims; ``reasons`` say why not."""

    valid: bool = True
    reasons: tuple[str, ...] = ()


class TimeBin(_Model):
    """One bin of the stage timeline (``t`` = bin start on the stage clock)."""

    t: float
    started: int
    completed: int
    failed: int
    output_tokens_per_s: float
    ttft_p95: float | None = None
    e2e_p95: float | None = None


class GeneratorReport(_Model):
    """The load generator's own CPU use (distributed: CPU seconds summed, percentages of the
    busiest worker, loop lag and CPU wait of the worst); ``saturated`` means its figures are
    suspect (it, or any worker, could not keep up). ``cpu_wait_s``: how long its event loop
    was runnable but kept off the CPU by other processes; ``cpu_wait_at_lag_max_s``: how
    much of that fell in the probe interval of the worst loop lag (as long as the lag or
    longer: the machine held the generator up, not its own work)."""

    cpu_seconds: float | None = None
    cpu_seconds_load: float | None = None
    cpu_percent_mean: float | None = None
    cpu_percent_p90: float | None = None
    cpu_percent_max: float | None = None
    cpu_seconds_per_1k_tokens: float | None = None
    loop_lag_p99_s: float | None = None
    loop_lag_max_s: float | None = None
    cpu_wait_s: float | None = None
    cpu_wait_at_lag_max_s: float | None = None
    realtime: bool | None = Field(None, description="every generator process ran at real-time priority")
    saturated: bool = False
    cpu_samples: tuple[tuple[float, float], ...] = ()
    workers: tuple[WorkerReport, ...] = Field((), description="per worker process (distributed runs)")


class TurnFigures(_Model):
    """One turn's requests (``turn`` from 0; ``pooled``: this and every later turn)."""

    turn: int
    pooled: bool = False
    requests: int
    ok: int
    ttft: Distribution
    e2e: Distribution
    think: Distribution = Field(description="start minus the end of the session's previous turn")


class FanoutFigures(_Model):
    """Agent steps: turns sent as several parallel requests."""

    steps: int
    requests: int
    width: Distribution
    complete: int = Field(description="steps whose every branch succeeded")
    step_time: Distribution = Field(description="first branch's start to last branch's end")
    straggler: Distribution = Field(description="last branch's end minus first branch's end")


class SessionReport(_Model):
    """Figures by session and turn (:mod:`loadtest.analysis.sessions`)."""

    sessions: int
    complete: int = Field(description="sessions whose every request succeeded")
    turns: Distribution
    duration: Distribution = Field(description="first request's start to last request's end")
    think: Distribution
    by_turn: tuple[TurnFigures, ...] = ()
    fanout: FanoutFigures | None = None


class GpuStage(_Model):
    """GPU telemetry over the measured window (:mod:`loadtest.analysis.gpu`): power of all
    GPUs together, energy (from the GPUs' energy counters when every GPU has one, else
    power integrated over time: ``energy_from``) and tokens per joule. The sweep's cost
    view reads ``energy_j`` and ``output_tokens_per_joule``."""

    source: str
    gpus: int
    samples: int
    power_mean_w: float | None = None
    power_max_w: float | None = None
    energy_j: float | None = None
    energy_from: str | None = None
    output_tokens_per_joule: float | None = None
    total_tokens_per_joule: float | None = None
    joules_per_output_token: float | None = None
    utilization_mean: float | None = None
    memory_used_max_mib: float | None = None


class GpuSample(_Model):
    """One GPU sample of every GPU together (``t``: seconds since the run started)."""

    t: float
    power_w: float | None = None
    energy_j: float | None = None
    utilization: float | None = None
    memory_used_mib: float | None = None
    gpus: int = 0


class GpuReport(_Model):
    """The run's GPU telemetry: where it came from and its timeline."""

    sources: tuple[str, ...] = ()
    samples_ok: int = 0
    samples_failed: int = 0
    last_error: str | None = None
    timeline: tuple[GpuSample, ...] = ()


class StageServer(_Model):
    """Server counters over the stage (from ``/metrics``; ``None`` when not exported).
    ``in_flight_after``: requests the server still counted in flight once the stage's
    requests were over (``None``: not exported); ``settled``: it reached zero (a request
    the client abandoned is still running on the server otherwise)."""

    prompt_tokens_delta: float | None = None
    generation_tokens_delta: float | None = None
    prefix_cache_hit_rate: float | None = None
    queue_depth_max: float | None = None
    kv_cache_usage_max: float | None = None
    replicas_ready_max: float | None = None
    in_flight_after: float | None = None
    settled_after_s: float | None = None
    settled: bool | None = None


class StageSummary(_Model):
    """Every figure of one stage (the whole run for single-stage profiles)."""

    index: int
    label: str
    plan: StagePlan
    started_unix: float
    offset_s: float = Field(description="stage clock zero, seconds after the run started")
    window: Window
    requests: RequestCounts
    latency: Latency
    throughput: Throughput
    tokens: Tokens
    slo: SLOReport
    arrivals: Arrivals
    generator: GeneratorReport
    server: StageServer
    timeline: tuple[TimeBin, ...] = ()
    sessions: SessionReport | None = None
    gpu: GpuStage | None = None
    models: tuple[ModelFigures, ...] = Field((), description="per model, when the requests named several")
    tenants: tuple[TenantFigures, ...] = Field((), description="per tenant, when the run had tenants")
    classes: tuple[ClassFigures, ...] = Field((), description="per priority class, when tenants asked for one")
    validity: Validity = Validity()
    passed: bool | None = None
    verdict_reason: str = ""


class SweepPoint(_Model):
    """One probed rate; ``achieved_rate`` is the arrival rate actually sent, ``valid``
    whether the stage measured what it claims, ``confidence`` how sure its verdict is."""

    stage: int
    offered_rate: float
    achieved_rate: float | None
    passed: bool
    reason: str
    valid: bool = True
    confidence: float | None = None
    goodput_rps: float | None
    error_rate: float | None
    ttft_p95: float | None
    tpot_p95: float | None
    e2e_p95: float | None


class RateSearchReport(_Model):
    """The rate sweep: every probed rate and the highest (offered) one that met the SLO
    with a valid measurement, with the rate that point actually achieved."""

    points: tuple[SweepPoint, ...]
    max_rate_meeting_slo: float | None
    achieved_rate_meeting_slo: float | None = None


class ServerReport(_Model):
    metrics_url: str | None = None
    scrapes_ok: int = 0
    scrapes_failed: int = 0
    last_error: str | None = None
    timeline: tuple[ServerSample, ...] = ()


class Summary(_Model):
    """The whole result. ``headline`` is the stage the top-level figures refer to (the
    only stage, or for a sweep the best passing one, else the first). ``simulated``: the
    figures were predicted by the simulator, not measured."""

    schema_version: int = SCHEMA_VERSION
    tool_version: str
    started_unix: float
    ended_unix: float
    config: LoadTestConfig
    stages: tuple[StageSummary, ...]
    headline_stage: int = 0
    sweep: RateSearchReport | None = None
    server: ServerReport = ServerReport()
    gpu: GpuReport | None = None
    warnings: tuple[str, ...] = ()
    passed: bool | None = None
    simulated: bool = False

    @property
    def headline(self) -> StageSummary:
        return self.stages[self.headline_stage]


def save_summary(summary: Summary, path: Path) -> None:
    """Write ``summary.json``."""
    path.write_text(summary.model_dump_json(indent=2), encoding="utf-8")


def load_summary(path: str | Path) -> Summary:
    """Read a ``summary.json`` (or the one inside a results folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SummaryError(f"cannot read {path}: {exc.strerror}") from None
    try:
        version = json.loads(text).get("schema_version")
    except (ValueError, AttributeError):
        raise SummaryError(f"{path} is not a JSON summary") from None
    if version != SCHEMA_VERSION:
        raise SummaryError(f"{path} has schema version {version!r}; this loadtest reads {SCHEMA_VERSION}")
    try:
        return Summary.model_validate_json(text)
    except ValidationError as exc:
        raise SummaryError(f"{path} does not match the summary schema: {exc.errors()[0]}") from None
