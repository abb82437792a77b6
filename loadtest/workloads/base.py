"""What a workload is: a builder of sessions (conversations) sent by the load generator.

A :class:`Session` is one or more user turns; single-turn workloads have one turn per
session. Long system prompts are stored once in :class:`WorkloadPlan.systems` and
referenced by index. Plans are built in the orchestrator (where the tokenizer lives)
and handed to the load generator as a JSON file.

A turn whose message was drawn from hashed blocks (a replayed trace's) also carries its
:class:`~loadtest.workloads.blocks.PromptRecipe`, and its plan the words it was drawn
from: in JSON such a turn is its recipe only, and reading the plan back draws the text
again (:meth:`WorkloadPlan.from_json`), so a trace of millions of prompt tokens travels
to the generator and its workers as a few numbers per request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from loadtest.workloads.blocks import BlockText, BlockWords, PromptRecipe
from loadtest.workloads.tokens import TokenizerLike

_DRAW_TEXT = "draw_text"  # validation context key: False leaves drawn messages empty


class Turn(BaseModel):
    """One user message and the output length asked for it. ``fanout`` > 1 makes the
    turn an agent step: that many requests sent at once (the same history, each message
    suffixed with its branch number), the next turn waiting for all of them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str
    max_tokens: int | None = Field(None, ge=1)
    expected_prompt_tokens: int | None = None
    fanout: int = Field(1, ge=1, le=256)
    recipe: PromptRecipe | None = Field(None, description="how ``content`` was drawn (then JSON carries only this)")

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        data = handler(self)
        if self.recipe is not None and info.mode_is_json():
            del data["content"]
        return data


class Session(BaseModel):
    """A conversation: turns sent in order, each after the previous answer arrived.
    ``extra_body``: fields added to each of its request bodies (a JSONL line's own);
    ``tenant``: who sends it (:mod:`loadtest.workloads.tenant_mix`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    turns: tuple[Turn, ...] = Field(min_length=1)
    system: int | None = None
    think_time_s: float = Field(0.0, ge=0.0)
    turn_offset: int = Field(0, ge=0, description="the first turn's number (a replayed trace's later turns)")
    extra_body: dict[str, JsonValue] | None = Field(None, description="request fields sent with every turn")
    tenant: str | None = Field(None, description="the tenant sending it (--tenant), by name")
    priority_class: str | None = Field(None, description="the class its requests ask for (its tenant's)")


class WorkloadPlan(BaseModel):
    """Everything the load generator sends: sessions plus the shared system prompts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    systems: tuple[str, ...] = ()
    sessions: tuple[Session, ...] = Field(min_length=1)
    words: BlockWords | None = Field(None, description="what the turns with a recipe were drawn from")

    @model_validator(mode="before")
    @classmethod
    def _draw(cls, data: Any, info: ValidationInfo) -> Any:
        """Turns read as recipes alone (from JSON) get their text drawn again."""
        if not isinstance(data, dict) or not data.get("words"):
            return data
        text = BlockText(BlockWords.model_validate(data["words"])) if (info.context or {}).get(_DRAW_TEXT, True) else None

        def turn(t: Any) -> Any:
            if not isinstance(t, dict) or "content" in t or t.get("recipe") is None:
                return t
            return {**t, "content": "" if text is None else text.text(PromptRecipe.model_validate(t["recipe"]))}

        sessions = [{**s, "turns": [turn(t) for t in s["turns"]]} if isinstance(s, dict) and "turns" in s else s
                    for s in data.get("sessions", ())]  # fmt: skip
        return {**data, "sessions": sessions}

    @classmethod
    def from_json(cls, text: str, *, draw_text: bool = True) -> WorkloadPlan:
        """A plan read back from its JSON; ``draw_text=False`` leaves the messages that
        travel as recipes empty (a master that only forwards parts of the plan)."""
        return cls.model_validate_json(text, context={_DRAW_TEXT: draw_text})

    def system_text(self, session: Session) -> str | None:
        return None if session.system is None else self.systems[session.system]


@dataclass(frozen=True)
class WorkloadContext:
    """What a workload may use while building: a seed and, lazily, the model's tokenizer.

    ``chat`` tells whether requests go to the chat endpoint (whose template adds
    tokens around each message).
    """

    seed: int
    chat: bool
    tokenizer_loader: Callable[[], TokenizerLike]

    def tokenizer(self) -> Any:
        return self.tokenizer_loader()


@runtime_checkable
class Workload(Protocol):
    """The protocol every workload implements (workloads are pydantic models)."""

    kind: str
    needs_tokenizer: ClassVar[bool]

    @property
    def requests_per_session(self) -> int:
        """How many requests (turns) one session sends."""
        ...

    def build(self, count: int, ctx: WorkloadContext) -> WorkloadPlan:
        """A plan with ``count`` sessions."""
        ...
