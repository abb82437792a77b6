"""This machine's GPUs through NVML (``libnvidia-ml.so.1``, loaded with ctypes: no Python
package needed; :class:`NvmlError` where there is no driver or GPU)."""

from __future__ import annotations

import ctypes

from loadtest.analysis.gpu import GpuReading
from loadtest.errors import LoadTestError

LIBRARY = "libnvidia-ml.so.1"
NVML_SUCCESS = 0


class NvmlError(LoadTestError):
    """NVML is absent or answered an error."""


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """An initialised NVML library and this machine's GPU handles."""

    def __init__(self, lib: ctypes.CDLL, handles: list[ctypes.c_void_p]) -> None:
        self.lib = lib
        self.handles = handles

    @classmethod
    def open(cls) -> Nvml:
        try:
            lib = ctypes.CDLL(LIBRARY)
        except OSError as exc:
            raise NvmlError(f"cannot load {LIBRARY} ({exc}): no NVIDIA driver here") from None
        _check(lib.nvmlInit_v2(), "nvmlInit")
        count = ctypes.c_uint()
        _check(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount")
        handles = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            _check(lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)), "nvmlDeviceGetHandleByIndex")
            handles.append(handle)
        if not handles:
            raise NvmlError("NVML sees no GPU")
        return cls(lib, handles)

    def readings(self) -> list[GpuReading]:
        out = []
        for i, handle in enumerate(self.handles):
            power, energy = ctypes.c_uint(), ctypes.c_ulonglong()
            util, memory = _Utilization(), _Memory()
            has_power = self.lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power)) == NVML_SUCCESS  # mW
            has_energy = self.lib.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(energy)) == NVML_SUCCESS
            has_util = self.lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) == NVML_SUCCESS
            has_memory = self.lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == NVML_SUCCESS
            out.append(GpuReading(
                key=f"nvml/{i}",
                power_w=power.value / 1000.0 if has_power else None,
                energy_j=energy.value / 1000.0 if has_energy else None,  # mJ
                utilization=util.gpu / 100.0 if has_util else None,
                memory_used_mib=memory.used / 2**20 if has_memory else None,
            ))  # fmt: skip
        return out

    def close(self) -> None:
        self.lib.nvmlShutdown()


def _check(code: int, call: str) -> None:
    if code != NVML_SUCCESS:
        raise NvmlError(f"{call} failed with NVML error {code}")
