"""Counted cloudpickle by-value registrations (Ray's real cloudpickle; no cluster)."""

import sys
import types

from ray import cloudpickle

from serving.cluster.pickle_by_value import count_by_value_registrations


def imported(name: str, monkeypatch) -> types.ModuleType:
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)  # cloudpickle takes only imported modules
    return module


def test_interleaved_pairs_nest_instead_of_failing(monkeypatch):
    count_by_value_registrations()
    count_by_value_registrations()  # once per process: a second call changes nothing
    module = imported("serveout_test_by_value", monkeypatch)
    cloudpickle.register_pickle_by_value(module)  # thread A
    cloudpickle.register_pickle_by_value(module)  # thread B, before A is done
    cloudpickle.unregister_pickle_by_value(module)  # A: B still needs it
    assert module.__name__ in cloudpickle.list_registry_pickle_by_value()
    cloudpickle.unregister_pickle_by_value(module)  # B: would raise without counting
    assert module.__name__ not in cloudpickle.list_registry_pickle_by_value()
