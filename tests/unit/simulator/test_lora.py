"""LoRA in the simulator: vLLM's slot rule (a waiting request whose adapter would exceed
max_loras is passed over), the host cache's loads and evictions, the step-time factor,
the model mix naming adapters, and the router's slot-aware ranking."""

from __future__ import annotations

import pytest

from loadtest.cli import build_parser, config_from_args
from serving.config.model_spec import LoraSettings
from serving.config.stack import RoutingSpec
from simulator.config import SimulationConfig
from simulator.errors import SimulationConfigError
from simulator.hardware import load_hardware
from simulator.lora import BASE, AdapterCounters, AdapterSlots, LoraCosts, adapter_bytes, numbered_adapters
from simulator.replica import Replica
from simulator.replica_setup import load_model, replica_setup
from simulator.sequence import Seq
from simulator.simulate import simulate
from tests.unit.simulator.fakes import FakeStepModel

COSTS = LoraCosts(step_factor=2.0, load_s=0.5, activate_s=0.1)


def run(replica: Replica, seqs: list[Seq]) -> tuple[float, list[Seq]]:
    """Every sequence to its end: (the last step's end, the sequences in finishing order)."""
    for seq in seqs:
        replica.add(seq)
    done, t = [], 0.0
    while (end := replica.plan(t)) is not None:
        done.extend(replica.commit())
        t = end
    return t, done


def lora_replica(max_loras: int = 1, host_slots: int = 4, costs: LoraCosts = COSTS) -> Replica:
    return Replica(FakeStepModel(), num_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048,
                   adapters=AdapterSlots(max_loras, host_slots, costs))


def test_a_request_whose_adapter_has_no_slot_waits_and_those_behind_it_go_first():
    replica = lora_replica(max_loras=1)
    first, blocked, base = Seq(0, 32, 20, (), adapter=1), Seq(1, 32, 4, (), adapter=2), Seq(2, 32, 4, (), adapter=BASE)
    _, done = run(replica, [first, blocked, base])
    assert [s.rid for s in done] == [2, 0, 1]  # the base request passed the blocked one; adapter 2 after adapter 1
    assert replica.token_times(blocked)[0] > replica.token_times(first)[-1]  # it started once adapter 1 was gone
    assert replica.adapters.counters.slot_skips > 0
    assert replica.adapters.running == {}


def test_two_slots_batch_two_adapters_at_once():
    replica = lora_replica(max_loras=2)
    a, b = Seq(0, 32, 20, (), adapter=1), Seq(1, 32, 20, (), adapter=2)
    run(replica, [a, b])
    assert replica.token_times(b)[0] < replica.token_times(a)[-1]
    assert replica.adapters.counters.slot_skips == 0


def test_an_adapter_in_the_batch_slows_every_step_by_the_factor():
    base_end, _ = run(lora_replica(), [Seq(0, 32, 10, ())])
    lora_end, _ = run(lora_replica(costs=LoraCosts(step_factor=2.0)), [Seq(0, 32, 10, (), adapter=1)])
    assert lora_end == pytest.approx(2 * base_end)


def test_a_cold_adapter_stalls_its_first_step_by_its_load_and_activation():
    costs = LoraCosts(load_s=0.5, activate_s=0.1)
    _, [base] = run(base_replica := lora_replica(costs=costs), [Seq(0, 32, 3, ())])
    replica = lora_replica(costs=costs)
    _, [cold] = run(replica, [Seq(0, 32, 3, (), adapter=1)])
    assert replica.token_times(cold)[0] == pytest.approx(base_replica.token_times(base)[0] + 0.6)
    _, [warm] = run(replica, [Seq(1, 32, 3, (), adapter=1)])  # resident now: no stall
    times = replica.token_times(warm)
    assert times[0] - replica.step_times()[replica.step_times().searchsorted(times[0]) - 1] == pytest.approx(
        base_replica.token_times(base)[0])


