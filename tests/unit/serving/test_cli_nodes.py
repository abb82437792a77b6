"""`serving up --nodes N`: the engines take the worker nodes' accelerator slots, and
replicas that cannot fit are refused before anything starts."""

import pytest

from serving import cli
from serving.cluster.nodes import SLOT_RESOURCE
from serving.engine.placement import placement_bundles
from serving.errors import ConfigError


def _config(*argv: str):
    return cli.stack_config_from_args(cli.build_parser().parse_args(["up", *argv]), cli._store())


def test_with_several_nodes_each_rank_takes_a_slot():
    config = _config("--nodes", "3", "--replicas", "2", "--engine", "null")
    assert config.replicas.node_resource == SLOT_RESOURCE
    assert placement_bundles(config) == [{"CPU": 1.0, SLOT_RESOURCE: 1.0}]


def test_one_node_takes_no_slot():
    config = _config("--engine", "null")
    assert config.replicas.node_resource is None and placement_bundles(config) == [{"CPU": 1.0}]


@pytest.mark.parametrize("argv", [("--nodes", "3", "--replicas", "3"),
                                  ("--nodes", "2", "--replicas", "2", "--slots-per-node", "1"),
                                  ("--nodes", "3", "--autoscale", "--min-replicas", "1", "--max-replicas", "5")])
def test_replicas_that_do_not_fit_the_worker_nodes_are_refused(argv):
    with pytest.raises(ConfigError, match="do not fit"):
        _config(*argv, "--engine", "null")


def test_more_slots_per_node_fit_more_replicas():
    assert _config("--nodes", "2", "--replicas", "3", "--slots-per-node", "3", "--engine", "null")
