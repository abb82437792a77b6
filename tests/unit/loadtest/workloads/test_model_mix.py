"""``--model-mix``: the spec, the shares it gives against a target's models, and the seeded
assignment of a model to each session (pure: no server)."""

from collections import Counter

import pytest
from pydantic import ValidationError

from loadtest.cli import EXIT_USAGE, main
from loadtest.errors import ConfigError, TargetError
from loadtest.workloads.base import Session, Turn, WorkloadPlan
from loadtest.workloads.model_mix import ModelMix, assign_models, check_named_models, parse_model_mix, quotas

LISTED = ["base", "clinic", "pharmacy", "dental"]  # as /v1/models lists them: the base first


def plan_of(n: int, own: dict[int, str] | None = None) -> WorkloadPlan:
    """``n`` one-turn sessions; those in ``own`` name their model (a JSONL line's)."""
    own = own or {}
    return WorkloadPlan(sessions=tuple(
        Session(id=i, turns=(Turn(content=f"q{i}", max_tokens=4),),
                extra_body={"model": own[i], "priority": 1} if i in own else None)
        for i in range(n)))  # fmt: skip


def models_of(plan: WorkloadPlan) -> list[str]:
    return [s.extra_body["model"] for s in plan.sessions]


@pytest.mark.parametrize(("spec", "mix"), [
    ("clinic=5,pharmacy=3,base=2", ModelMix(weights={"clinic": 5, "pharmacy": 3, "base": 2})),
    (" clinic = 0.5 , org/model:v2=1 ", ModelMix(weights={"clinic": 0.5, "org/model:v2": 1})),
    ("zipf:1.1", ModelMix(zipf_s=1.1)),
    ("zipf:2:3", ModelMix(zipf_s=2.0, zipf_n=3)),
])  # fmt: skip
def test_good_specs(spec, mix):
    assert parse_model_mix(spec) == mix
    assert parse_model_mix(mix.describe()) == mix  # the reports show the mix as it is given


@pytest.mark.parametrize(("spec", "says"), [
    ("", "empty"),
    ("   ", "empty"),
    ("clinic", "'clinic' is not MODEL=WEIGHT"),
    ("=3", "'=3' is not MODEL=WEIGHT"),
    ("clinic=1,", "stray comma"),
    ("clinic=1,clinic=2", "'clinic' is given twice"),
    ("clinic=0", "the weight of 'clinic' must be a finite number > 0, got '0'"),
    ("clinic=-2,pharmacy=1", "the weight of 'clinic' must be a finite number > 0"),
    ("clinic=inf", "finite number > 0"),
    ("clinic=nan", "finite number > 0"),
    ("clinic=lots", "the weight of 'clinic' must be a number, got 'lots'"),
    ("zipf", "zipf:S or zipf:S:N"),
    ("zipf:", "zipf:S or zipf:S:N"),
    ("zipf:1:2:3", "zipf:S or zipf:S:N"),
    ("zipf:0", "the Zipf exponent S must be a finite number > 0"),
    ("zipf:-1", "the Zipf exponent S must be a finite number > 0"),
    ("zipf:steep", "the Zipf exponent S must be a number"),
    ("zipf:1:0", "N must be a whole number >= 1, got '0'"),
    ("zipf:1:two", "N must be a whole number >= 1"),
])  # fmt: skip
def test_bad_specs_are_refused_with_the_reason(spec, says):
    with pytest.raises(ConfigError, match="MODEL=WEIGHT,... or zipf:S") as error:
        parse_model_mix(spec)
    assert says in str(error.value) and str(error.value).startswith("--model-mix ")


def test_the_config_refuses_what_the_spec_refuses():
    for bad in ({}, {"weights": {"a": 0.0}}, {"weights": {"a": float("nan")}}, {"zipf_s": 0.0},
                {"zipf_s": 1.0, "weights": {"a": 1.0}}, {"zipf_n": 2}, {"zipf_s": 1.0, "zipf_n": 0}):
        with pytest.raises(ValidationError):
            ModelMix(**bad)


@pytest.mark.parametrize("spec", ["clinic=0", "", "zipf:0", "zipf:1:0", "clinic"])
def test_a_bad_spec_is_a_usage_error_before_anything_runs(spec, capsys):
    # the target is unreachable: the spec is refused before it is even tried
    assert main(["run", "--target", "http://127.0.0.1:9", "--model-mix", spec, "--requests", "1"]) == EXIT_USAGE
    assert "--model-mix" in capsys.readouterr().err


