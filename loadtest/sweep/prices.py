"""The price table: cost per accelerator-hour by accelerator kind (user-editable YAML)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import Field, PositiveFloat, ValidationError

from loadtest.sweep.base import Strict
from loadtest.sweep.errors import SpecError
from serving.config.model_spec import AcceleratorKind


class PriceTable(Strict):
    """Prices per accelerator-hour (a CPU "accelerator" is one core), in ``currency``."""

    currency: str = "USD"
    per_accelerator_hour: dict[AcceleratorKind, PositiveFloat] = Field(min_length=1)
    notes: str = ""

    def hourly(self, kind: AcceleratorKind) -> float:
        """The price of one ``kind`` accelerator for one hour; :class:`SpecError` if unpriced."""
        try:
            return self.per_accelerator_hour[kind]
        except KeyError:
            known = ", ".join(sorted(k.value for k in self.per_accelerator_hour))
            raise SpecError(f"no price for accelerator {kind.value!r}; priced: {known}") from None


def load_price_table(path: Path) -> PriceTable:
    """Read a price table YAML file; :class:`SpecError` names the file on any problem."""
    try:
        return PriceTable.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise SpecError(f"invalid price table {path}: {exc}") from exc
