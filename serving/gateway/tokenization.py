"""The model's tokenizer and chat template, loaded from the local model folder."""

from __future__ import annotations

from pathlib import Path

from jinja2 import TemplateError
from transformers import AutoTokenizer

from serving.errors import InvalidRequestError
from serving.gateway.schemas import ChatMessage


class PromptTokenizer:
    """Turns chat messages or text into token ids, and token ids back into text."""

    def __init__(self, model_path: Path) -> None:
        self._tok = AutoTokenizer.from_pretrained(str(model_path))
        if not self._tok.chat_template:
            raise InvalidRequestError(f"the tokenizer in {model_path} has no chat template")
        self.vocab_size = len(self._tok)

    def chat_text(self, messages: list[ChatMessage]) -> str:
        """The prompt text after the model's chat template (generation prompt added)."""
        conversation = [{"role": m.role, "content": m.text()} for m in messages]
        try:
            return self._tok.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=False
            )
        except TemplateError as exc:  # e.g. a template that raises on roles out of order
            raise InvalidRequestError(f"the model's chat template refused the messages: {exc}",
                                      param="messages") from None

    def encode_chat(self, messages: list[ChatMessage]) -> list[int]:
        # The template already holds any special tokens the model wants.
        return self.encode_text(self.chat_text(messages), add_special_tokens=False)

    def encode_text(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens)

    def check_ids(self, token_ids: list[int], *, param: str) -> list[int]:
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidRequestError(
                f"token ids out of the vocabulary (size {self.vocab_size}): {bad[:5]}",
                param=param,
            )
        return token_ids

    def decode(self, token_ids: list[int]) -> str:
        return self._tok.decode(self.check_ids(token_ids, param="tokens"))
