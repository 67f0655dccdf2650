"""This process's GPUs through NVML, matched to its CUDA devices.

This process's GPUs through NVML (``nvidia-ml-py``), matched to its CUDA devices by UUID (NVML
indices ignore ``CUDA_VISIBLE_DEVICES``): utilisation, memory, power, temperature, clocks and
throttle reasons. Without NVML, :attr:`NvmlGpus.status` says why and nothing is sampled.

Memory used comes from ``nvmlDeviceGetMemoryInfo_v2`` where nvidia-ml-py and the driver have it:
the v1 call counts the driver's reserved memory as used (it read 0.6 GB above nvidia-smi in every
paired read on an H200), v2 reports it apart (``reserved``); its ``used`` should be nvidia-smi's
(the GPU check's paired reads compare them). An older nvidia-ml-py (no ``nvmlMemory_v2``) or a
driver that refuses the v2 call on the first device falls back to v1; :attr:`NvmlGpus.status`
names the version used.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Sequence
from typing import Any

from trainperf.probe.device_memory import GB
from trainperf.probe.resources.metric_names import POWER_MASK, THERMAL_MASK


def normalize_uuid(uuid: Any) -> str:
    """A GPU UUID in one spelling: lower case, without NVML's ``GPU-`` prefix (torch omits it)."""
    if isinstance(uuid, bytes):
        uuid = uuid.decode("ascii", "replace")
    text = str(uuid).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


class NvmlGpus:
    """NVML handles of the GPUs this process uses.

    ``device_uuids`` (any spelling, with or without ``GPU-``) are in the order that numbers them
    ``gpu0``, ``gpu1``...; ``None``: every GPU NVML sees; empty: none. :attr:`status` is
    ``"ok (<n> device(s) via NVML)"`` or ``"unavailable (<reason>)"``.
    """

    def __init__(self, nvml: Any, device_uuids: Sequence[str] | None) -> None:
        self.status = ""
        self._nvml: Any = None
        self._gpus: list[Any] = []
        self._errors: tuple[type[BaseException], ...] = ()
        self._memory_v2: Any = None
        #: ``"v2"`` or ``"v1"``: the ``nvmlDeviceGetMemoryInfo`` version the memory figures
        #: come from (``""`` before NVML is open)
        self.memory_api = ""
        self._open(nvml, device_uuids)

    @property
    def active(self) -> bool:
        """NVML initialised and not closed."""
        return self._nvml is not None

    def _open(self, nvml: Any, device_uuids: Sequence[str] | None) -> None:
        if device_uuids is not None and len(device_uuids) == 0:
            self.status = "unavailable (this process uses no CUDA device)"
            return
        try:
            module = nvml if nvml is not None else importlib.import_module("pynvml")
        except ImportError:
            self.status = "unavailable (nvidia-ml-py is not installed)"
            return
        try:
            module.nvmlInit()
        except Exception as exc:
            self.status = f"unavailable ({type(exc).__name__}: {exc})"
            return
        try:
            every = map(module.nvmlDeviceGetHandleByIndex, range(module.nvmlDeviceGetCount()))
            handles = {normalize_uuid(module.nvmlDeviceGetUUID(h)): h for h in every}
            if device_uuids is None:
                self._gpus = list(handles.values())
            else:
                wanted = [normalize_uuid(u) for u in device_uuids]
                missing = [u for u in wanted if u not in handles]
                if missing:
                    raise LookupError(
                        f"NVML sees no device with UUID {', '.join(missing)} "
                        f"(NVML devices: {', '.join(handles) or 'none'})"
                    )
                self._gpus = [handles[u] for u in wanted]
        except Exception as exc:
            self.status = f"unavailable ({type(exc).__name__}: {exc})"
            _shutdown(module)
            return
        self._nvml = module
        self._errors = (getattr(module, "NVMLError_NotSupported", LookupError),)
        self._memory_v2 = self._probe_memory_v2()
        self.memory_api = "v1" if self._memory_v2 is None else "v2"
        self.status = f"ok ({len(self._gpus)} device(s) via NVML, memory info {self.memory_api})"

    def _probe_memory_v2(self) -> Any:
        """``nvmlMemory_v2`` when the module has it and the driver answers the v2 call on the
        first device, else ``None`` (v1 then)."""
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        if version is None or not self._gpus:
            return None
        try:
            self._nvml.nvmlDeviceGetMemoryInfo(self._gpus[0], version=version)
        except (getattr(self._nvml, "NVMLError", Exception), TypeError):
            return None  # no such function in the driver, an unknown version, not supported
        return version

    def close(self) -> None:
        """Release NVML (idempotent)."""
        module, self._nvml = self._nvml, None
        if module is not None:
            _shutdown(module)

    # -- sampling ------------------------------------------------------------------------------

    def _read(self, fn: str, *args: Any) -> Any:
        """One NVML query; ``None`` when this device does not support it (not an error)."""
        try:
            return getattr(self._nvml, fn)(*args)
        except self._errors:
            return None

    def sample(self, out: dict[str, float]) -> None:
        """Every device's figures into ``out`` (``resources/gpu{i}_...``); a query a device does
        not support is left out, any other NVML error raises."""
        nvml = self._nvml
        sm_clock = getattr(nvml, "NVML_CLOCK_SM", 1)
        temp_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        reasons_fn = (
            "nvmlDeviceGetCurrentClocksEventReasons"
            if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        for i, handle in enumerate(self._gpus):
            head = f"resources/gpu{i}_"
            util = self._read("nvmlDeviceGetUtilizationRates", handle)
            if util is not None:
                out[f"{head}util_percent"] = float(util.gpu)
                out[f"{head}memory_util_percent"] = float(util.memory)
            if self._memory_v2 is None:
                mem = self._read("nvmlDeviceGetMemoryInfo", handle)
            else:  # v2: used without the driver's reserved memory (module doc)
                mem = self._read("nvmlDeviceGetMemoryInfo", handle, self._memory_v2)
            if mem is not None:
                out[f"{head}memory_used_gb"] = mem.used / GB
                out[f"{head}memory_total_gb"] = mem.total / GB
            power = self._read("nvmlDeviceGetPowerUsage", handle)
            if power is not None:
                out[f"{head}power_w"] = power / 1000.0  # NVML reports milliwatts
            limit = self._read("nvmlDeviceGetEnforcedPowerLimit", handle)
            if limit is not None:
                out[f"{head}power_limit_w"] = limit / 1000.0
            temp = self._read("nvmlDeviceGetTemperature", handle, temp_sensor)
            if temp is not None:
                out[f"{head}temperature_c"] = float(temp)
            clock = self._read("nvmlDeviceGetClockInfo", handle, sm_clock)
            if clock is not None:
                out[f"{head}sm_clock_mhz"] = float(clock)
            reasons = self._read(reasons_fn, handle)
            if reasons is not None:
                mask = int(reasons)
                out[f"{head}throttle_reasons"] = float(mask)
                out[f"{head}throttle_thermal"] = float(bool(mask & THERMAL_MASK))
                out[f"{head}throttle_power"] = float(bool(mask & POWER_MASK))


def _shutdown(module: Any) -> None:
    with contextlib.suppress(Exception):  # nothing useful to do about a failing shutdown
        module.nvmlShutdown()
