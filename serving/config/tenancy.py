"""Settings of the per-tenant records: the usage store and the audit trail (part of
:class:`serving.config.stack.StackConfig`; docs/serving.md, "Usage metering" and
"Audit trail")."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from serving.config.model_spec import Strict


class UsageSpec(Strict):
    """The durable usage store: one SQLite file (WAL) every engine replica of the machine
    adds its requests to, a batch at a time."""

    enabled: bool = Field(
        True, description="write the usage store (its cost is one append per request; writes are "
        "batched in a background thread); the Prometheus usage counters are on either way")
    path: Path | None = Field(
        None, description="the SQLite file; None = usage.sqlite in the run-state folder "
        "($SERVEOUT_HOME/run, on the machine that runs the replica)")
    flush_interval_s: float = Field(
        1.0, gt=0, le=60, description="how often a replica writes its pending records: what a crash "
        "of the replica's process can lose at most")


class RedactionPattern(Strict):
    """One pattern the audit trail replaces in prompt and output text (``[REDACTED:name]``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


DEFAULT_REDACTIONS: tuple[RedactionPattern, ...] = (
    RedactionPattern(name="email", regex=r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
    # Vietnamese citizen ID (CCCD, 12 digits) before the old ID (CMND, 9 digits) and phones.
    RedactionPattern(name="national_id", regex=r"(?<!\d)(?:\d{12}|\d{9})(?!\d)"),
    # Vietnamese numbers (0 or +84, then 9 digits, spaces/dots/dashes allowed) and other
    # international ones (+ then 8-14 digits).
    RedactionPattern(name="phone", regex=r"(?<![\w+])(?:(?:\+84|0084|0)(?:[ .-]?\d){9}|\+\d(?:[ .-]?\d){7,13})(?!\d)"),
)


class AuditSpec(Strict):
    """The audit trail: one JSON line per request, chained by SHA-256, rotated by size."""

    enabled: bool = Field(False, description="write the audit trail (off by default: its files grow "
                          "with every request and are the operator's to keep and delete)")
    dir: Path | None = Field(
        None, description="the folder of the audit files (one chain per replica process); None = "
        "audit/ in the run-state folder")
    content: bool = Field(False, description="also record the prompt and output text, redacted "
                          "(off: no content at all)")
    redact: tuple[RedactionPattern, ...] = Field(
        DEFAULT_REDACTIONS, description="patterns replaced in recorded content (default: e-mail "
        "addresses, Vietnamese national ID numbers, phone numbers)")
    max_file_bytes: int = Field(64 * 1024 * 1024, ge=4096, description="rotate a file past this size "
                                "(the chain continues in the next one)")

    @model_validator(mode="after")
    def _unique_names(self) -> "AuditSpec":
        names = [p.name for p in self.redact]
        if len(names) != len(set(names)):
            raise ValueError("audit.redact: pattern names must be unique")
        return self
