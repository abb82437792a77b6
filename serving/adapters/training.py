"""Make a LoRA adapter of a local model with peft: a few optimiser steps on the
question-answer pairs of an :class:`~serving.config.model_spec.AdapterRecipe`, rendered
with the model's chat template (loss on the answer tokens only). Deterministic for a
recipe on one machine; the answers it teaches differ visibly from the base model's, which
is all it is for (plumbing, routing and correctness tests; not a quality fine-tune)."""

from __future__ import annotations

import json
from pathlib import Path

from serving.config.model_spec import AdapterRecipe

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The Llama linear layers vLLM wraps (no embedding or LM-head LoRA: SmolLM2 ties them)."""
BATCH = 4


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """The (user, assistant) pairs of a recipe's JSONL file."""
    pairs = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            pairs.append((row["user"], row["assistant"]))
    if not pairs:
        raise ValueError(f"{path} holds no (user, assistant) pairs")
    return pairs


def train_adapter(recipe: AdapterRecipe, base: Path, data: Path, out: Path, *, log=print) -> None:
    """Train ``recipe`` on ``base`` (a local model folder) and save the adapter in ``out``
    (``adapter_config.json`` + ``adapter_model.safetensors``)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(recipe.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=recipe.rank, lora_alpha=recipe.alpha, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM", target_modules=list(TARGET_MODULES))
    model = get_peft_model(model, config)
    examples = [_example(tokenizer, user, answer) for user, answer in read_pairs(data)]
    optimiser = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=recipe.learning_rate)
    model.train()
    generator = torch.Generator().manual_seed(recipe.seed)
    for step in range(recipe.steps):
        batch = [examples[i] for i in torch.randperm(len(examples), generator=generator)[:BATCH].tolist()]
        ids, mask, labels = _pad(batch, tokenizer.pad_token_id or 0)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        if step % 10 == 0 or step == recipe.steps - 1:
            log(f"adapter {recipe.name}: step {step + 1}/{recipe.steps} loss {loss.item():.3f}")
    model.save_pretrained(out)


def _example(tokenizer, user: str, answer: str) -> tuple[list[int], list[int]]:
    messages = [{"role": "user", "content": user}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    full = prompt + answer + tokenizer.eos_token
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    return ids, [-100] * len(prompt_ids) + ids[len(prompt_ids):]


def _pad(batch, pad_id: int):
    """Right-padded token ids, attention mask and labels of a batch."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.tensor([i + [pad_id] * (width - len(i)) for i, _ in batch])
    mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
    return ids, mask, labels
