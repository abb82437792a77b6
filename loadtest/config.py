"""Typed configuration of a load test: the target, the load, the workload and limits."""

from __future__ import annotations

import enum
from pathlib import Path

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from loadtest.analysis.slo import Objective, check_applicable
from loadtest.client.body_fields import refused_fields
from loadtest.errors import ConfigError, SLOError
from loadtest.generator.priority import Priority
from loadtest.profiles import ProfileConfig, ReplayProfile
from loadtest.units import Fraction, Seconds
from loadtest.workloads import TraceWorkload, WorkloadConfig
from loadtest.workloads.model_mix import ModelMix
from loadtest.workloads.tenant_mix import TenantMix

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_TARGET = "http://127.0.0.1:8000"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Endpoint(enum.StrEnum):
    """Which OpenAI API is driven."""

    CHAT = "chat"
    COMPLETIONS = "completions"

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self is Endpoint.CHAT else "/v1/completions"


class TargetConfig(Frozen):
    """The server under test and how requests are sent to it.

    ``exact_output`` adds ``ignore_eos: true`` (a vLLM extra parameter that serveout's
    gateway accepts too) so every answer runs to ``max_tokens``. ``extra_body``: fields
    added to every request body as given (``tools``, ``response_format``, ``priority``,
    ``top_p``...); one the load tester sets itself is refused, naming its option.
    """

    url: str = DEFAULT_TARGET
    model: str = DEFAULT_MODEL
    endpoint: Endpoint = Endpoint.CHAT
    stream: bool = True
    exact_output: bool = True
    temperature: float | None = Field(None, ge=0.0)
    api_key: str | None = Field(None, exclude=True, repr=False)
    request_timeout_s: Seconds = Field(300.0, gt=0.0)
    connect_timeout_s: Seconds = Field(10.0, gt=0.0)
    metrics_url: str | None = None
    scrape_metrics: bool = True
    scrape_interval_s: Seconds = Field(2.0, gt=0.0)
    respect_retry_after: bool = True
    extra_body: dict[str, JsonValue] = {}

    @field_validator("extra_body")
    @classmethod
    def _extra(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        problems = refused_fields(value, model_allowed=False)
        if problems:
            raise ValueError("extra body: " + "; ".join(problems))
        return value

    @model_validator(mode="after")
    def _temperature(self) -> TargetConfig:
        if self.temperature is not None and "temperature" in self.extra_body:
            raise ValueError("temperature is given twice: by --temperature and in the extra body")
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("target URL must start with http:// or https://")
        return value.rstrip("/")

    @property
    def resolved_metrics_url(self) -> str | None:
        if not self.scrape_metrics:
            return None
        return self.metrics_url or f"{self.url}/metrics"


def parse_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a pair."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class GeneratorConfig(Frozen):
    """How the load is generated: ``workers`` local worker processes (1: the single-process
    generator, no master). With several, a master process hands each worker its share
    over Locust's own master/worker protocol; ``expect_workers`` is the total the master
    waits for, local plus remote (``loadtest worker`` on other machines, connecting to
    ``master_host:master_port``; port 0 picks a free port, for local workers only).
    ``priority``: ``realtime`` has every generator process claim real-time round-robin
    scheduling (lowest priority) when the OS allows it, so that a server on the same
    machine does not hold it off the CPU (:mod:`loadtest.generator.priority`)."""

    workers: int = Field(1, ge=0)
    expect_workers: int | None = Field(None, ge=1)
    master_host: str = "127.0.0.1"
    master_port: int = Field(0, ge=0, le=65535)
    connect_timeout_s: Seconds = Field(60.0, gt=0.0)
    priority: Priority = "realtime"

    @model_validator(mode="after")
    def _consistent(self) -> GeneratorConfig:
        if self.expect_workers is None and self.workers == 0:
            raise ValueError("no worker: set workers >= 1 or expect remote workers")
        if self.total_workers < self.workers:
            raise ValueError(f"expect_workers ({self.expect_workers}) counts the {self.workers} local workers too")
        if self.total_workers > self.workers and self.master_port == 0:
            raise ValueError("remote workers need a fixed master port (--master-bind HOST:PORT)")
        return self

    @property
    def total_workers(self) -> int:
        return self.workers if self.expect_workers is None else self.expect_workers

    @property
    def distributed(self) -> bool:
        """Whether a master and worker processes generate the load (else one process)."""
        return not (self.workers == 1 and self.total_workers == 1)


class GpuConfig(Frozen):
    """GPU telemetry over the run: DCGM exporters' ``/metrics`` (``dcgm_urls``, one per
    node; Prometheus text) and/or this machine's GPUs through NVML (``nvml``), sampled
    every ``interval_s``; gives power, energy and tokens per joule per stage."""

    dcgm_urls: tuple[str, ...] = ()
    nvml: bool = False
    interval_s: Seconds = Field(1.0, gt=0.0)

    @model_validator(mode="after")
    def _source(self) -> GpuConfig:
        if not self.dcgm_urls and not self.nvml:
            raise ValueError("GPU telemetry needs a DCGM exporter URL or nvml")
        bad = [u for u in self.dcgm_urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"DCGM exporter URLs must start with http:// or https://: {', '.join(bad)}")
        return self


class CancelConfig(Frozen):
    """Client cancellation: a ``fraction`` of requests (drawn from the seed) abandoned by
    the client ``after_s`` seconds after sending (the connection is closed); counted and
    reported apart from failures. A request that finished earlier simply completed."""

    fraction: Fraction = Field(gt=0.0, le=1.0)
    after_s: Seconds = Field(1.0, gt=0.0)


class LoadTestConfig(Frozen):
    """One load test. ``duration_s`` is the total load time of a stage (warm-up and
    cool-down included, excluded from figures); ``max_requests`` caps the requests of a
    stage; ``time_limit_s`` is the hard bound after which the generator is stopped.
    ``model_mix``: the models the sessions name (:mod:`loadtest.workloads.model_mix`;
    without one, ``target.model``); ``tenants``: who sends the sessions, with which key,
    class and SLO (:mod:`loadtest.workloads.tenant_mix`)."""

    target: TargetConfig = TargetConfig()
    profile: ProfileConfig
    workload: WorkloadConfig
    duration_s: Seconds | None = Field(60.0, gt=0.0)
    max_requests: int | None = Field(None, ge=1)
    warmup_s: Seconds = Field(0.0, ge=0.0)
    cooldown_s: Seconds = Field(0.0, ge=0.0)
    time_limit_s: Seconds | None = Field(None, gt=0.0)
    drain_timeout_s: Seconds | None = Field(None, ge=0.0)
    slos: tuple[Objective, ...] = ()
    seed: int = 0
    tokenizer: Path | None = None
    prompt_pool: int | None = Field(None, ge=1)
    label: str | None = None
    generator: GeneratorConfig = GeneratorConfig()
    cancel: CancelConfig | None = None
    gpu: GpuConfig | None = None
    model_mix: ModelMix | None = None
    tenants: TenantMix | None = None

    @model_validator(mode="before")
    @classmethod
    def _replay_workload(cls, data: Any) -> Any:
        """A replay's requests: the ``trace`` workload of the profile's selection."""
        if isinstance(data, dict) and data.get("workload") is None:
            profile = data.get("profile")
            if isinstance(profile, dict) and profile.get("kind") == "replay":
                profile = ReplayProfile.model_validate(profile)
            if isinstance(profile, ReplayProfile):
                data = {**data, "workload": TraceWorkload(**profile.selection().model_dump())}
        return data

    @model_validator(mode="after")
    def _tenant_workloads(self) -> LoadTestConfig:
        if self.tenants is not None and self.tenants.workloads() and isinstance(self.profile, ReplayProfile):
            raise ValueError("a replay sends its trace's requests: tenants cannot have workloads of their own")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> LoadTestConfig:
        if self.duration_s is None and self.max_requests is None:
            raise ValueError("set a duration or a request count (or both)")
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError("warm-up plus cool-down must be shorter than the duration")
        if self.duration_s is None and self.cooldown_s > 0:
            raise ValueError("a cool-down needs a duration")
        if self.profile.needs_duration and self.duration_s is None:
            raise ValueError(f"profile {self.profile.kind!r} needs a duration")
        if isinstance(self.profile, ReplayProfile) and (
            not isinstance(self.workload, TraceWorkload) or self.workload.selection() != self.profile.selection()
        ):
            raise ValueError("a replay sends the trace's own requests: leave the workload out (or give "
                             "`trace:` with the same file, window, sessions and block size)")
        if self.profile.needs_slo and not self.slos:
            raise ValueError(f"profile {self.profile.kind!r} needs --slo")
        try:
            check_applicable(self.slos, streaming=self.target.stream)
            for tenant in self.tenants.tenants if self.tenants is not None else ():
                check_applicable(tenant.slos, streaming=self.target.stream)
        except SLOError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def effective_drain_s(self) -> float:
        """How long in-flight requests may finish after the load stops."""
        if self.drain_timeout_s is not None:
            return self.drain_timeout_s
        return min(self.target.request_timeout_s, 120.0)

    @property
    def stage_time_limit_s(self) -> float:
        """Hard bound on one stage's wall time (load + drain), from the stage clock's zero."""
        if self.time_limit_s is not None:
            return self.time_limit_s
        if self.duration_s is not None:
            return self.duration_s + self.effective_drain_s + 5.0
        return 600.0

    @property
    def measured_window(self) -> tuple[float, float]:
        """Start times (stage clock) a request must fall in to count in the figures."""
        end = float("inf") if self.duration_s is None else self.duration_s - self.cooldown_s
        return self.warmup_s, end
