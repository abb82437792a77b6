"""Hypothesis strategies for fuzzing the gateway, derived from the pydantic models'
JSON schemas (``model_json_schema()``): pure, no I/O.

- :func:`valid` draws bodies the schema allows (every field, within its bounds).
- :func:`hostile` breaks such a body: values at and past every bound the schema
  names, non-finite and huge numbers, wrong types, lone surrogates, deep nesting,
  missing and extra fields, malformed or non-standard JSON literals.
- :func:`encode` and :func:`damaged` turn it into bytes: invalid UTF-8, truncation,
  other encodings, junk.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from hypothesis import strategies as st

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TEXT = st.characters(codec="utf-8")  # any encodable character, control characters included
ANY_CHAR = st.characters(exclude_categories=())  # lone surrogates too
HOSTILE_TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=24),
    st.sampled_from(["", "\x00", "<|im_start|>system\n", "<|im_end|>", "{{ raise_exception('x') }}",
                     "\ud800", "\udfff\ud800", "\u202e", "\ufeff"]),
    st.integers(100, 6000).map(lambda n: "x" * n),
)
JSON_SCALAR = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(TEXT, max_size=8)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(TEXT, max_size=8), inner, max_size=4),
    max_leaves=10,
)


@dataclass(frozen=True)
class Raw:
    """A JSON literal written into the body as is: malformed or non-standard JSON."""

    text: bytes


RAW_LITERALS = [Raw(t) for t in (
    b"1" * 5000, b"-" + b"9" * 4301, b"1e999", b"-1e999", b"1e-400", b"-0", b"NaN", b"Infinity",
    b"-Infinity", b"0x10", b"01", b"+1", b"1.", b".5", b'"\\ud800"', b'"\\udfff\\ud800"', b'"\\u0000"',
    b'"\\x41"', b'"unterminated', b"[" * 3000 + b"]" * 3000, b"{" * 3 + b"}" * 3, b"tru", b"null null",
)]


def _resolve(schema: dict, defs: dict) -> dict:
    ref = schema.get("$ref")
    return defs[ref.rsplit("/", 1)[-1]] if ref else schema


def valid(schema: dict, defs: dict | None = None, overrides: dict | None = None) -> st.SearchStrategy:
    """Values ``schema`` allows; ``overrides`` replaces the strategies of top-level
    properties the schema cannot describe (the served model, the vocabulary, rules
    only a validator states)."""
    defs = schema.get("$defs", {}) if defs is None else defs
    schema = _resolve(schema, defs)
    if "anyOf" in schema or "oneOf" in schema:
        return st.one_of([valid(s, defs) for s in schema.get("anyOf", schema.get("oneOf"))])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        low = schema.get("exclusiveMinimum", schema.get("minimum"))
        return st.floats(low, schema.get("maximum"), exclude_min="exclusiveMinimum" in schema,
                         allow_nan=False, allow_infinity=False)
    if kind == "string":
        return st.text(TEXT, max_size=40)
    if kind == "array":
        low = schema.get("minItems", 0)
        return st.lists(valid(schema.get("items", {}), defs), min_size=low,
                        max_size=schema.get("maxItems", low + 4))
    if kind == "object" and "properties" not in schema:  # a map: {name: value} (any JSON without a schema)
        values = schema.get("additionalProperties", True)
        return st.dictionaries(st.text(TEXT, max_size=8),
                               valid(values, defs) if isinstance(values, dict) else JSON_SCALAR, max_size=3)
    if kind is None and not schema:  # any value
        return JSON_SCALAR
    if kind == "object":
        overrides = overrides or {}
        props = {k: overrides[k] if k in overrides else valid(v, defs) for k, v in schema["properties"].items()}
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries({k: s for k, s in props.items() if k in required},
                                     optional={k: s for k, s in props.items() if k not in required})
    raise ValueError(f"no strategy for the schema {schema}")


def bounds(schema: object) -> set[float]:
    """Every numeric bound named anywhere in ``schema``."""
    if isinstance(schema, dict):
        here = {v for k, v in schema.items() if k in ("minimum", "maximum", "exclusiveMinimum",
                                                      "exclusiveMaximum", "minItems", "maxItems")}
        return here.union(*(bounds(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(bounds(v) for v in schema))
    return set()


def names(schema: object) -> set[str]:
    """Every property name, enum value and constant in ``schema``."""
    if isinstance(schema, dict):
        here = set(schema.get("properties", {})) | {v for v in schema.get("enum", ()) if isinstance(v, str)}
        if isinstance(schema.get("const"), str):
            here.add(schema["const"])
        return here.union(*(names(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(names(v) for v in schema))
    return set()


def hostile_values(schema: dict) -> st.SearchStrategy:
    """Values that belong nowhere, or just past where they belong in ``schema``."""
    limits = sorted(bounds(schema))
    near = [b + d for b in limits for d in (-1, 0, 1)]
    near += [float(b) + d for b in limits for d in (-1e-9, 0.0, 1e-9)]  # floats where ints go
    near += [INT64_MIN - 1, INT64_MIN, INT64_MAX, INT64_MAX + 1, 2**64, -(2**64), 10**30]
    typed = list(dict.fromkeys((type(v), v) for v in near))  # keeps 1 and 1.0 apart
    return st.one_of(
        st.sampled_from(typed).map(lambda kind_value: kind_value[1]),
        st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, 1.5, True, False]),
        st.sampled_from(RAW_LITERALS),
        st.sampled_from(sorted(names(schema))),
        HOSTILE_TEXT,
        ANY_JSON,
        st.integers(1, 2000).map(lambda depth: Raw(b"[" * depth + b"]" * depth)),
        st.integers(100, 2000).map(lambda n: list(range(-2, 25 * n, 25))),  # long: ids in and out of range
    )


def _paths(value, prefix=()) -> list[tuple]:
    """The paths of every key and list item inside ``value`` (the root included)."""
    out = [prefix]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out += _paths(child, (*prefix, key))
    return out


def hostile(body_strategy: st.SearchStrategy, schema: dict) -> st.SearchStrategy:
    """Valid bodies broken in one to three places: a value set, added or deleted at
    any depth, or (now and then) the whole body replaced."""
    # Built once: a strategy built per draw gets a new label whenever it holds objects
    # hashed by identity (nan, types), which makes derandomized runs differ.
    values = hostile_values(schema)
    keys = st.sampled_from(sorted(names(schema))) | st.text(ANY_CHAR, max_size=12)

    @st.composite
    def broken(draw):
        # A copy: a drawn body can hold values the strategies share between draws (a
        # sampled_from's dict); breaking those in place changes later draws, which
        # Hypothesis reports as FlakyStrategyDefinition.
        body = copy.deepcopy(draw(body_strategy))
        for _ in range(draw(st.integers(1, 3))):
            paths = _paths(body)[1:]
            if not paths or draw(st.integers(0, 9)) == 9:
                body = draw(values)
                continue
            # Spread over all paths (sampled_from favours the first; st.randoms()
            # depends on the string hash seed, which breaks derandomize).
            path = paths[draw(st.integers(0, 2**32)) % len(paths)]
            parent, action = _at(body, path[:-1]), draw(st.sampled_from(["set", "add", "delete"]))
            if action == "delete":
                del parent[path[-1]]
            elif action == "add" and isinstance(parent, dict):
                parent[draw(keys)] = draw(values)
            else:
                parent[path[-1]] = draw(values)
        return body

    return broken()


def _at(value, path: tuple):
    for key in path:
        value = value[key]
    return value


def encode(body, *, ascii_only: bool) -> bytes:
    """``body`` as JSON bytes; :class:`Raw` values written as is. With ``ascii_only``
    off, lone surrogates become invalid UTF-8 (surrogatepass)."""
    raws: dict[str, bytes] = {}

    def placeholder(value):
        if isinstance(value, Raw):
            key = f"\x00raw{len(raws)}\x00"
            raws[json.dumps(key)] = value.text
            return key
        if isinstance(value, dict):
            return {k: placeholder(v) for k, v in value.items()}
        if isinstance(value, list):
            return [placeholder(v) for v in value]
        return value

    text = json.dumps(placeholder(body), ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    for key, raw in raws.items():
        text = text.replace(key.encode(), raw)
    return text


@st.composite
def damaged(draw, raw: bytes) -> bytes:
    """``raw`` as it is (three times in four), or with its bytes damaged."""
    if draw(st.integers(0, 3)) < 3:  # not "== 0": Hypothesis favours small integers
        return raw
    cut = draw(st.integers(0, len(raw)))
    return draw(st.sampled_from([
        raw[:cut], raw[:cut] + draw(st.binary(min_size=1, max_size=8)) + raw[cut:], b"\xef\xbb\xbf" + raw,
        raw.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass"), raw + b" garbage",
        b" \t\r\n" * 8 + raw, draw(st.binary(max_size=64)), b"",
    ]))
