"""The benchmarks' shared comma-list argument (pure)."""

import argparse

import pytest

from benchmarks.common.arguments import choice_list


def test_a_comma_list_keeps_its_order_and_refuses_an_unknown_or_empty_choice():
    parser = argparse.ArgumentParser(prog="bench")
    assert choice_list(parser, "--faults", " node, head ", ("head", "node")) == ["node", "head"]
    for bad in ("", "node,nope"):
        with pytest.raises(SystemExit) as exit_:
            choice_list(parser, "--faults", bad, ("head", "node"))
        assert exit_.value.code == 2
