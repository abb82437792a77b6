"""The model's tokenizer and chat template, loaded from the local model folder."""

from __future__ import annotations

import json
from pathlib import Path

from jinja2 import TemplateError
from transformers import AutoTokenizer

from serving.config.stack import StackConfig
from serving.errors import InvalidRequestError
from serving.openai.schemas import ChatMessage


class PromptTokenizer:
    """Turns chat messages or text into token ids, and token ids back into text.

    ``chat_template`` replaces the model's own template (a model spec names one when the
    model's template cannot render tools: :mod:`serving.config.chat_templates`)."""

    def __init__(self, model_path: Path, chat_template: str | None = None) -> None:
        self._tok = AutoTokenizer.from_pretrained(str(model_path))
        if chat_template is not None:
            self._tok.chat_template = chat_template
        if not self._tok.chat_template:
            raise InvalidRequestError(f"the tokenizer in {model_path} has no chat template")
        self.vocab_size = len(self._tok)

    def chat_text(self, messages: list[ChatMessage], tools: list[dict] | None = None) -> str:
        """The prompt text after the model's chat template (generation prompt added), with
        ``tools`` (OpenAI's function definitions) rendered by the template."""
        conversation = [_template_message(m, i) for i, m in enumerate(messages)]
        try:
            return self._tok.apply_chat_template(
                conversation, tools=tools or None, add_generation_prompt=True, tokenize=False
            )
        except (TemplateError, TypeError) as exc:  # e.g. roles out of order, a turn it cannot render
            raise InvalidRequestError(f"the model's chat template refused the messages: {exc}",
                                      param="messages") from None

    def encode_chat(self, messages: list[ChatMessage], tools: list[dict] | None = None) -> list[int]:
        # The template already holds any special tokens the model wants.
        return self.encode_text(self.chat_text(messages, tools), add_special_tokens=False)

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


def prompt_tokenizer(config: StackConfig) -> PromptTokenizer:
    """The model's tokenizer, with the chat template its spec names for tools (if any)."""
    tools = config.model.tool_calling
    return PromptTokenizer(config.model_path, tools.template_text() if tools else None)


def _template_message(message: ChatMessage, index: int) -> dict:
    """A message as chat templates read it: text content, tool calls with their
    arguments as an object (HF templates render them with ``tojson``)."""
    out: dict = {"role": message.role, "content": message.text()}
    if message.name is not None:  # as vLLM passes it: templates that know it render it
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        calls = []
        for j, call in enumerate(message.tool_calls):
            try:
                arguments = json.loads(call.function.arguments)
            except ValueError:
                raise InvalidRequestError(
                    "the arguments of a tool call must be JSON text",
                    param=f"messages.{index}.tool_calls.{j}.function.arguments") from None
            calls.append({"id": call.id, "type": "function",
                          "function": {"name": call.function.name, "arguments": arguments}})
        out["tool_calls"] = calls
    return out
