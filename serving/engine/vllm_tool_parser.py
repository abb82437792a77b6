"""vLLM's tool-call parsers (``vllm/tool_parsers``) behind
:class:`serving.engine.tool_calls.ToolParser`.

Imported only inside engine replicas, by :mod:`serving.engine.vllm_engine` (vLLM
imports stay out of drivers, routers and gateways). The model spec names the parser
(``tool_calling.parser``); one parser instance per choice, since a streaming parser
keeps state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.tool_parsers import ToolParserManager
from vllm.tool_parsers.abstract_tool_parser import ToolParser as VllmToolParser

from serving.engine.protocol import ToolCallDelta, ToolCalling
from serving.engine.tool_calls import Parsed, ParsedCall, Piece, ToolParser
from serving.errors import ConfigError

log = logging.getLogger("serveout.engine")


class ToolParserFactory:
    """The model's parser class, and per request the parsers of its choices."""

    def __init__(self, name: str, tokenizer, model: str) -> None:
        try:
            self._cls = ToolParserManager.get_tool_parser(name)
        except KeyError:
            raise ConfigError(f"unknown tool-call parser {name!r} in the model spec; vLLM's parsers: "
                              f"{', '.join(ToolParserManager.list_registered())}") from None
        self._tokenizer, self._model = tokenizer, model

    def for_request(self, calling: ToolCalling) -> tuple[Callable[[], ToolParser], bool]:
        """A builder of one choice's parser, and whether the engine must keep special
        tokens in the text (some families mark their tool-call tags special)."""
        request = ChatCompletionRequest.model_validate({
            "model": self._model, "messages": [{"role": "user", "content": ""}],
            "tools": json.loads(calling.tools_json), "tool_choice": "auto"})
        skip_special = self._cls(self._tokenizer, request.tools).adjust_request(request).skip_special_tokens
        return (lambda: _Adapter(self._cls(self._tokenizer, request.tools), request)), not skip_special


class _Adapter:
    def __init__(self, parser: VllmToolParser, request: ChatCompletionRequest) -> None:
        self._parser, self._request = parser, request

    def parse(self, text: str) -> Parsed:
        try:
            info = self._parser.extract_tool_calls(text, self._request)
        except Exception:  # a parser's bug must not cost the answer: the text is content
            log.exception("tool-call parser failed on a whole answer")
            return Parsed(text)
        if not info.tools_called:
            return Parsed(info.content if info.content is not None else text)
        calls = tuple(ParsedCall(c.function.name, c.function.arguments) for c in info.tool_calls)
        return Parsed(info.content or "", calls)

    def parse_delta(self, previous: str, current: str, delta: str, previous_ids: Sequence[int],
                    current_ids: Sequence[int], delta_ids: Sequence[int]) -> Piece | None:
        try:
            message = self._parser.extract_tool_calls_streaming(
                previous, current, delta, previous_ids, current_ids, delta_ids, self._request)
        except Exception:  # the end of the stream reconciles with the whole text
            log.exception("tool-call parser failed on a stream")
            return None
        if message is None:
            return None
        calls = tuple(
            ToolCallDelta(index=c.index, id=c.id, name=c.function.name if c.function else None,
                          arguments=(c.function.arguments or "") if c.function else "")
            for c in message.tool_calls)
        return Piece(message.content or "", calls)
