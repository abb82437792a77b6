"""Priority classes and token-weighted fair sharing (part of :class:`serving.config.gateway.GatewaySpec`;
docs/serving.md, "Priority classes" and "Fair sharing of the admission bound")."""

from __future__ import annotations

from pydantic import Field, model_validator

from serving.config.model_spec import Strict

CLASS_NAME = r"^[a-z][a-z0-9_-]{0,31}$"


class PriorityClass(Strict):
    """One class. ``max_share``: the part of the admission bound that requests of this
    class may fill (every class counted together): a class below 1.0 is refused while the
    bound holds that share, which keeps the rest for the classes above it."""

    name: str = Field(pattern=CLASS_NAME)
    max_share: float = Field(1.0, gt=0, le=1)


class PrioritySpec(Strict):
    """Classes highest first; ``default_class`` for keys whose line sets none (and for every
    request when there are no keys)."""

    classes: tuple[PriorityClass, ...] = (
        PriorityClass(name="interactive", max_share=1.0),
        PriorityClass(name="batch", max_share=0.75),
        PriorityClass(name="sheddable", max_share=0.5),
    )
    default_class: str = "interactive"
    input_token_cost: float = Field(
        1.0, ge=0, description="fair sharing: what one prompt token adds to its key's counter (before "
        "dividing by the key's weight)")
    output_token_cost: float = Field(2.0, ge=0, description="fair sharing: the same for one output token")
    tolerance: float = Field(
        0.0, ge=0, description="fair sharing: how much less (in counter units) than every other "
        "active key of its class a key must have been served to be favoured (0: any less)")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes)

    def rank(self, name: str) -> int:
        """0 for the highest class; also the ``priority`` vLLM gets (lower runs first)."""
        return self.names.index(name)

    @model_validator(mode="after")
    def _consistent(self) -> "PrioritySpec":
        names = self.names
        if not names:
            raise ValueError("gateway.priority.classes: at least one class")
        if len(set(names)) != len(names):
            raise ValueError("gateway.priority.classes: class names must be unique")
        if self.default_class not in names:
            raise ValueError(f"gateway.priority.default_class `{self.default_class}` is not a class "
                             f"(classes: {', '.join(names)})")
        if self.classes[0].max_share != 1.0:
            raise ValueError("gateway.priority.classes: the highest class must have max_share 1.0 "
                             "(else part of the bound could never be used)")
        shares = [c.max_share for c in self.classes]
        if any(lower > higher for higher, lower in zip(shares, shares[1:])):
            raise ValueError("gateway.priority.classes: max_share must not grow from a class to the "
                             "one below it (a lower class would get more room than a higher one)")
        return self
