"""What a chat request asks of its output: structured outputs and tool calls (pure).

Decided once, when the request is planned, from ``response_format``, ``tools``,
``tool_choice`` and ``parallel_tool_calls``:

- the tools the chat template renders into the prompt (they are tokenised with it);
- :class:`GuidedDecoding`, the grammar the engine enforces: the response format's
  schema, or for ``tool_choice`` ``required`` a JSON array of calls
  ``{"name", "parameters"}`` and for a named function that function's parameters (so a
  forced call is valid whatever the model's size);
- :class:`ToolCalling`, how the engine reads the calls back out of the text.

Everything a client can get wrong here is a 400 naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from serving.engine.protocol import GuidedDecoding, ToolCalling
from serving.errors import InvalidRequestError
from serving.openai.json_schemas import check_schema
from serving.openai.schemas import (
    ChatCompletionRequest,
    ChatTool,
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedToolChoice,
)

EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class OutputShape:
    """The answer's constraints: what the template renders, what the engine enforces
    and how it reads tool calls."""

    tools: list[dict] | None = None
    guided: GuidedDecoding | None = None
    tool_calling: ToolCalling | None = None


def output_shape_of(body: ChatCompletionRequest, *, supports_tools: bool, model: str) -> OutputShape:
    """The output plan of ``body``; raises :class:`InvalidRequestError` naming the field."""
    tools = body.tools or []
    choice = body.tool_choice if body.tool_choice is not None else ("auto" if tools else "none")
    if not tools:
        if choice != "none":
            raise InvalidRequestError("tool_choice needs tools: the request defines none", param="tool_choice")
        return OutputShape(guided=_response_format(body))
    if not supports_tools:
        raise InvalidRequestError(
            f"the model `{model}` has no tool-call format configured (`tool_calling` in its "
            "model spec), so it cannot be given tools", param="tools")
    parameters = _checked_parameters(tools)
    rendered = [tool.model_dump(exclude_none=True) for tool in tools]
    parallel = body.parallel_tool_calls is not False
    if choice in ("none", "auto"):
        calling = None if choice == "none" else ToolCalling(
            mode="auto", tools_json=json.dumps(rendered), stream=body.stream, parallel=parallel)
        return OutputShape(tools=rendered, guided=_response_format(body), tool_calling=calling)
    if body.response_format is not None and body.response_format.type != "text":
        raise InvalidRequestError(
            f"response_format cannot be combined with tool_choice {_choice_name(choice)}: the "
            "answer is then a tool call, whose arguments follow the tool's parameters",
            param="response_format")
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if name not in parameters:
            raise InvalidRequestError(
                f"tool_choice names the function `{name}`, which is not in tools "
                f"(defined: {', '.join(parameters)})", param="tool_choice")
        guided = GuidedDecoding(json_schema=json.dumps(parameters[name]))
        return OutputShape(tools=rendered, guided=guided, tool_calling=ToolCalling(mode="named", function=name))
    schema = required_calls_schema(parameters, parallel=parallel)
    return OutputShape(tools=rendered, guided=GuidedDecoding(json_schema=json.dumps(schema)),
                      tool_calling=ToolCalling(mode="required", parallel=parallel))


def required_calls_schema(parameters: dict[str, dict], *, parallel: bool) -> dict:
    """The JSON schema of ``tool_choice: required``: an array of at least one call
    ``{"name": <a defined function>, "parameters": <its arguments>}``, at most one
    without ``parallel``. The functions' ``$defs`` move to the root, where their
    ``$ref`` s (``#/$defs/...``) point."""
    defs: dict[str, Any] = {}
    calls = []
    for name, params in parameters.items():
        params = dict(params)
        for def_name, definition in (params.pop("$defs", None) or {}).items():
            if defs.setdefault(def_name, definition) != definition:
                raise InvalidRequestError(
                    f"two tools define `$defs/{def_name}` differently; tool_choice required "
                    "needs one meaning per name", param="tools")
        calls.append({"type": "object",
                      "properties": {"name": {"type": "string", "enum": [name]}, "parameters": params},
                      "required": ["name", "parameters"], "additionalProperties": False})
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
    if not parallel:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def _checked_parameters(tools: list[ChatTool]) -> dict[str, dict]:
    """Each function's parameters schema, checked, typed as an object (a schema without
    ``type`` would let the grammar produce a bare string as the arguments)."""
    parameters: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        name, params = tool.function.name, tool.function.parameters
        param = f"tools.{i}.function.parameters"
        if name in parameters:
            raise InvalidRequestError(f"two tools are named `{name}`", param=f"tools.{i}.function.name")
        schema = dict(params) if params else dict(EMPTY_OBJECT)
        schema.setdefault("type", "object")
        if schema["type"] != "object":
            raise InvalidRequestError(f"{param} must describe an object (type: object)", param=param)
        check_schema(schema, param=param)
        parameters[name] = schema
    return parameters


def _response_format(body: ChatCompletionRequest) -> GuidedDecoding | None:
    fmt = body.response_format
    if isinstance(fmt, JsonObjectFormat):
        return GuidedDecoding(json_object=True)
    if isinstance(fmt, JsonSchemaFormat):
        schema = fmt.json_schema.schema_
        check_schema(schema, param="response_format.json_schema.schema")
        return GuidedDecoding(json_schema=json.dumps(schema))
    return None


def _choice_name(choice) -> str:
    return f"`{choice.function.name}`" if isinstance(choice, NamedToolChoice) else choice
