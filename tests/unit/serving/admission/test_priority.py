"""Priority classes: the class a request runs in, the config's checks, and the bound's
ceilings per class (pure)."""

import pytest
from pydantic import ValidationError

from serving.admission.api_keys import ANONYMOUS_CALLER, Caller, parse_keys
from serving.admission.bound import AdmissionController
from serving.admission.priority import HEADER_PARAM, request_class
from serving.config.gateway import KeyLimits
from serving.config.priority import PriorityClass, PrioritySpec
from serving.errors import ConfigError, InvalidRequestError, OverloadedError, PermissionDeniedError

SPEC = PrioritySpec()  # interactive 1.0, batch 0.75, sheddable 0.5
KEY = "sk-clinic-0123456789abcdef"


def test_a_request_may_lower_its_class_never_raise_it():
    batch = Caller("nightly", priority_class="batch")
    assert request_class(batch, None, SPEC) == "batch"
    assert request_class(batch, "sheddable", SPEC) == "sheddable"
    assert request_class(batch, " Batch ", SPEC) == "batch"
    with pytest.raises(PermissionDeniedError) as err:
        request_class(batch, "interactive", SPEC)
    assert err.value.param == HEADER_PARAM and "may not raise" in err.value.message
    with pytest.raises(InvalidRequestError) as err:
        request_class(batch, "urgent", SPEC)
    assert err.value.param == HEADER_PARAM and "interactive, batch, sheddable" in err.value.message


def test_without_keys_requests_have_the_configured_default_class():
    spec = PrioritySpec(classes=(PriorityClass(name="gold"), PriorityClass(name="bronze", max_share=0.5)),
                        default_class="bronze")
    assert request_class(ANONYMOUS_CALLER, None, spec) == "bronze"
    with pytest.raises(PermissionDeniedError):
        request_class(ANONYMOUS_CALLER, "gold", spec)


def test_the_keys_file_sets_class_and_weight_and_refuses_unknown_ones():
    alice, bob = parse_keys(f"alice:{KEY} class=batch weight=2.5\nbob sk-bob-0123456789abcdef",
                            defaults=KeyLimits(), source="keys")
    assert (alice.priority_class, alice.weight) == ("batch", 2.5)
    assert (bob.priority_class, bob.weight) == ("interactive", 1.0)
    for bad in ("class=urgent", "class=batch class=sheddable", "weight=0", "weight=-1", "weight=x",
                "weight=1001"):
        with pytest.raises(ConfigError, match="keys line 2") as err:
            parse_keys(f"# keys\nalice:{KEY} {bad}", defaults=KeyLimits(), source="keys")
        assert KEY not in str(err.value)


def test_the_config_checks_its_classes():
    for bad in (dict(default_class="gold"),
                dict(classes=(PriorityClass(name="a"), PriorityClass(name="a", max_share=0.5))),
                dict(classes=(PriorityClass(name="a", max_share=0.5),), default_class="a"),
                dict(classes=(PriorityClass(name="a"), PriorityClass(name="b", max_share=0.3),
                              PriorityClass(name="c", max_share=0.6)), default_class="a"),
                dict(classes=())):
        with pytest.raises(ValidationError):
            PrioritySpec(**bad)


def test_under_rising_load_the_lowest_class_is_refused_first():
    controller = AdmissionController(8)  # batch may fill 6, sheddable 4, interactive 8
    for _ in range(4):
        controller.admit("s", klass="sheddable")
    with pytest.raises(OverloadedError) as err:
        controller.admit("s", klass="sheddable")
    assert err.value.reason == "priority" and err.value.retry_after_s == 1
    controller.admit("b", klass="batch")
    controller.admit("b", klass="batch")
    with pytest.raises(OverloadedError) as err:
        controller.admit("b", klass="batch")
    assert err.value.reason == "priority"
    controller.admit("i")
    controller.admit("i")  # the interactive reserve: 2 slots no lower class can take
    with pytest.raises(OverloadedError) as err:
        controller.admit("i")
    assert err.value.reason == "overloaded"
    assert [controller.in_flight_of_class(c) for c in SPEC.names] == [2, 2, 4]


def test_in_an_engine_replica_a_lower_class_fills_at_most_its_share_of_the_sequences():
    controller = AdmissionController(256, slots=8)  # direct mode: max_num_seqs 8
    assert [controller.ceiling(c) for c in SPEC.names] == [256, 6, 4]
    tiny = AdmissionController(1, slots=8)
    assert [tiny.ceiling(c) for c in SPEC.names] == [1, 1, 1]  # a lower class keeps one slot


def test_fair_sharing_is_within_a_class():
    controller = AdmissionController(8)
    for _ in range(6):
        controller.admit("nightly", klass="batch").charge(500)
    controller.admit("clinic").charge(10)  # interactive: batch's counters are not its business
    controller.admit("clinic").charge(10)
    assert controller.counter("nightly", "batch") == 3000 and controller.counter("clinic") == 20


def test_class_names_are_the_configs_and_a_command_that_only_sends_reads_any():
    gold = PrioritySpec(classes=(PriorityClass(name="gold"), PriorityClass(name="bronze", max_share=0.5)),
                        default_class="gold")
    (entry,) = parse_keys(f"a:{KEY} class=bronze", defaults=KeyLimits(), priority=gold)
    assert entry.priority_class == "bronze"
    with pytest.raises(ConfigError, match="gold, bronze"):
        parse_keys(f"a:{KEY} class=batch", defaults=KeyLimits(), priority=gold)
    (entry,) = parse_keys(f"a:{KEY} class=bronze", defaults=KeyLimits(), priority=None)
    assert entry.key == KEY
    with pytest.raises(ConfigError):
        parse_keys(f"a:{KEY} class=Not-A-Name!", defaults=KeyLimits(), priority=None)
