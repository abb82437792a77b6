"""Which JSON schemas guided decoding can enforce: the rest is a 400 naming the problem."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from serving.errors import InvalidRequestError
from serving.openai.json_schemas import check_schema

PARAM = "response_format.json_schema.schema"


def refusal(schema) -> str:
    with pytest.raises(InvalidRequestError) as err:
        check_schema(schema, param=PARAM)
    assert err.value.param == PARAM
    return err.value.message


class Address(BaseModel):
    street: str
    zip_code: str | None = None


class Patient(BaseModel):
    name: str
    age: int
    addresses: list[Address]
    allergies: list[str] = []


@pytest.mark.parametrize("schema", [
    Patient.model_json_schema(),  # what the SDK's parse(response_format=Model) sends: $defs, $ref, anyOf
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                      "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                      "n": {"type": "integer", "minimum": 1, "maximum": 9},
                                      "kind": {"enum": ["a", "b"]}},
     "required": ["when"], "additionalProperties": False},
    {"type": "object", "properties": {"not": {"type": "string"}}},  # a property *named* like a keyword
    {},
])
def test_schemas_the_engine_enforces_pass(schema):
    check_schema(schema, param=PARAM)


def test_an_invalid_schema_names_what_and_where():
    message = refusal({"type": "object", "properties": {"age": {"type": "integr"}}})
    assert "not a valid JSON schema" in message and "/properties/age/type" in message


@pytest.mark.parametrize("schema, keyword, where", [
    ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "`not`", "/properties/a"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "`uniqueItems`", "/"),
    ({"type": "integer", "multipleOf": 5}, "`multipleOf`", "/"),
    ({"if": {"required": ["a"]}, "then": {"required": ["b"]}}, "`if`", "/"),
    ({"$defs": {"x": {"type": "object", "dependentRequired": {"a": ["b"]}}}, "$ref": "#/$defs/x"},
     "`dependentRequired`", "/$defs/x"),
    ({"anyOf": [{"type": "string", "format": "credit-card"}]}, "`format: credit-card`", "/anyOf/0"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "length bound", "/"),
    ({"allOf": [{"type": "string"}, {"enum": ["x"]}]}, "`allOf` with more than one", "/"),
    ({"$ref": "https://example.com/schema.json"}, "outside the schema", "/"),
])
def test_keywords_the_engine_would_ignore_are_refused_by_name(schema, keyword, where):
    message = refusal(schema)
    assert keyword in message and f"at {where}," in message and "cannot enforce" in message


def test_a_schema_must_be_an_object():
    assert "JSON schema object" in refusal([{"type": "string"}])
