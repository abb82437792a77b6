"""The price table: cost per accelerator-hour by accelerator kind (user-editable YAML).

Every entry names its source and the month it was read (``as_of``, ``YYYY-MM``): a
price without them is a config error, so a cost in a report can always be traced.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import Field, PositiveFloat, ValidationError

from sweep.base import Strict
from sweep.errors import SpecError
from serving.config.model_spec import AcceleratorKind


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


def load_price_table(path: Path) -> PriceTable:
    """Read a price table YAML file; :class:`SpecError` names the file on any problem."""
    try:
        return PriceTable.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise SpecError(f"invalid price table {path}: {problems}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"invalid price table {path}: {exc}") from exc
