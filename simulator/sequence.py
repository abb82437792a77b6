"""One request inside a simulated replica (:mod:`simulator.replica`)."""

from __future__ import annotations

from simulator.lora import BASE


class Seq:
    """One request inside a replica."""

    __slots__ = ("rid", "prompt_len", "out_len", "hashes", "adapter", "computed", "generated", "held_hashed",
                 "anon", "key", "finish_step", "segments", "seg_start", "decoding")

    def __init__(self, rid: int, prompt_len: int, out_len: int, hashes: tuple[int, ...], adapter: int = BASE) -> None:
        self.rid, self.prompt_len, self.out_len, self.hashes = rid, prompt_len, out_len, hashes
        self.adapter = adapter  # its LoRA adapter (simulator.lora; BASE: the base model)
        self.computed = 0  # tokens in the KV cache
        self.generated = 0
        self.held_hashed = 0  # leading prompt units held by hash
        self.anon = 0  # other blocks held
        self.key = 0  # context - step index, while decoding
        self.finish_step = -1
        self.segments: list[tuple[int, int]] = []  # (first step, token count) runs
        self.seg_start = -1
        self.decoding = False

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (what a recompute must prefill)."""
        return self.prompt_len + self.generated
