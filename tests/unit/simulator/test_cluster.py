"""The cluster simulation: Little's law on a steady load, determinism, and the real
serving objects deciding (session routing, admission 429s, queue-depth autoscaling)."""

import numpy as np
import pytest

from loadtest.analysis.records import ErrorKind
from loadtest.cli import build_parser, config_from_args
from serving.config.stack import AutoscalingSpec, RoutingPolicyName, RoutingSpec
from serving.admission.bound import AdmissionController
from serving.routing.session import SessionPolicy
from simulator.cluster import ClusterSim
from simulator.config import SimulationConfig
from simulator.replica_setup import replica_setup
from simulator.simulate import simulate
from simulator.traffic import WordTokenizer, stage_traffic


def load_config(*args: str):
    return config_from_args(build_parser().parse_args(
        ["run", "--target", "http://simulated.invalid", "--no-metrics", *args]))


def cpu(**kwargs) -> SimulationConfig:
    return SimulationConfig(hardware="cpu", model="smollm2-135m-instruct", **kwargs)


def test_littles_law_holds_on_a_steady_load():
    config = load_config("--profile", "poisson:rate=1", "--workload", "random:input_len=64,output_len=16",
                         "--duration", "300s")
    records = simulate(config, cpu(replicas=2)).records
    assert all(r.ok for r in records)
    starts = np.array([r.start_s for r in records])
    ends = starts + np.array([r.e2e_s for r in records])
    probes = np.linspace(50, 250, 2001)
    in_system = ((starts[None, :] <= probes[:, None]) & (ends[None, :] > probes[:, None])).sum(axis=1).mean()
    window = (starts >= 50) & (starts < 250)
    rate = window.sum() / 200.0
    assert in_system == pytest.approx(rate * (ends - starts)[window].mean(), rel=0.1)


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    def ttfts(seed: str) -> list[float]:
        config = load_config("--profile", "poisson:rate=2", "--workload", "random:input_len=32,output_len=8",
                             "--duration", "20s", "--seed", seed)
        return [r.ttft_s for r in simulate(config, cpu(replicas=2)).records]

    assert ttfts("3") == ttfts("3")
    assert ttfts("3") != ttfts("4")


class SpyClusterSim(ClusterSim):
    """Records which replica each request was sent to."""

    def _send(self, f, host, *args):
        self.sent = getattr(self, "sent", [])
        self.sent.append((f.user, f.session, f.turn, host.id))
        super()._send(f, host, *args)


def test_the_session_policy_keeps_each_conversation_on_one_replica():
    config = load_config("--profile", "concurrency:users=6", "--workload",
                         "multi-turn:turns=4,input_len=32,output_len=8", "--requests", "96")
    sim = cpu(replicas=3, routing=RoutingSpec(policy=RoutingPolicyName.SESSION), send_session_id=True)
    plan = config.profile.next_stage([])
    spy = SpyClusterSim(replica_setup(sim), sim, config, plan, stage_traffic(config, plan, WordTokenizer), seed=0)
    spy.run()
    assert isinstance(spy.core.policy, SessionPolicy)
    by_conversation: dict[tuple, set] = {}
    for user, session, turn, replica in spy.sent:
        by_conversation.setdefault((user, session), set()).add(replica)
    assert len(by_conversation) >= 20
    assert all(len(replicas) == 1 for replicas in by_conversation.values())
    assert len({r for rs in by_conversation.values() for r in rs}) > 1


def test_past_the_admission_bound_requests_get_429():
    config = load_config("--profile", "poisson:rate=20", "--workload", "random:input_len=256,output_len=64",
                         "--duration", "10s")
    sim = cpu(replicas=1, max_in_flight=4)
    plan = config.profile.next_stage([])
    cluster = ClusterSim(replica_setup(sim), sim, config, plan, stage_traffic(config, plan, WordTokenizer), seed=0)
    assert isinstance(cluster.admission, AdmissionController)
    rows = cluster.run().rows
    kinds = [row[8] for row in rows]
    assert kinds.count(ErrorKind.HTTP_429) > 0 and kinds.count(None) > 0


def test_queue_depth_autoscaling_adds_replicas_under_load():
    config = load_config("--profile", "poisson:rate=6", "--workload", "random:input_len=64,output_len=32",
                         "--duration", "120s")
    sim = cpu(replicas=1, replica_start_s=10.0,
              autoscaling=AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=3, upscale_delay_s=2.0))
    result = simulate(config, sim)
    peak = max(n for _, n in result.stages[0].replica_timeline)
    assert peak > 1
    assert result.stages[0].gpu_hours > 120 / 3600


def start_offsets(hardware: str, seconds: int = 60) -> list[tuple[float, ...]]:
    """Per turn after the first, when 4 closed-loop users (same lengths) start it, from the first user."""
    config = load_config("--profile", "concurrency:users=4", "--workload", "random:input_len=64,output_len=16",
                         "--duration", f"{seconds}s")
    records = simulate(config, SimulationConfig(hardware=hardware, model="smollm2-135m-instruct")).records
    starts = [sorted(r.start_s for r in records if r.user == user) for user in range(4)]
    turns = min(len(s) for s in starts)
    return [tuple(round(s[t] - starts[0][t], 3) for s in starts) for t in range(1, turns)]


def test_closed_loop_users_drift_apart_as_real_ones_do():
    offsets = start_offsets("cpu")
    assert len(set(offsets)) > len(offsets) / 2  # the users' relative timing keeps changing


def test_without_path_jitter_closed_loop_users_stay_in_lock_step(tmp_path):
    import yaml

    from simulator.hardware import HARDWARE_DIR

    profile = yaml.safe_load((HARDWARE_DIR / "cpu.yaml").read_text())
    profile["serving_path_sigma"] = {"value": 0.0, "source": "test: no jitter"}
    profile["in_stack_noise"] = {"value": 0.0, "source": "test: no jitter"}
    path = tmp_path / "cpu-steady.yaml"
    path.write_text(yaml.safe_dump(profile))
    assert len(set(start_offsets(str(path)))) == 1  # the same relative timing every turn
