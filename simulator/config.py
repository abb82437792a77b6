"""The typed configuration of a simulation: which cluster serves the load test's traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serving.config.model_spec import Dtype, EngineSettings
from serving.config.gateway import GatewaySpec
from serving.config.stack import AutoscalingSpec, RoutingSpec

REPO = Path(__file__).resolve().parents[1]


class SimulationConfig(BaseModel):
    """A simulated deployment: ``replicas`` engine replicas of ``model`` on ``hardware``,
    each ``tensor_parallel`` ranks, behind one gateway (admission bound ``max_in_flight``)
    and one router (``routing``); ``autoscaling.enabled`` starts at ``replicas`` and
    scales within its bounds. ``engine`` replaces the model spec's engine settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hardware: str = Field(description="a profile name (simulator/hardware/NAME.yaml) or a YAML path")
    model: str = Field(description="a model spec name (models/NAME.yaml)")
    replicas: int = Field(1, ge=1)
    tensor_parallel: int | None = Field(None, ge=1, description="None = the model spec's")
    dtype: Dtype | None = Field(None, description="None = the model spec's")
    routing: RoutingSpec = RoutingSpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()
    max_in_flight: int = Field(GatewaySpec().max_in_flight, ge=1, description="gateway admission bound")
    max_ongoing_requests: int | None = Field(None, ge=1, description="per replica; None = max_num_seqs")
    engine: EngineSettings | None = None
    replica_start_s: float | None = Field(None, ge=0, description="None = the hardware profile's")
    quantization: Literal["fp8"] | None = Field(
        None, description="fp8: weights in one byte per decoder parameter, GEMMs at the fp8 peak")
    kv_cache_dtype: Literal["auto", "fp8"] = Field("auto", description="fp8: one byte per KV element")
    send_session_id: bool = Field(
        False, description="requests carry their session id (`loadtest run` sends none today)")
    adapters: tuple[str, ...] = Field(
        (), description="LoRA adapters of the model, by the names requests use (a model mix's); their engine "
                        "settings: engine.lora (else vLLM's defaults)")
    models_dir: Path = REPO / "models"

    @model_validator(mode="after")
    def _names_once(self) -> SimulationConfig:
        twice = sorted({n for n in self.served if self.served.count(n) > 1})
        if twice:
            raise ValueError(f"model ids served twice (the model and its adapters): {twice}")
        return self

    @property
    def served(self) -> tuple[str, ...]:
        """The model ids the simulated endpoint lists: the model, then its adapters."""
        return (self.model, *self.adapters)

    @property
    def label(self) -> str:
        scale = (f"{self.autoscaling.min_replicas}..{self.autoscaling.max_replicas}" if self.autoscaling.enabled
                 else str(self.replicas))
        tp = f" TP{self.tensor_parallel}" if self.tensor_parallel else ""
        tp += " fp8" if self.quantization else ""
        tp += " fp8-KV" if self.kv_cache_dtype == "fp8" else ""
        tp += f" + {len(self.adapters)} adapter(s)" if self.adapters else ""
        return f"simulated {self.model} on {self.hardware}: {scale} replica(s){tp}, {self.routing.policy}"
