"""The LoRA adapters a stack serves on its base model, and the engine's LoRA settings
they need (pure config; the files are checked where they are read:
:mod:`serving.adapters.checks`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from serving.config.model_spec import LoraSettings, Strict


class AdapterSpec(Strict):
    """One LoRA adapter served on the stack's base model: the request's ``model`` names it."""

    name: str = Field(pattern=r"^[A-Za-z0-9._:-]+$", max_length=128, description="served model id")
    path: Path = Field(description="folder with adapter_config.json and adapter_model.safetensors, "
                       "on every node that runs an engine replica")
    rank: int | None = Field(None, ge=1, description="the adapter's rank, if known (checked against "
                             "max_lora_rank before anything loads)")
    description: str = ""


def lora_settings_for(adapters: tuple[AdapterSpec, ...], given: LoraSettings | None) -> LoraSettings | None:
    """The engine's LoRA settings: ``given``, else none without adapters, else the
    defaults (:class:`LoraSettings`). They never follow the adapters' ranks: a change
    of adapters then restarts no engine (only turning LoRA on or off does)."""
    if given is not None or not adapters:
        return given
    return LoraSettings()


def adapter_problems(adapters: tuple[AdapterSpec, ...], base: str, lora: LoraSettings | None) -> list[str]:
    """What is wrong with the declared adapters as a set (names, ranks), one line each."""
    problems = []
    seen: set[str] = set()
    for adapter in adapters:
        if adapter.name == base:
            problems.append(f"adapter {adapter.name!r} has the base model's name")
        if adapter.name in seen:
            problems.append(f"adapter {adapter.name!r} is declared twice")
        seen.add(adapter.name)
        if lora is not None and adapter.rank is not None and adapter.rank > lora.max_lora_rank:
            problems.append(f"adapter {adapter.name!r} has rank {adapter.rank}, above the engine's "
                            f"max_lora_rank {lora.max_lora_rank}")
    return problems