def test_weights_are_normalised_and_must_be_served():
    shares = parse_model_mix("clinic=3,pharmacy=1").shares(LISTED, "http://t")
    assert shares == {"clinic": 0.75, "pharmacy": 0.25}
    with pytest.raises(TargetError, match=r"does not serve 'dentist', 'surgery'; it serves \['base'"):
        parse_model_mix("clinic=1,dentist=1,surgery=2").shares(LISTED, "http://t")
    # a target that lists no models cannot be checked: the weights are taken as given
    assert parse_model_mix("anything=1").shares(None, "http://t") == {"anything": 1.0}


def test_zipf_ranks_the_listed_models_in_listed_order():
    shares = parse_model_mix("zipf:1").shares(LISTED, "http://t")
    harmonic = 1 + 1 / 2 + 1 / 3 + 1 / 4
    assert list(shares) == LISTED
    assert shares == pytest.approx({m: 1 / (k * harmonic) for k, m in enumerate(LISTED, start=1)}, rel=1e-12)
    assert parse_model_mix("zipf:2:2").shares(LISTED, "http://t") == pytest.approx({"base": 0.8, "clinic": 0.2})
    steep = parse_model_mix("zipf:3").shares(LISTED, "http://t")
    assert steep["base"] > steep["clinic"] > steep["pharmacy"] > steep["dental"]
    with pytest.raises(TargetError, match="lists only 4 models"):
        parse_model_mix("zipf:1:5").shares(LISTED, "http://t")
    for nothing in (None, []):
        with pytest.raises(TargetError, match="lists no models"):
            parse_model_mix("zipf:1").shares(nothing, "http://t")


@pytest.mark.parametrize(("weights", "n", "expected"), [
    ([5, 3, 2], 10, [5, 3, 2]), ([5, 3, 2], 7, [4, 2, 1]), ([1, 1, 1], 10, [4, 3, 3]), ([1, 1], 0, [0, 0]),
    ([0.999, 0.001], 3, [3, 0]),
])  # fmt: skip
def test_quotas_split_exactly(weights, n, expected):
    assert quotas(weights, n) == expected


def test_the_assignment_is_seeded_and_keeps_the_shares():
    shares = parse_model_mix("clinic=5,pharmacy=3,base=2").shares(LISTED, "http://t")
    plan = plan_of(10_000)
    first = models_of(assign_models(plan, shares, seed=7))
    assert models_of(assign_models(plan, shares, seed=7)) == first  # the same seed: the same assignment
    other = models_of(assign_models(plan, shares, seed=8))
    assert other != first and Counter(other) == Counter(first)  # another order, the same shares
    counts = Counter(first)
    for model, share in shares.items():
        assert abs(counts[model] / len(first) - share) <= 1e-3, model
    # spread over the pool, not in blocks: every tenth of the sessions holds each model near its share
    for tenth in range(10):
        part = Counter(first[tenth * 1000:(tenth + 1) * 1000])
        assert all(abs(part[m] / 1000 - s) < 0.06 for m, s in shares.items()), (tenth, part)


def test_sessions_naming_their_own_model_keep_it():
    own = {i: "dental" for i in range(0, 100, 4)}  # a quarter of the lines name an adapter
    plan = assign_models(plan_of(100, own), {"clinic": 0.5, "pharmacy": 0.5}, seed=1)
    for i, session in enumerate(plan.sessions):
        if i in own:
            assert session.extra_body == {"model": "dental", "priority": 1}
    assert Counter(models_of(plan)) == {"dental": 25, "clinic": 38, "pharmacy": 37}  # the others split as mixed


def test_without_a_mix_the_plan_is_untouched():
    plan = plan_of(5)
    assert assign_models(plan, None, seed=0) is plan
    assert assign_models(plan, {"clinic": 1.0}, seed=0).model_dump_json().count('"model":"clinic"') == 5


def test_a_model_named_by_the_prompt_file_must_be_served():
    plan = plan_of(8, {i: "dental" for i in range(0, 8, 2)})
    with pytest.raises(TargetError, match=r"does not serve: 'dental'; it serves \['base', 'clinic'\]"):
        check_named_models(plan, ["base", "clinic"], "http://t")
    check_named_models(plan, ["base", "dental"], "http://t")  # served: no error
    check_named_models(plan, None, "http://t")  # the target lists none: unchecked
