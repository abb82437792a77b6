"""Fakes for the simulator's unit tests (named as fakes)."""

from __future__ import annotations

import numpy as np

from simulator.step_time import StepShape


class FakeStepModel:
    """A step-time model that costs 10 ms + 1 ms per token and records every step's shape."""

    def __init__(self) -> None:
        self.shapes: list[StepShape] = []
        self.decode_spans: list[int] = []

    def step_time(self, shape: StepShape) -> float:
        self.shapes.append(shape)
        return 0.01 + 0.001 * (shape.prefill_tokens + shape.decode_seqs)

    def decode_times(self, num_seqs: int, contexts: np.ndarray) -> np.ndarray:
        self.decode_spans.append(num_seqs)
        return np.full(len(contexts), 0.01 + 0.001 * num_seqs)

    def decode_time(self, num_seqs: int, context: int) -> float:
        return 0.01 + 0.001 * num_seqs


class FakeCharTokenizer:
    """A tokenizer of one token per character (a fake: real ids need a model's tokenizer)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]