def test_the_host_cache_loads_each_adapter_once_until_it_overflows():
    slots = AdapterSlots(max_loras=1, host_slots=2, costs=COSTS)
    assert slots.use([1]) == pytest.approx(0.6)  # read from disk, then into the slot
    assert slots.use([1]) == 0.0  # resident
    assert slots.use([2]) == pytest.approx(0.6)
    assert slots.use([1]) == pytest.approx(0.1)  # still in the host cache: only activated
    assert slots.resident == (1,) and slots.cached == (2, 1)
    slots.use([3])  # the cache holds two: adapter 2, the least recently used, is evicted
    assert slots.cached == (1, 3)
    assert (slots.counters.loads, slots.counters.evictions, slots.counters.activations) == (3, 1, 4)


def test_adapters_preloaded_before_traffic_fill_the_host_cache_with_no_stall_or_count():
    slots = AdapterSlots(max_loras=1, host_slots=2, costs=COSTS)
    slots.preload([1, 2, 3])  # three declared, two host slots: the last two stay, as vLLM's LRU keeps them
    assert slots.cached == (2, 3) and slots.counters == AdapterCounters()
    assert slots.use([3]) == pytest.approx(0.1)  # cached: only activated
    assert slots.use([1]) == pytest.approx(0.6)  # evicted at start: read from disk


def test_a_step_never_gives_up_the_slot_of_an_adapter_it_runs():
    slots = AdapterSlots(max_loras=2, host_slots=4, costs=COSTS)
    slots.use([1, 2])
    slots.use([3])  # adapter 1, the oldest, leaves its slot
    assert slots.use([2, 3]) == 0.0
    assert set(slots.resident) == {2, 3}


def test_an_adapter_counts_against_the_slots_while_any_of_its_sequences_run():
    slots = AdapterSlots(max_loras=1, host_slots=1, costs=COSTS)
    slots.start(1)
    slots.start(1)
    assert slots.admits(1) and not slots.admits(2) and slots.admits(BASE)
    slots.stop(1)
    assert not slots.admits(2)
    slots.stop(1)
    assert slots.admits(2) and slots.step_factor == 1.0


def test_slot_settings_vllm_refuses_are_refused():
    with pytest.raises(SimulationConfigError, match="max_loras"):
        AdapterSlots(max_loras=4, host_slots=2, costs=COSTS)


def test_an_adapters_size_is_its_rank_times_every_linear_layers_inputs_and_outputs():
    arch = load_model("llama-3.1-8b-instruct", SimulationConfig(hardware="h200", model="x").models_dir).architecture
    # Llama 3.1 8B: hidden 4096, 32 heads x 128, 8 KV heads, MLP 14336, 32 layers.
    per_layer = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 2 * (4096 + 14336) + (14336 + 4096)
    assert adapter_bytes(arch, 16, 2) == 16 * per_layer * 32 * 2


def test_a_profiles_load_time_grows_with_the_adapters_bytes():
    lora = load_hardware("h200").lora
    small, large = lora.costs(10e6), lora.costs(400e6)
    assert large.load_s - small.load_s == pytest.approx(390e6 / (lora.disk_gbps.value * 1e9))
    assert large.step_factor == small.step_factor == lora.step_factor.value


def test_numbered_adapters_name_a_count():
    assert numbered_adapters(3) == ("adapter-1", "adapter-2", "adapter-3")


def load_config(*args: str):
    return config_from_args(build_parser().parse_args(
        ["run", "--target", "http://simulated.invalid", "--no-metrics", *args]))


def cpu(**kwargs) -> SimulationConfig:
    return SimulationConfig(hardware="cpu", model="smollm2-135m-instruct", **kwargs)


MIX = ("--profile", "poisson:rate=0.5", "--workload", "random:input_len=32,output_len=8", "--duration", "60s")


def test_a_model_mix_names_the_adapters_and_the_report_has_figures_per_model():
    config = load_config(*MIX, "--model-mix", "smollm2-135m-instruct=1,clinic=1,pharmacy=2")
    result = simulate(config, cpu(adapters=("clinic", "pharmacy")))
    models = {r.model for r in result.records}
    assert models == {"smollm2-135m-instruct", "clinic", "pharmacy"}
    assert {m.model for m in result.summary.headline.models} == models
    counters = result.stages[0].adapters  # both loaded before traffic: no request reads one from disk
    assert (counters.loads, counters.activations) == (0, 2)


