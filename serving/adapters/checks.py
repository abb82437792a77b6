"""What a LoRA adapter folder must be for vLLM 0.32 to serve it on a base model,
checked before the engine sees it (a load that fails inside an engine step would fail
every request batched with it). Reads ``adapter_config.json`` and the safetensors
header only: no weights, no torch.

Refused, each with the adapter's name and the reason: a missing folder or weights
file, a PEFT type other than LoRA, DoRA, bias terms, ``modules_to_save``, a rank above
the engine's ``max_lora_rank``, and weights whose shapes do not fit the base model
(an adapter made for another base)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from serving.config.adapters import AdapterSpec
from serving.errors import AdapterLoadError

WEIGHTS_FILE = "adapter_model.safetensors"
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


def check_adapter(adapter: AdapterSpec, *, max_lora_rank: int, base_config: dict) -> int:
    """The adapter's rank; raises :class:`AdapterLoadError` saying why it cannot be served.
    ``base_config`` is the base model's ``config.json``."""
    def refuse(reason: str) -> AdapterLoadError:
        return AdapterLoadError(f"adapter {adapter.name!r} ({adapter.path}): {reason}")

    config_file = adapter.path / "adapter_config.json"
    if not adapter.path.is_dir():
        raise refuse("the folder does not exist")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise refuse(f"no readable adapter_config.json ({exc})") from None
    if config.get("peft_type", "LORA") != "LORA":
        raise refuse(f"peft_type {config.get('peft_type')} is not LORA")
    if config.get("use_dora"):
        raise refuse("DoRA adapters are not supported by vLLM")
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        raise refuse("adapters with bias terms are not supported by vLLM")
    if config.get("modules_to_save"):
        raise refuse(f"modules_to_save {config['modules_to_save']} is not supported by vLLM")
    rank = max([int(config.get("r", 0)), *map(int, (config.get("rank_pattern") or {}).values())])
    if rank > max_lora_rank:
        raise refuse(f"rank {rank} is above the engine's max_lora_rank {max_lora_rank}")
    weights = adapter.path / WEIGHTS_FILE
    if not weights.is_file():
        raise refuse(f"no {WEIGHTS_FILE}")
    for key, shape in safetensors_shapes(weights).items():
        problem = _shape_problem(key, shape, base_config)
        if problem:
            raise refuse(f"made for another base model: {problem}")
    return rank


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from a safetensors file's JSON header."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def _module_dims(base: dict) -> dict[str, tuple[int, int]]:
    """(in, out) features of each Llama linear module of the base model."""
    h, i = base["hidden_size"], base["intermediate_size"]
    heads = base["num_attention_heads"]
    head_dim = base.get("head_dim") or h // heads
    kv = base.get("num_key_value_heads", heads) * head_dim
    return {"q_proj": (h, heads * head_dim), "k_proj": (h, kv), "v_proj": (h, kv),
            "o_proj": (heads * head_dim, h), "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def _shape_problem(key: str, shape: list[int], base: dict) -> str | None:
    match = _KEY.search(key)
    if match is None:
        return None  # a module vLLM checks itself
    layer, module, side = int(match[1]), match[2], match[3]
    if layer >= base["num_hidden_layers"]:
        return f"{key} is for layer {layer}, the base has {base['num_hidden_layers']}"
    dims = _module_dims(base).get(module)
    if dims is None or len(shape) != 2:
        return None
    wanted, got = (dims[0], shape[1]) if side == "A" else (dims[1], shape[0])
    if wanted != got:
        return f"{key} has {got} features where the base's {module} has {wanted}"
    return None
