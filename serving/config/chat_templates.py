"""Chat templates a model spec can name instead of the model's own (``tool_calling.chat_template``).

A model whose own template cannot render tools, tool calls and tool results (SmolLM2's
ChatML template renders role and content only) gets one of these. Each renders a
conversation without tools exactly as the model's own template does, so plain chat
prompts keep their tokens.
"""

from __future__ import annotations

from serving.errors import ConfigError

# SmolLM2's ChatML template plus tools in the Hermes format (the one vLLM's `hermes`
# tool-call parser reads): tool signatures in <tools></tools> in the system turn, calls as
# <tool_call>{"name": ..., "arguments": ...}</tool_call>, results as <tool_response> in a
# user turn (consecutive tool messages share one).
CHATML_HERMES_TOOLS = r"""
{%- set default_system = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' %}
{%- if tools %}
  {{- '<|im_start|>system\n' }}
  {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- default_system }}{%- endif %}
  {{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' }}
  {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
  {%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
  {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments ' }}
  {{- 'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, ' }}
  {{- '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0]['role'] != 'system' %}
  {{- '<|im_start|>system\n' + default_system + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
  {%- if loop.first and tools and message['role'] == 'system' %}
  {%- elif message['role'] == 'assistant' and message['tool_calls'] %}
    {{- '<|im_start|>assistant\n' + message['content'] }}
    {%- for call in message['tool_calls'] %}
      {%- if not loop.first or message['content'] %}{{- '\n' }}{%- endif %}
      {{- '<tool_call>\n{"name": "' + call['function']['name'] + '", "arguments": ' }}
      {{- (call['function']['arguments'] | tojson) + '}\n</tool_call>' }}
    {%- endfor %}
    {{- '<|im_end|>\n' }}
  {%- elif message['role'] == 'tool' %}
    {%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
    {{- '\n<tool_response>\n' + message['content'] + '\n</tool_response>' }}
    {%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
  {%- else %}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
""".strip()

TEMPLATES: dict[str, str] = {"chatml-hermes-tools": CHATML_HERMES_TOOLS}


def chat_template(name: str) -> str:
    """The bundled template ``name``; an unknown name is a :class:`ConfigError` listing them."""
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ConfigError(f"unknown chat template {name!r}; bundled templates: {', '.join(TEMPLATES)}") from None