def test_a_mix_naming_a_model_not_served_is_refused_before_simulating():
    config = load_config(*MIX, "--model-mix", "clinic=1,radiology=1")
    with pytest.raises(SimulationConfigError, match="radiology"):
        simulate(config, cpu(adapters=("clinic",)))


def test_a_zipf_mix_ranks_the_model_first_then_its_adapters():
    config = load_config(*MIX, "--model-mix", "zipf:1")
    result = simulate(config, cpu(adapters=numbered_adapters(3)))
    counts = {m.model: m.requests for m in result.summary.headline.models}
    assert counts["smollm2-135m-instruct"] > counts["adapter-3"]


def test_adapters_on_hardware_without_lora_figures_are_refused(tmp_path):
    profile = load_hardware("cpu").model_copy(update={"lora": None})
    path = tmp_path / "nolora.yaml"
    path.write_text(__import__("yaml").safe_dump(profile.model_dump(mode="json", exclude_none=True)))
    with pytest.raises(SimulationConfigError, match="no `lora:` figures"):
        replica_setup(SimulationConfig(hardware=str(path), model="smollm2-135m-instruct", adapters=("clinic",)))


def test_a_name_served_twice_is_refused():
    with pytest.raises(ValueError, match="served twice"):
        cpu(adapters=("clinic", "smollm2-135m-instruct"))


def test_the_engine_lora_settings_bound_the_slots():
    engine = load_model("smollm2-135m-instruct", cpu().models_dir).engine
    sim = cpu(adapters=numbered_adapters(4), engine=engine.model_copy(update={"lora": LoraSettings(max_loras=3)}))
    replica = replica_setup(sim).replica()
    assert replica.adapters.max_loras == 3 and replica.adapters.host_slots == 16


def test_slot_aware_routing_keeps_each_adapter_where_it_runs():
    """Two replicas with one slot each and two adapters: with the slot-aware ranking a
    replica runs one adapter at a time far more often than round-robin alone."""
    config = load_config("--profile", "poisson:rate=1", "--workload", "random:input_len=32,output_len=16",
                         "--duration", "120s", "--model-mix", "a=1,b=1")
    engine = load_model("smollm2-135m-instruct", cpu().models_dir).engine.model_copy(
        update={"lora": LoraSettings(max_loras=1)})

    def skips(slots: bool) -> int:
        sim = cpu(replicas=2, adapters=("a", "b"), engine=engine,
                  routing=RoutingSpec(policy="round-robin", adapter_slots=slots))
        return simulate(config, sim).stages[0].adapters.slot_skips

    assert skips(True) < skips(False)


def test_the_router_sees_each_replicas_host_cache_and_keeps_adapters_where_they_are_cached():
    """Two replicas, each with two batch slots and two adapters' room in host memory, four
    adapters at a light load: the router learns each replica's host cache from its stats
    poll, as serving's does, and keeps each adapter where it needs no disk read; routers
    that never hear of the caches (stats polled once an hour) read adapters again and
    again (7 loads against 33 when this test was written)."""
    config = load_config("--profile", "poisson:rate=1", "--workload", "random:input_len=32,output_len=8",
                         "--duration", "120s", "--model-mix", "a=1,b=1,c=1,d=1")
    engine = load_model("smollm2-135m-instruct", cpu().models_dir).engine.model_copy(
        update={"lora": LoraSettings(max_loras=2, max_cpu_loras=2)})

    def loads(stats_period_s: float) -> int:
        sim = cpu(replicas=2, adapters=("a", "b", "c", "d"), engine=engine,
                  routing=RoutingSpec(policy="least-loaded", stats_period_s=stats_period_s))
        return simulate(config, sim).stages[0].adapters.loads

    assert loads(1.0) < loads(3600.0) / 2
