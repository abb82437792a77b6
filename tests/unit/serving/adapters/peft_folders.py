"""PEFT-shaped LoRA folders written by the tests (adapter_config.json and a real
safetensors file of zeros) for a tiny Llama-shaped base config."""

import json
import struct

from serving.adapters.checks import WEIGHTS_FILE
from serving.config.adapters import AdapterSpec

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2}


def write_safetensors(path, shapes: dict[str, list[int]]) -> None:
    """A valid safetensors file (float32 zeros) with these tensors."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * shape[0] * shape[1]
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def lora_weights(rank=8, layers=2, q_in=64, down_out=64) -> dict[str, list[int]]:
    prefix = "base_model.model.model.layers.{}.{}.lora_{}.weight"
    shapes = {}
    for layer in range(layers):
        shapes[prefix.format(layer, "self_attn.q_proj", "A")] = [rank, q_in]
        shapes[prefix.format(layer, "self_attn.q_proj", "B")] = [64, rank]
        shapes[prefix.format(layer, "self_attn.k_proj", "B")] = [32, rank]  # 2 kv heads x 16
        shapes[prefix.format(layer, "mlp.down_proj", "A")] = [rank, 128]
        shapes[prefix.format(layer, "mlp.down_proj", "B")] = [down_out, rank]
    return shapes


def adapter(tmp_path, config=None, weights=None, name="clinic") -> AdapterSpec:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, **(config or {})}))
    if weights is not False:
        write_safetensors(folder / WEIGHTS_FILE, weights or lora_weights())
    return AdapterSpec(name=name, path=folder)
