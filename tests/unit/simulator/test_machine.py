"""A CPU profile names the CPU it was fitted on; a run elsewhere is warned about."""

from simulator.cli import main
from simulator.hardware import load_hardware
from simulator.machine import cpu_mismatch, cpu_model


def test_a_cpu_profile_says_where_it_was_fitted_and_warns_elsewhere():
    cpu = load_hardware("cpu")
    assert cpu.fitted_on_cpu
    assert cpu_mismatch(cpu, here=f"{cpu.fitted_on_cpu} 9R14 96-Core Processor") is None
    warning = cpu_mismatch(cpu, here="Intel(R) Xeon(R) Platinum 8481C")
    assert warning and "calibrate --quick" in warning and cpu.fitted_on_cpu in warning
    assert cpu_mismatch(load_hardware("h200"), here="anything") is None  # a GPU profile's host CPU does not matter
    assert cpu_model()


def test_calibrate_takes_a_file_or_quick_not_both(tmp_path):
    assert main(["calibrate", "--out", str(tmp_path / "x.yaml")]) == 2
    assert main(["calibrate", str(tmp_path / "steps.json"), "--quick"]) == 2


def test_two_profiles_compare_constant_by_constant():
    from simulator.compare_profiles import rows

    h200, cpu = load_hardware("h200"), load_hardware("cpu")
    table = {name: (a, b, change) for name, a, b, change in rows(h200.efficiency, cpu.efficiency)}
    assert table["memory"][0] == h200.efficiency.memory.value and table["memory"][1] == cpu.efficiency.memory.value
    assert table["kv_heads_half"][1] is None and table["kv_heads_half"][2] == "-"
    assert all(change == "+0.0%" for *_, change in rows(h200.efficiency, h200.efficiency) if change != "-")
