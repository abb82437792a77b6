"""Command-line arguments the benchmarks share."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def choice_list(parser: argparse.ArgumentParser, flag: str, text: str, choices: Sequence[str]) -> list[str]:
    """``text`` (comma-separated) as a list of some of ``choices``, in the order given;
    ``parser.error`` (exit 2) when it names none or one that is not a choice."""
    picked = [item.strip() for item in text.split(",") if item.strip()]
    if not picked or set(picked) - set(choices):
        parser.error(f"{flag} takes some of {', '.join(choices)}")
    return picked
