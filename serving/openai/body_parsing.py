"""Request bodies from bytes to validated models (pure), shared by the gateway's HTTP app
and the router, which reads the same body before the replica does."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel

from serving.errors import InvalidRequestError
from serving.openai.schemas import ChatCompletionRequest, CompletionRequest

Body = TypeVar("Body", bound=BaseModel)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800-\udfff written as a JSON escape


def parse_json(raw: bytes) -> Any:
    """The JSON value of ``raw``; malformed JSON -> :class:`InvalidRequestError` (400).

    Also refused: nesting too deep for the parser, and strings holding lone UTF-16
    surrogates (``"\\ud800"`` is valid JSON but not text any tokenizer can encode).
    """
    try:
        data: Any = json.loads(raw)
        # json.loads decodes bytes with "surrogatepass": a lone surrogate comes from an escape
        # or from non-ASCII bytes; plain ASCII JSON without such escapes skips the re-encode.
        if not raw.isascii() or b"\x00" in raw or _SURROGATE_ESCAPE.search(raw):
            json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError("the body holds a lone UTF-16 surrogate (\\ud800-\\udfff), "
                                  "which is not text") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise InvalidRequestError("malformed JSON body: nested too deeply") from None
    return data


def parse_body(raw: bytes, model: type[Body]) -> Body:
    """Malformed JSON or wrong types -> 400 with the offending field as ``param``."""
    return model.model_validate(parse_json(raw))


def completion_body(raw: bytes) -> ChatCompletionRequest | CompletionRequest:
    """A completion body whose endpoint is not known (the router does not see the path):
    chat when it has ``messages``, a text completion otherwise."""
    data = parse_json(raw)
    if isinstance(data, dict) and "messages" in data:
        return ChatCompletionRequest.model_validate(data)
    return CompletionRequest.model_validate(data)
