"""The deployment config: one typed object from the CLI or a YAML file to the app
builder, the KubeRay renderer and the sweep."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from serving.config.adapters import AdapterSpec, adapter_problems, lora_settings_for
from serving.config.drain import DrainSpec
from serving.config.gateway import GatewaySpec
from serving.config.model_spec import AcceleratorKind, EngineSettings, ModelSpec, Strict
from serving.config.rollout import TrafficSplit, split_problems
from serving.config.tenancy import AuditSpec, UsageSpec


class RoutingPolicyName(enum.StrEnum):
    """Registered routing policies (see :mod:`serving.routing`)."""

    LEAST_LOADED = "least-loaded"
    PREFIX_AFFINITY = "prefix-affinity"
    SESSION = "session"
    ROUND_ROBIN = "round-robin"
    CACHE_AWARE = "cache-aware"


class RoutingSpec(Strict):
    """How the gateway picks an engine replica for each request."""

    policy: RoutingPolicyName = Field(
        RoutingPolicyName.CACHE_AWARE, description="cache-aware: prefix hits weighed against queues "
        "(docs/serving.md, 'Routing policies', for why it is the default)")
    prefix_block_tokens: int = Field(
        128, ge=1, description="prefix hashing block; align with the engine's KV block size"
    )
    imbalance_threshold: int = Field(
        4, ge=0, description="prefix-affinity falls back to least-loaded past this load gap"
    )
    max_prefix_blocks: int = Field(
        65_536, ge=1, description="bound on the prefix index (LRU-evicted block hashes)"
    )
    prefix_home: bool | None = Field(
        None, description="prefix-affinity sends an unseen prefix to its consistent-hash home "
        "replica, so several gateways agree; None = only when the app runs more than one gateway "
        "(one gateway spreads unseen prefixes by load, which balances the KV caches better)"
    )
    session_header: str = "x-session-id"
    load_bound: float = Field(
        2.0, ge=1.0, description="cache-aware: a replica takes a request only while its requests in flight "
        "stay within this factor of the mean (bounded load: a hot prefix spills instead of queueing)"
    )
    miss_weight: float = Field(
        3.0, ge=1.0, description="cache-aware: what a prompt token the chosen replica must compute costs, "
        "against one already queued for prefill there (above 1: a miss also takes GPU time from others)"
    )
    queue_weight: float = Field(
        0.3, ge=0.0, description="cache-aware: cost of one more request in flight on a replica, in mean "
        "prompt lengths (decoding requests slow its steps a little)"
    )
    stats_period_s: float = Field(1.0, gt=0, description="replica stats refresh period")
    adapter_slots: bool = Field(
        True, description="rank first the replicas whose engine can batch the request's LoRA adapter now "
        "(it runs there, or a slot is free); off: the policy alone (docs/serving.md, adapters)")


class AutoscalingSpec(Strict):
    """Queue-depth autoscaling of the engine deployment (off = fixed replica count)."""

    enabled: bool = False
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(1, ge=1)
    target_queue_per_replica: float = Field(
        4.0, gt=0, description="engine waiting+running requests each replica should carry"
    )
    upscale_delay_s: float = Field(5.0, ge=0)
    downscale_delay_s: float = Field(30.0, ge=0)
    look_back_period_s: float = Field(5.0, gt=0)
    metrics_interval_s: float = Field(1.0, gt=0)
    trend_horizon_s: float = Field(
        0.0, ge=0, description="size for the queue depth this far ahead along its trend (about the replica "
        "start time plus the upscale delay); 0 = the current queue depth only"
    )
    trend_window_s: float = Field(120.0, gt=0, description="the trend is fitted over this much of the past")
    downscale_margin: float = Field(
        0.8, gt=0, le=1, description="scale down only to a count that would carry at most this fraction of "
        "target_queue_per_replica each (1 = no margin); a queue grows faster than its load, so the nearer the "
        "target sits to a replica's limit, the smaller (docs/serving.md)"
    )
    stabilize_downscale: bool = Field(
        True, description="a due downscale goes to the most replicas asked for during the downscale delay, "
        "not to the last tick's count (serving.autoscaling.queue_depth.stabilized_downscale)"
    )

    @model_validator(mode="after")
    def _bounds(self) -> "AutoscalingSpec":
        if self.min_replicas > self.max_replicas:
            raise ValueError("autoscaling min_replicas must be <= max_replicas")
        return self


def max_ongoing_per_replica(max_ongoing_requests: int | None, max_num_seqs: int) -> int:
    """Requests one engine replica takes at once: ``max_ongoing_requests``, else the
    engine's ``max_num_seqs`` (the simulator models a replica with the same rule)."""
    return max_ongoing_requests or max_num_seqs


