"""Redaction of recorded content: the default patterns and configured ones."""

from __future__ import annotations

import pytest

from serving.config.tenancy import DEFAULT_REDACTIONS, AuditSpec, RedactionPattern
from serving.tenancy.redaction import Redactor

redact = Redactor(DEFAULT_REDACTIONS)


@pytest.mark.parametrize("text, expected", [
    ("gọi 0912 345 678 nhé", "gọi [REDACTED:phone] nhé"),
    ("call +84 912 345 678", "call [REDACTED:phone]"),
    ("số 0912.345.678", "số [REDACTED:phone]"),
    ("intl +44 20 7946 0958", "intl [REDACTED:phone]"),
    ("CCCD 001203004567.", "CCCD [REDACTED:national_id]."),
    ("CMND: 123456789", "CMND: [REDACTED:national_id]"),
    ("mail an.nguyen+kham@benhvien.com.vn now", "mail [REDACTED:email] now"),
    ("both a@b.vn and 0987654321", "both [REDACTED:email] and [REDACTED:phone]"),
])
def test_the_default_patterns(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "dose 500 mg twice", "year 2024", "record 1234567890123 (13 digits)", "ten digits 1234567890",
    "room 12-34", "",
])
def test_what_is_not_personal_data_stays(text):
    assert redact(text) == text


def test_configured_patterns_replace_the_defaults_and_may_hold_groups():
    custom = Redactor([RedactionPattern(name="mrn", regex=r"MRN-(\d{6})")])
    assert custom("patient MRN-123456, call 0912345678") == "patient [REDACTED:mrn], call 0912345678"


def test_a_bad_pattern_or_a_repeated_name_is_a_config_error():
    with pytest.raises(ValueError, match="not a regular expression"):
        RedactionPattern(name="bad", regex="(")
    with pytest.raises(ValueError, match="unique"):
        AuditSpec(redact=[RedactionPattern(name="x", regex="a"), RedactionPattern(name="x", regex="b")])
