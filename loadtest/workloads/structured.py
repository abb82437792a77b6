"""Structured-output and tool requests: the same field extraction asked for in different
answer shapes, to see what guided decoding costs.

Each request asks to extract a patient record from a short clinic note (invented names
and facts, drawn with the run's seed). ``output`` says how the answer's shape is asked
for, in fields added to the request body:

- ``text``: not at all (the reference);
- ``json_object``: ``response_format: {"type": "json_object"}``;
- ``json_schema``: ``response_format`` with the record's JSON schema (strict);
- ``tool_named``, ``tool_required``, ``tool_auto``: the ``record_patient`` tool, with
  ``tool_choice`` naming it, ``required``, or left to the model.

Runs of two outputs with the same seed send the same notes, so their tok/s and TPOT
differ only by the constraint (and the tool definition's prompt tokens). Run it with
``--no-exact-output``: a server that enforces the answer's shape ends the answer where
the grammar ends (serveout refuses ``ignore_eos`` with a constraint).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadtest.workloads.base import Session, Turn, WorkloadContext, WorkloadPlan

Output = Literal["text", "json_object", "json_schema", "tool_named", "tool_required", "tool_auto"]

RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "reason": {"type": "string"},
        "allergies": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "next_visit": {"type": "string", "format": "date"},
    },
    "required": ["name", "age", "reason", "allergies", "next_visit"],
    "additionalProperties": False,
}
RECORD_TOOL = {"type": "function", "function": {
    "name": "record_patient", "description": "Store the patient record extracted from a clinic note",
    "parameters": RECORD_SCHEMA, "strict": True}}
INSTRUCTION = "Extract the patient record (name, age, reason for the visit, allergies, next visit date) from this clinic note."

FIRST = ("Maria", "Daniel", "Linh", "Omar", "Grace", "Tomás", "Aiko", "Peter", "Fatima", "Huy", "Sara", "Jonas")
LAST = ("Lopez", "Moore", "Nguyen", "Haddad", "Okafor", "Silva", "Tanaka", "Novak", "Rahman", "Tran", "Berg", "Klein")
REASONS = ("a follow-up of her blood pressure", "a persistent cough", "a routine check-up", "pain in the left knee",
           "a repeat prescription", "a skin rash on the arm", "headaches for two weeks", "a diabetes review")
ALLERGENS = ("penicillin", "pollen", "peanuts", "latex", "aspirin", "shellfish", "dust mites")


def clinic_note(rng: np.random.Generator) -> str:
    """One invented clinic note."""
    name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    allergies = list(rng.choice(ALLERGENS, size=int(rng.integers(0, 3)), replace=False))
    allergy_text = f"Allergic to {' and '.join(allergies)}." if allergies else "No known allergies."
    month, day = int(rng.integers(1, 13)), int(rng.integers(1, 29))
    return (f"{name}, {int(rng.integers(18, 90))} years old, came in for {rng.choice(REASONS)}. "
            f"{allergy_text} Next appointment on 2027-{month:02d}-{day:02d}.")


def request_fields(output: Output) -> dict | None:
    """The body fields that ask for ``output`` (None for plain text)."""
    if output == "text":
        return None
    if output == "json_object":
        return {"response_format": {"type": "json_object"}}
    if output == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "patient_record", "schema": RECORD_SCHEMA, "strict": True}}}
    choice = {"tool_named": {"type": "function", "function": {"name": "record_patient"}},
              "tool_required": "required", "tool_auto": "auto"}[output]
    return {"tools": [RECORD_TOOL], "tool_choice": choice}


class StructuredWorkload(BaseModel):
    """Patient-record extraction from invented clinic notes, the answer's shape asked for
    as ``output`` (text, json_object, json_schema, tool_named, tool_required, tool_auto)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["structured"] = "structured"
    positional: ClassVar[str] = "output"
    needs_tokenizer: ClassVar[bool] = False
    output: Output = "json_schema"
    output_len: int = Field(128, ge=1)

    @property
    def requests_per_session(self) -> int:
        return 1

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        rng = np.random.default_rng(ctx.seed)
        fields = request_fields(self.output)
        sessions = tuple(
            Session(id=i, turns=(Turn(content=f"{INSTRUCTION}\n\nNote: {clinic_note(rng)}", max_tokens=self.output_len),),
                    extra_body=fields)
            for i in range(count))
        return WorkloadPlan(sessions=sessions)