class ReplicaSpec(Strict):
    """How many engine replicas and what each one reserves."""

    num_replicas: int = Field(1, ge=1, description="fixed count when autoscaling is off")
    cpus_per_rank: int | None = Field(
        None,
        ge=1,
        description="CPU cores per TP rank (reserved in Ray; bound on CPU engines). "
        "None = the node's cores divided among the most replicas that can run",
    )
    max_ongoing_requests: int | None = Field(
        None, ge=1, description="requests Serve sends one replica at once; None = engine max_num_seqs"
    )
    node_resource: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$",
        description="a custom Ray resource each tensor-parallel rank also takes one unit of, all "
        "in one node: on CPU nodes it stands for a node's GPUs (`serving up --nodes N` gives each "
        "worker node its slots of `accelerator_slot`); None = CPU (and GPU) bundles only")


class VllmBackend(Strict):
    """The real engine: vLLM serving the model spec's weights (the default)."""

    kind: Literal["vllm"] = "vllm"


class NullBackend(Strict):
    """The null engine (:mod:`serving.engine.null_engine`): no model, no weights; streams
    ``max_tokens`` copies of ``token_text`` per choice at a set pace, to measure the
    serving path's own ceiling. Its concurrency cap and chunking are the engine
    settings' ``max_num_seqs`` and ``stream_interval``."""

    kind: Literal["null"] = "null"
    tokens_per_s: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="tokens per second per stream; 0 = as fast as possible"
    )
    ttft_s: float = Field(0.0, ge=0, allow_inf_nan=False, description="time to first token once running")
    token_text: str = Field(" tok", min_length=1, description="the text of every token")


EngineBackend = Annotated[Union[VllmBackend, NullBackend], Field(discriminator="kind")]
ENGINE_KINDS = (VllmBackend().kind, NullBackend().kind)


class EngineReplicaConfig(Strict):
    """What one engine replica needs to start (its constructor argument). Kept apart
    from routing and gateway settings so changing those never restarts engines."""

    model: ModelSpec
    model_path: Path
    engine: EngineSettings
    cpus_per_rank: int | None
    max_replicas: int | None = None
    """The most replicas that share a node's cores, when that decides a replica's cores
    (a CPU vLLM engine without ``cpus_per_rank``); else ``None``, so that a change of
    replica count restarts no running engine."""
    backend: EngineBackend = VllmBackend()


ENGINE_DEPLOYMENT = "engine"
"""The Serve deployment of the stack's first base model; a further base's is
``engine-<its name>`` (:attr:`StackConfig.engine_deployments`)."""


class BaseDeployment(Strict):
    """A further base model of the stack (``more_bases``): its own engine deployment
    (replicas, autoscaling, engine settings) and its own adapters, behind the same
    endpoint; the request's ``model`` names it or one of its adapters. Routing, the
    gateway and the drain are the stack's."""

    model: ModelSpec
    model_path: Path = Field(description="local folder with the model's weights and tokenizer")
    adapters: tuple[AdapterSpec, ...] = ()
    engine: EngineSettings | None = Field(None, description="None = the model spec's engine settings")
    replicas: ReplicaSpec = ReplicaSpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()


