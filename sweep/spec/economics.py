"""Prices and cost maths (pure).

The price table gives the cost per accelerator-hour by accelerator kind (a CPU
"accelerator" is one core). Every entry names its source and the month it was read
(``as_of``, ``YYYY-MM``): a price without them is a config error, so a cost in a
report can always be traced. It is read from YAML by
:func:`sweep.spec.files.load_price_table`.

- cost per hour = accelerators x price per accelerator-hour;
- cost per million output tokens = cost per hour / (output tokens/s x 3600) x 1e6,
  i.e. what a million generated tokens cost while the deployment runs at that
  throughput (idle capacity is paid for too);
- cost per request = cost per hour / (successful requests/s x 3600), at the same
  throughput;
- cost per million characters = cost per million tokens / characters per token: the
  same cost in the unit a user's text comes in. Characters per token depend on the
  language (:mod:`loadtest.workloads.text_density`), so a language the tokenizer
  splits finely pays more per character for the same price per token;
- scaling efficiency = achieved speed-up / ideal linear speed-up, where the speed-up
  is capacity over capacity (the highest rate meeting the SLO with N units, over
  that of the base) and the ideal is the ratio of units: N replicas against one
  (ideal N), or TP-k against TP-1 per accelerator (ideal k). 1.0 = linear; above 1
  is super-linear (e.g. replicas pooling their queues behind one router).
"""

from __future__ import annotations

import math

from pydantic import Field, PositiveFloat

from serving.config.model_spec import AcceleratorKind
from sweep.errors import SpecError
from sweep.strict import Strict

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6


def cost_per_hour(accelerators: int, price_per_accelerator_hour: float) -> float:
    """What running ``accelerators`` costs for one hour."""
    if accelerators < 0 or price_per_accelerator_hour < 0:
        raise ValueError("accelerators and price must be >= 0")
    return accelerators * price_per_accelerator_hour


def cost_per_million_tokens(cost_per_hour_: float, output_tokens_per_s: float) -> float | None:
    """Cost of a million output tokens at this throughput; ``None`` when nothing came out."""
    if output_tokens_per_s <= 0 or not math.isfinite(output_tokens_per_s):
        return None
    return cost_per_hour_ / (output_tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION


def cost_per_request(cost_per_hour_: float, requests_per_s: float) -> float | None:
    """Cost of one successful request at this rate; ``None`` when none succeeded."""
    if requests_per_s <= 0 or not math.isfinite(requests_per_s):
        return None
    return cost_per_hour_ / (requests_per_s * SECONDS_PER_HOUR)


def cost_per_million_chars(cost_per_million_tokens_: float | None, chars_per_token: float | None) -> float | None:
    """A cost per million tokens as a cost per million characters of text that
    averages ``chars_per_token``; ``None`` when either is unknown."""
    if cost_per_million_tokens_ is None or chars_per_token is None:
        return None
    if chars_per_token <= 0 or not math.isfinite(chars_per_token):
        raise ValueError("characters per token must be > 0")
    return cost_per_million_tokens_ / chars_per_token


def scaling_efficiency(capacity: float, units: float, base_capacity: float, base_units: float = 1.0) -> float | None:
    """``(capacity / base_capacity) / (units / base_units)``: a four-GPU job at 3.6x one
    GPU is 0.9; ``None`` without a base capacity."""
    if units <= 0 or base_units <= 0:
        raise ValueError("units must be > 0")
    if base_capacity <= 0:
        return None
    return (capacity / base_capacity) / (units / base_units)


class Price(Strict):
    """One accelerator-hour's price, where it comes from and when it was read."""

    per_hour: PositiveFloat
    source: str = Field(min_length=8, description="who lists it, which product, which region")
    as_of: str = Field(pattern=r"^20\d\d-(0[1-9]|1[0-2])$", description="YYYY-MM the price was read")


class PriceTable(Strict):
    """Prices per accelerator-hour (a CPU "accelerator" is one core), in ``currency``."""

    currency: str = "USD"
    per_accelerator_hour: dict[AcceleratorKind, Price] = Field(min_length=1)
    notes: str = ""

    def price(self, kind: AcceleratorKind) -> Price:
        """The entry of ``kind``; :class:`SpecError` (listing the priced kinds) if unpriced."""
        try:
            return self.per_accelerator_hour[kind]
        except KeyError:
            known = ", ".join(sorted(k.value for k in self.per_accelerator_hour))
            raise SpecError(f"no price for accelerator {kind.value!r}; priced: {known}") from None

    def hourly(self, kind: AcceleratorKind) -> float:
        """The price of one ``kind`` accelerator for one hour."""
        return self.price(kind).per_hour
