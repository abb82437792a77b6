"""The simulator's traffic: synthetic workloads drawn straight as token ids give the
plan the text path gives (build the text, tokenise it), id for id; a traffic cache
prepares each plan once."""

import pytest

from loadtest.cli import build_parser, config_from_args
from loadtest.workloads.base import WorkloadContext
from simulator.config import SimulationConfig
from simulator.simulate import simulate
from simulator.synthetic_ids import synthetic_id_plan
from simulator.traffic import (
    DEFAULT_MAX_TOKENS,
    StageTraffic,
    TrafficCache,
    WordTokenizer,
    plan_ids,
    stage_traffic,
    tokenizer_loader,
)

WORKLOADS = [
    "random:input_len=300,output_len=40",
    "random:input_len=300,output_len=40,spread=0.5",
    "random:input_len=300,output_len=40,spread=0.3,dist=normal,include_template=true",
    "shared-prefix:num_prefixes=3,prefix_len=200,question_len=20,output_len=30,spread=0.4",
    "multi-turn:turns=3,input_len=50,output_len=20,system_len=40,think_time_s=1.5,spread=0.2",
    "multi-turn:turns=2,input_len=50,output_len=20",
]


def load_config(*args: str):
    return config_from_args(build_parser().parse_args(
        ["run", "--target", "http://simulated.invalid", "--no-metrics", *args]))


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("workload", WORKLOADS)
def test_synthetic_ids_are_the_text_paths_ids(workload, chat):
    tokenizer = WordTokenizer()
    config = load_config("--workload", workload, "--requests", "10")
    ctx = WorkloadContext(seed=7, chat=chat, tokenizer_loader=lambda: tokenizer)
    drawn = synthetic_id_plan(config.workload, 25, ctx)
    tokenised = plan_ids(config.workload.build(25, ctx), tokenizer, default_max_tokens=DEFAULT_MAX_TOKENS)
    assert drawn == tokenised
    assert len(drawn.sessions) == 25
    assert StageTraffic(drawn, tokenizer, chat=chat).sessions == StageTraffic(tokenised, tokenizer, chat=chat).sessions


def test_a_tokenizer_without_one_token_words_takes_the_text_path():
    class Other(WordTokenizer):
        one_token_words = False

    config = load_config("--workload", "random:input_len=30,output_len=4", "--requests", "10")
    ctx = WorkloadContext(seed=0, chat=True, tokenizer_loader=Other)
    assert synthetic_id_plan(config.workload, 5, ctx) is None


def test_a_bad_template_length_is_reported_by_the_workload():
    from loadtest.errors import WorkloadError

    config = load_config("--workload", "random:input_len=20,output_len=4,include_template=true", "--requests", "5")
    with pytest.raises(WorkloadError, match="template"):
        stage_traffic(config, config.profile.next_stage([]), WordTokenizer)


def test_prompts_grow_turn_by_turn_with_the_previous_answer():
    config = load_config("--workload", "multi-turn:turns=3,input_len=10,output_len=4", "--requests", "6")
    traffic = stage_traffic(config, config.profile.next_stage([]), WordTokenizer)
    first, second = traffic.prompt(0, 0), traffic.prompt(0, 1)
    session = traffic.sessions[0]
    assert second[:len(first)] == first
    assert len(second) == len(first) + session.max_tokens[0] + 5 + len(session.turns[1])
    assert first[:30] == (1,) * 30 and first[30:] == session.turns[0]


def test_a_traffic_cache_builds_each_plan_once_and_hands_out_fresh_traffic():
    config = load_config("--workload", "random:input_len=40,output_len=4", "--requests", "30", "--seed", "5")
    plan = config.profile.next_stage([])
    cache = TrafficCache()
    loader, _ = tokenizer_loader(config, None, cache=cache)
    first = stage_traffic(config, plan, loader, cache=cache)
    first.next_session()
    again = stage_traffic(config, plan, loader, cache=cache)
    assert cache.built == 1 and tokenizer_loader(config, None, cache=cache)[0] is loader
    assert again.sessions == first.sessions and again.next_session() == 0  # its own cursor
    stage_traffic(load_config("--workload", "random:input_len=40,output_len=4", "--requests", "30", "--seed", "6"),
                  plan, loader, cache=cache)
    assert cache.built == 2
    assert stage_traffic(config, plan, tokenizer_loader(config, None)[0]).sessions == first.sessions


def test_a_simulation_with_a_traffic_cache_is_the_same_simulation():
    config = load_config("--model", "llama-3.3-70b-instruct", "--profile", "poisson:rate=4", "--workload",
                         "random:input_len=200,output_len=30,spread=0.5", "--duration", "20s", "--slo", "ttft_p95=1s")
    sim = SimulationConfig(hardware="h200", model="llama-3.3-70b-instruct", replicas=1, tensor_parallel=4)
    cache = TrafficCache()

    def figures(**kwargs) -> dict:
        return simulate(config, sim, **kwargs).summary.stages[0].model_dump(exclude={"started_unix"})

    plain = figures()
    assert figures(traffic_cache=cache) == plain
    assert figures(traffic_cache=cache) == plain
    assert cache.built == 1