class StackConfig(Strict):
    """A whole deployment: a base model and its LoRA adapters served by N engine
    replicas behind the gateway, and optionally further bases (``more_bases``), each
    its own engine deployment behind the same endpoint."""

    model: ModelSpec
    model_path: Path = Field(description="local folder with the model's weights and tokenizer")
    adapters: tuple[AdapterSpec, ...] = Field(
        (), description="LoRA adapters served on the base model's replicas; the request's model names one "
        "(changing them reloads adapters in the running replicas, no restart)")
    engine: EngineSettings | None = Field(None, description="None = the model spec's engine settings")
    engine_backend: EngineBackend = Field(
        VllmBackend(), description=f"which engine runs behind the replicas: kind {' | '.join(ENGINE_KINDS)}"
    )
    replicas: ReplicaSpec = ReplicaSpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()
    routing: RoutingSpec = RoutingSpec()
    gateway: GatewaySpec = GatewaySpec()
    drain: DrainSpec = DrainSpec()
    usage: UsageSpec = UsageSpec()
    audit: AuditSpec = AuditSpec()
    splits: tuple[TrafficSplit, ...] = Field(
        (), description="model names whose traffic is split between two adapters (`serving rollout`)")
    more_bases: tuple[BaseDeployment, ...] = Field(
        (), description="further base models, each with its own engine deployment and adapters, behind the "
        "same endpoint (gateway.mode separate: a direct-mode app routes to one deployment)")
    app_name: str = "serveout"

    @field_validator("engine_backend", mode="before")
    @classmethod
    def _backend_kind(cls, value):
        """No ``kind`` means vLLM (the default); YAML reads an unquoted ``kind: null`` as
        nothing, and it means the null engine."""
        if isinstance(value, dict) and "kind" not in value:
            return {**value, "kind": VllmBackend().kind}
        if isinstance(value, dict) and value["kind"] is None:
            return {**value, "kind": NullBackend().kind}
        return value

    @model_validator(mode="after")
    def _direct_gateway(self) -> "StackConfig":
        if self.gateway.direct and (self.gateway.replicas != 1 or self.gateway.autoscaling.enabled):
            raise ValueError("gateway.mode direct runs the gateway in every engine replica: "
                             "gateway.replicas and gateway.autoscaling are for gateway.mode separate")
        return self

    @model_validator(mode="after")
    def _adapters(self) -> "StackConfig":
        problems = adapter_problems(self.adapters, self.model.name, self.engine_settings.lora)
        problems += split_problems(self.splits, self.adapter_names, (self.model.name,))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _more_bases(self) -> "StackConfig":
        if not self.more_bases:
            return self
        if self.gateway.direct:
            raise ValueError("more_bases needs gateway.mode separate: in the direct mode Serve's HAProxy "
                             "ingress routes an app's requests to the replicas of one deployment")
        names: set[str] = set()
        for base in self.bases:  # each one validated as a one-base stack (its adapters, its LoRA)
            if base._cores_follow_replica_count:
                raise ValueError(f"base {base.model.name!r} runs on CPUs beside other bases: give it "
                                 "replicas.cpus_per_rank (else each base takes the whole node's cores)")
            for name in base.served_names:
                if name in names:
                    raise ValueError(f"model name {name!r} is served twice (as a base or an adapter)")
                names.add(name)
        return self

    @property
    def bases(self) -> tuple["StackConfig", ...]:
        """Each base model as a one-base stack (the first is this stack's own): what one
        engine deployment is built from, in :attr:`engine_deployments`' order."""
        own = self.model_copy(update={"more_bases": ()}) if self.more_bases else self
        shared = own.model_dump(exclude={"model", "model_path", "adapters", "engine", "replicas", "autoscaling",
                                                  "splits"})
        return (own, *(StackConfig.model_validate({**shared, **dict(base)}) for base in self.more_bases))

    @property
    def engine_deployments(self) -> tuple[str, ...]:
        """The Serve deployment of each base, in :attr:`bases`' order."""
        return (ENGINE_DEPLOYMENT, *(f"{ENGINE_DEPLOYMENT}-{base.model.name}" for base in self.more_bases))

    @property
    def engine_settings(self) -> EngineSettings:
        """The engine's settings; LoRA on with its defaults when adapters are served and
        the settings say nothing of LoRA."""
        settings = self.engine or self.model.engine
        lora = lora_settings_for(self.adapters, settings.lora)
        return settings if lora is settings.lora else settings.model_copy(update={"lora": lora})

    @property
    def served_names(self) -> tuple[str, ...]:
        """Every model id a request may name: each base, then its adapters."""
        own = (self.model.name, *self.adapter_names, *self.alias_names)
        return own if not self.more_bases else tuple(n for base in self.bases for n in base.served_names)

    @property
    def adapter_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.adapters)

    @property
    def alias_names(self) -> tuple[str, ...]:
        """Split model names no adapter holds (a promoted rollout's public name)."""
        return tuple(s.name for s in self.splits if s.name not in self.adapter_names)

    @property
    def max_replica_count(self) -> int:
        """The most engine replicas this config can run at once."""
        if self.autoscaling.enabled:
            return self.autoscaling.max_replicas
        return self.replicas.num_replicas

    @property
    def resolved_routing(self) -> RoutingSpec:
        """The routing spec the routers get: ``prefix_home`` decided by the router count
        when not set (the direct mode runs a router per node: always possibly several)."""
        if self.routing.prefix_home is not None:
            return self.routing
        several = self.gateway.direct or self.gateway.max_replica_count > 1
        return self.routing.model_copy(update={"prefix_home": several})

    @property
    def gateway_replicas_at_start(self) -> int:
        """How many gateway replicas the app starts with (direct: its engine replicas)."""
        if self.gateway.direct:
            scaling = self.autoscaling
            return max(1, scaling.min_replicas if scaling.enabled else self.replicas.num_replicas)
        gateway = self.gateway
        return gateway.autoscaling.min_replicas if gateway.autoscaling.enabled else gateway.replicas

    @property
    def gateway_replicas_at_most(self) -> int:
        """The most gateway replicas the app can run at once (direct: its engine replicas)."""
        return self.max_replica_count if self.gateway.direct else self.gateway.max_replica_count

    @property
    def gateway_processes_at_most(self) -> int:
        """The most processes whose metrics ``/metrics`` must show: the gateway replicas,
        and in the direct mode the routers too (so always more than one)."""
        return self.gateway_replicas_at_most + (1 if self.gateway.direct else 0)

    @property
    def max_ongoing_per_replica(self) -> int:
        return max_ongoing_per_replica(self.replicas.max_ongoing_requests, self.engine_settings.max_num_seqs)

    def engine_replica_config(self) -> EngineReplicaConfig:
        return EngineReplicaConfig(
            model=self.model,
            model_path=self.model_path,
            engine=self.engine_settings,
            cpus_per_rank=self.replicas.cpus_per_rank,
            max_replicas=self.max_replica_count if self._cores_follow_replica_count else None,
            backend=self.engine_backend,
        )

    @property
    def _cores_follow_replica_count(self) -> bool:
        """A replica's cores are the node's divided by the most replicas (CPU vLLM, no ``cpus_per_rank``)."""
        return (self.model.accelerator is AcceleratorKind.CPU and self.replicas.cpus_per_rank is None
                and isinstance(self.engine_backend, VllmBackend))
