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
