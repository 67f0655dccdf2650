"""A fake NVML (pynvml's calls, errors and memory structs) and the device facts it serves, for
the resource monitor's and the GPU check's tests."""

from __future__ import annotations

import types
from collections import namedtuple
from collections.abc import Callable
from typing import Any

GIB = float(1 << 30)


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


Util = namedtuple("Util", "gpu memory")


Mem = namedtuple("Mem", "total free used")


Mem2 = namedtuple("Mem2", "version total reserved free used")


MEMORY_V2 = 0x2000028  # pynvml's nvmlMemory_v2: the struct size with the version in bits 24+


def fake_nvml(
    devices: list[dict[str, Any]],
    init_error: Exception | None = None,
    use_event_reasons: bool = True,
    memory_v2: bool = True,
) -> types.ModuleType:
    """A module with the pynvml functions the sampler calls, over ``devices`` (dicts with
    uuid, util, mem_util, used, reserved, total, power_mw, limit_mw, temp, clock, reasons, v2;
    a value that is an exception instance is raised).

    Memory as a driver serves it: the v1 call counts the driver's ``reserved`` memory in
    ``used``, the v2 call (``version=nvmlMemory_v2``) reports it apart; ``v2`` is what the v2
    call does besides (an exception: the driver refuses it). ``memory_v2=False``: an older
    nvidia-ml-py, without ``nvmlMemory_v2``, whose call takes no version."""
    nvml = types.ModuleType("pynvml")
    nvml.calls = []  # type: ignore[attr-defined]
    nvml.memory_calls = []  # type: ignore[attr-defined]

    def value(handle: int, key: str) -> Any:
        v = devices[handle][key]
        if isinstance(v, Exception):
            raise v
        return v

    def init() -> None:
        nvml.calls.append("nvmlInit")  # type: ignore[attr-defined]
        if init_error is not None:
            raise init_error

    def temperature(handle: int, sensor: int) -> int:
        assert sensor == nvml.NVML_TEMPERATURE_GPU  # type: ignore[attr-defined]
        return value(handle, "temp")

    def clock(handle: int, kind: int) -> int:
        assert kind == nvml.NVML_CLOCK_SM  # type: ignore[attr-defined]
        return value(handle, "clock")

    def memory_v1(handle: int) -> Mem:
        nvml.memory_calls.append("v1")  # type: ignore[attr-defined]
        used = value(handle, "used") + value(handle, "reserved")
        return Mem(value(handle, "total"), value(handle, "total") - used, used)

    def memory(handle: int, version: int | None = None) -> Mem | Mem2:
        if not version:
            return memory_v1(handle)
        assert version == MEMORY_V2
        nvml.memory_calls.append("v2")  # type: ignore[attr-defined]
        value(handle, "v2")
        total, reserved, used = (value(handle, k) for k in ("total", "reserved", "used"))
        return Mem2(version, total, reserved, total - reserved - used, used)

    funcs: dict[str, Callable[..., Any]] = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: nvml.calls.append("nvmlShutdown"),  # type: ignore[attr-defined]
        "nvmlDeviceGetCount": lambda: len(devices),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUUID": lambda h: value(h, "uuid"),
        "nvmlDeviceGetUtilizationRates": lambda h: Util(value(h, "util"), value(h, "mem_util")),
        "nvmlDeviceGetMemoryInfo": memory if memory_v2 else memory_v1,
        "nvmlDeviceGetPowerUsage": lambda h: value(h, "power_mw"),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: value(h, "limit_mw"),
        "nvmlDeviceGetTemperature": temperature,
        "nvmlDeviceGetClockInfo": clock,
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: value(h, "reasons"),
    }
    if use_event_reasons:
        funcs["nvmlDeviceGetCurrentClocksEventReasons"] = lambda h: value(h, "reasons")
    for name, fn in funcs.items():
        setattr(nvml, name, fn)
    nvml.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    nvml.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    nvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    nvml.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]
    nvml.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound  # type: ignore[attr-defined]
    nvml.NVMLError_FunctionNotFound = NVMLError_FunctionNotFound  # type: ignore[attr-defined]
    if memory_v2:
        nvml.nvmlMemory_v2 = MEMORY_V2  # type: ignore[attr-defined]
    return nvml


def device(uuid: str, **overrides: Any) -> dict[str, Any]:
    base = {
        "uuid": uuid,
        "util": 87,
        "mem_util": 40,
        "used": 30 * (1 << 30),
        "reserved": (1 << 30) // 2,
        "total": 80 * (1 << 30),
        "power_mw": 312_500,
        "limit_mw": 700_000,
        "temp": 71,
        "clock": 1980,
        "reasons": 0,
        "v2": True,
    }
    return base | overrides
