"""Which JSON schemas guided decoding can enforce (pure).

A client's schema (``response_format.json_schema.schema``, a tool's ``parameters``) is
checked once, when the request is planned: it must be a valid JSON schema (2020-12
meta-schema), and it must not use a keyword the engine's grammar (xgrammar, as vLLM
0.32 drives it) would silently ignore or refuse. Either is a 400 that names the
keyword and where it is (a JSON pointer into the schema); the engine's own check stays
as a backstop (its refusal is a 400 too).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from serving.errors import InvalidRequestError

# Keywords the grammar would not enforce: asking for them and getting output that
# ignores them would be a silent lie.
UNENFORCEABLE = frozenset({
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
    "uniqueItems", "contains", "minContains", "maxContains", "multipleOf",
    "patternProperties", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef",
})
STRING_FORMATS = frozenset({
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid",
    "uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
})
# Where a keyword holds one subschema, a map of them, or a list of them.
_ONE = ("items", "additionalProperties", "additionalItems")
_MAP = ("properties", "$defs", "definitions")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")


def check_schema(schema: Any, *, param: str) -> None:
    """Raise :class:`InvalidRequestError` (``param`` named) unless guided decoding can
    enforce ``schema`` exactly."""
    try:
        problem = _problem(json.dumps(schema, sort_keys=True))
    except RecursionError:
        problem = "is nested too deeply"
    if problem is not None:
        raise InvalidRequestError(f"{param} {problem}", param=param)


@lru_cache(maxsize=256)  # the same schema comes with every request of an application
def _problem(schema_json: str) -> str | None:
    schema = json.loads(schema_json)
    if not isinstance(schema, dict):
        return "must be a JSON schema object"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = _pointer(exc.path)
        return f"is not a valid JSON schema: {exc.message}" + (f" (at {where})" if where else "")
    return _unenforceable(schema, "")


def _unenforceable(schema: Any, where: str) -> str | None:
    if not isinstance(schema, dict):
        return None  # true / false
    ignored = sorted(UNENFORCEABLE & schema.keys())
    if ignored:
        return _cannot(f"`{ignored[0]}`", where)
    ref = schema.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        return _cannot(f"a `$ref` outside the schema ({ref})", where)
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) > 1:
        return _cannot("`allOf` with more than one schema", where)
    fmt = schema.get("format")
    if fmt is not None and fmt not in STRING_FORMATS:
        return _cannot(f"`format: {fmt}` (enforced formats: {', '.join(sorted(STRING_FORMATS))})", where)
    if ("pattern" in schema or "format" in schema) and ("minLength" in schema or "maxLength" in schema):
        return _cannot("a length bound together with `pattern` or `format`", where)
    for key in _ONE:
        if (found := _unenforceable(schema.get(key), f"{where}/{key}")) is not None:
            return found
    for key in _MAP:
        for name, sub in (schema.get(key) or {}).items():
            if (found := _unenforceable(sub, f"{where}/{key}/{_escape(name)}")) is not None:
                return found
    for key in _LIST:
        for i, sub in enumerate(schema.get(key) or ()):
            if (found := _unenforceable(sub, f"{where}/{key}/{i}")) is not None:
                return found
    return None


def _cannot(what: str, where: str) -> str:
    return f"uses {what} at {where or '/'}, which guided decoding cannot enforce"


def _pointer(path) -> str:
    return "".join(f"/{_escape(str(p))}" for p in path)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")
