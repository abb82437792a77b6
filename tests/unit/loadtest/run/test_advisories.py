"""The generator's lateness warnings tell a machine that starved the generator from a
generator held up by its own work (pure)."""

from loadtest.analysis.summary import GeneratorReport
from loadtest.run.advisories import lag_cause, starved_by_machine


def test_a_lag_spent_waiting_for_a_cpu_is_blamed_on_the_machine():
    # as seen replaying the Mooncake excerpt: the loop stalled 3.4 s, 3.3 s of it runnable without a CPU
    starved = GeneratorReport(loop_lag_p99_s=0.062, loop_lag_max_s=3.39, cpu_wait_at_lag_max_s=3.3)
    assert starved_by_machine(starved)
    assert "waited 3300 ms for a CPU: other processes" in lag_cause(starved, True)


def test_a_lag_with_the_cpu_at_hand_is_the_generators_own_work():
    busy = GeneratorReport(loop_lag_p99_s=0.05, loop_lag_max_s=0.2, cpu_wait_at_lag_max_s=0.01)
    assert not starved_by_machine(busy)
    assert lag_cause(busy, False).startswith("its own work held the loop (it waited only 10 ms")


def test_without_schedstat_the_cause_stays_a_question():
    unknown = GeneratorReport(loop_lag_p99_s=0.05, loop_lag_max_s=0.2)
    assert not starved_by_machine(unknown) and lag_cause(unknown, False) == "CPU contention on this machine?"


def test_a_starved_generator_without_real_time_priority_is_told_how_to_get_it():
    # as measured on the 2-core box next to a vLLM CPU engine: 1605 ms waiting for a CPU, 2 % of one core used
    normal = GeneratorReport(loop_lag_p99_s=0.237, loop_lag_max_s=1.7, cpu_wait_at_lag_max_s=1.605, realtime=False)
    assert starved_by_machine(normal)
    assert lag_cause(normal, True).endswith(
        "its own work did not; run the load tester as root (real-time priority) or on another machine")
    for realtime in (True, None):  # already real-time, or not said (older runs): no such advice
        report = normal.model_copy(update={"realtime": realtime})
        assert "as root" not in lag_cause(report, True)
    assert "as root" not in lag_cause(normal.model_copy(update={"cpu_wait_at_lag_max_s": 0.01}), False)
