"""Resource sampling off the training thread: host, DataLoader workers, disk, network, GPU.

:class:`ResourceSampler` reads everything once per :meth:`ResourceSampler.sample` call and
returns a flat ``{"resources/<name>": float}`` dict (names in :data:`METRIC_DOCS`).
:class:`ResourceMonitor` runs it on a daemon thread every ``interval_s``, derives the training
signals the alert rules need from :class:`StepSignals` (stamped by the callback's hooks), feeds
an :class:`ocr.perf.alerts.AlertEngine`, averages samples into one record per logging interval
(``<run>/perf/resources.jsonl``) and keeps a run summary. Nothing here imports Lightning.

Choices that matter for correctness:

- CPU percentages come from ``cpu_times()`` deltas on process handles kept between samples
  (a fresh ``psutil.Process`` reads 0 % on its first ``cpu_percent()``); a process seen for the
  first time is measured from its creation time.
- Disk, network and process I/O are rates from counter deltas, never cumulative counters.
- DataLoader workers are the child processes (recursive) running the main process's Python
  executable (other children, e.g. wandb's service, are left out); the list is refreshed every
  ``worker_refresh_s`` because a child scan costs milliseconds. Their memory is USS/PSS (summed
  RSS cannot see copy-on-write growth). A worker that exits between two samples loses its last
  interval's I/O.
- GPUs through NVML (``nvidia-ml-py``), matched to this process's CUDA devices by UUID (NVML
  indices ignore ``CUDA_VISIBLE_DEVICES``). Without NVML: ``status["gpu"] = "unavailable
  (<reason>)"``.
- A source that raises is reported in one warning and marked unavailable; the others go on.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import shutil
import statistics
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from ocr.errors import ConfigError
from ocr.perf.alerts import AlertEngine
from ocr.perf.memory import GB
from ocr.perf.records import RecordWriter, ResourceSample, ResourceSummary

__all__ = [
    "METRIC_DOCS",
    "THREAD_NAME",
    "ResourceMonitor",
    "ResourceMonitorWarning",
    "ResourceSampler",
    "StepSignals",
    "memory_limit",
    "normalize_uuid",
]

THREAD_NAME = "ocr-resource-monitor"
MB = float(1 << 20)
PHASE_NAMES = ("train", "val", "test", "idle")

# NVML clock-event ("throttle") reason bits (stable NVML API values).
_GPU_IDLE = 0x1
_SW_POWER_CAP = 0x4
_HW_SLOWDOWN = 0x8
_SW_THERMAL = 0x20
_HW_THERMAL = 0x40
_HW_POWER_BRAKE = 0x80
THERMAL_MASK = _HW_SLOWDOWN | _SW_THERMAL | _HW_THERMAL
POWER_MASK = _HW_POWER_BRAKE | _SW_POWER_CAP

# Every metric name (without the "resources/" prefix; ``{i}`` is the index of the GPU among this
# process's CUDA devices, ``{phase}`` one of PHASE_NAMES) -> its meaning. Stable: the loggers, the
# JSON-lines file and the report use these names.
METRIC_DOCS: dict[str, str] = {
    "process_cpu_percent": "main process CPU, % of one core (all its threads)",
    "process_rss_gb": "main process resident memory, GiB",
    "process_uss_gb": "main process unique memory (USS), GiB (Linux)",
    "process_pss_gb": "main process proportional memory (PSS), GiB (Linux)",
    "process_threads": "main process thread count",
    "process_open_fds": "main process open file descriptors (POSIX)",
    "workers_count": "DataLoader worker processes alive",
    "workers_cpu_percent": "DataLoader workers' CPU summed, % of one core",
    "workers_rss_gb": "DataLoader workers' RSS summed, GiB (counts shared pages many times)",
    "workers_uss_gb": "DataLoader workers' USS summed, GiB",
    "workers_pss_gb": "DataLoader workers' PSS summed, GiB",
    "process_tree_memory_gb": "main RSS + workers' USS, GiB: the run's own memory (leak rule)",
    "system_cpu_percent": "host CPU busy, % of all cores",
    "iowait_percent": "host CPU time in iowait, % of all cores",
    "system_memory_percent": "host memory in use, % (the host, not a container limit)",
    "memory_available_gb": "memory still available, GiB (host, or the cgroup limit if lower)",
    "memory_limit_gb": "memory limit, GiB (host total, or the cgroup limit if lower)",
    "disk_read_mb_s": "host disk reads, MiB/s",
    "disk_write_mb_s": "host disk writes, MiB/s",
    "net_recv_mb_s": "host network received, MiB/s",
    "net_sent_mb_s": "host network sent, MiB/s",
    "checkpoint_dir_free_gb": "free space where checkpoints go, GiB",
    "io_read_mb_s": "bytes read by main process + workers (read calls, page cache included), MiB/s",
    "io_write_mb_s": "bytes written by main process + workers, MiB/s",
    "io_storage_read_mb_s": "bytes main process + workers read from storage, MiB/s",
    "io_{phase}_read_mb": "bytes read by main + workers during the phase so far, MiB",
    "io_{phase}_write_mb": "bytes written by main + workers during the phase so far, MiB",
    "gpu{i}_util_percent": "GPU utilisation (NVML: time a kernel ran), %",
    "gpu{i}_memory_util_percent": "GPU memory-controller utilisation, %",
    "gpu{i}_memory_used_gb": "GPU memory used (all processes), GiB",
    "gpu{i}_memory_total_gb": "GPU memory total, GiB",
    "gpu{i}_power_w": "GPU power draw, W",
    "gpu{i}_power_limit_w": "GPU enforced power limit, W",
    "gpu{i}_temperature_c": "GPU temperature, degrees C",
    "gpu{i}_sm_clock_mhz": "GPU SM clock, MHz",
    "gpu{i}_throttle_reasons": "NVML clock-event reason bit mask",
    "gpu{i}_throttle_thermal": "1 when clocks are cut for heat (HW slowdown / thermal), else 0",
    "gpu{i}_throttle_power": "1 when clocks are cut for power (power cap / brake), else 0",
    "cuda_allocated_gb": "torch allocator: allocated on this process's device, GiB",
    "cuda_reserved_gb": "torch allocator: reserved, GiB",
    "cuda_max_reserved_gb": "torch allocator: peak reserved, GiB",
    "cuda_total_gb": "this process's device memory, GiB",
    "cuda_alloc_retries": "torch allocator: cumulative allocation retries (cache flushes)",
    "cuda_ooms": "torch allocator: cumulative out-of-memory errors",
    "data_wait_share": "training: share (0-1) of wall time between a batch end and the next "
    "batch start (the loop waiting for data), over the last window",
    "train_steps_per_s": "training batches per second over the last window",
    "step_time_median_s": "median training step period, s",
    "last_step_age_s": "seconds since the last completed batch (any stage)",
    "loss_nonfinite": "1 when the latest training loss is NaN or Inf, else 0",
}


class ResourceMonitorWarning(UserWarning):
    """A resource source failed (it is off for the run) or the monitor turned itself off."""


def normalize_uuid(uuid: Any) -> str:
    """A GPU UUID in one spelling: lower case, without NVML's ``GPU-`` prefix (torch omits it)."""
    if isinstance(uuid, bytes):
        uuid = uuid.decode("ascii", "replace")
    text = str(uuid).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def memory_limit() -> tuple[float, float]:
    """``(limit_bytes, available_bytes)``: the host's total and available memory, or the
    cgroup's (v2 ``memory.max``/``memory.current``, v1 ``limit_in_bytes``/``usage_in_bytes``)
    when that limit is lower. ``psutil.virtual_memory()`` alone ignores a container's limit."""
    vm = psutil.virtual_memory()
    limit, available = float(vm.total), float(vm.available)
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        cg_limit = _read_int(limit_file)
        if cg_limit is None or cg_limit >= limit:
            continue  # "max" or an "unlimited" v1 value larger than the host
        usage = _read_int(usage_file) or 0
        return float(cg_limit), float(min(available, max(cg_limit - usage, 0)))
    return limit, available


def _existing_dir(path: Path) -> Path:
    """``path`` or its nearest existing parent (the checkpoint folder may not exist yet)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


class _ProcCpu:
    """CPU % of one process from ``cpu_times()`` deltas on a kept handle."""

    __slots__ = ("cpu_s", "handle", "io", "pss", "t", "uss")

    def __init__(self, handle: psutil.Process, now: float) -> None:
        self.handle = handle
        # First sight: count from the process's creation, so a new worker reads its true
        # average instead of 0 %.
        try:
            self.t = min(now, now - (time.time() - handle.create_time()))
        except psutil.Error:
            self.t = now
        self.cpu_s = 0.0
        self.io: tuple[int, int, int] = (0, 0, 0)
        self.uss: float | None = None  # last USS / PSS read (bytes); re-read every few seconds
        self.pss: float | None = None

    def cpu_percent(self, now: float) -> float:
        times = self.handle.cpu_times()
        cpu = times.user + times.system
        dt = now - self.t
        out = 100.0 * (cpu - self.cpu_s) / dt if dt > 0 else 0.0
        self.cpu_s, self.t = cpu, now
        return max(out, 0.0)

    def io_delta(self) -> tuple[int, int, int]:
        """(chars read, chars written, storage bytes read) since the previous call."""
        c = self.handle.io_counters()
        current = (
            int(getattr(c, "read_chars", c.read_bytes)),
            int(getattr(c, "write_chars", c.write_bytes)),
            int(c.read_bytes),
        )
        previous, self.io = self.io, current
        return (
            max(current[0] - previous[0], 0),
            max(current[1] - previous[1], 0),
            max(current[2] - previous[2], 0),
        )


class ResourceSampler:
    """Reads host, process, worker, disk, network and GPU figures; one call, one flat dict.

    Not thread-safe: one thread calls :meth:`sample` (the monitor's). :attr:`phase` may be set
    from another thread; I/O since the previous sample is charged to the phase current at
    sampling time.

    Args:
        checkpoint_dir: folder whose file system's free space is reported
            (``checkpoint_dir_free_gb``); its nearest existing parent while it does not exist.
            ``None``: not reported. Default ``None``.
        device_uuids: UUIDs of the GPUs this process uses (any spelling, with or without
            ``GPU-``), in the order that numbers them ``gpu0``, ``gpu1``...; ``None``: every GPU
            NVML sees; empty: no GPU sampling. Default ``None``.
        cuda_device: torch CUDA device index whose allocator counters are read (only when CUDA
            is initialised in this process), or ``None`` for none. Default ``None``.
        worker_refresh_s: seconds between scans for DataLoader worker processes (a scan costs a
            few ms). Default ``5.0``.
        memory_detail_s: seconds between reads of USS/PSS of the main process and every worker
            (``memory_full_info`` walks every mapping: ~3 ms per process once torch is loaded);
            samples in between reuse the last figures. ``0``: never (no USS/PSS; the leak rule
            then watches RSS). Default ``5.0``.
        nvml: the NVML module (tests pass a fake); ``None`` imports ``pynvml``. Default ``None``.
        warn: called with one message when a source fails; default ``warnings.warn`` with
            :class:`ResourceMonitorWarning`.
    """

    def __init__(
        self,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        device_uuids: Sequence[str] | None = None,
        cuda_device: int | None = None,
        worker_refresh_s: float = 5.0,
        memory_detail_s: float = 5.0,
        nvml: Any = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        if not worker_refresh_s > 0:
            raise ConfigError(f"worker_refresh_s must be > 0 seconds, got {worker_refresh_s!r}")
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.cuda_device = cuda_device
        self.worker_refresh_s = float(worker_refresh_s)
        if isinstance(memory_detail_s, bool) or not memory_detail_s >= 0:
            raise ConfigError(f"memory_detail_s must be >= 0 seconds, got {memory_detail_s!r}")
        self.memory_detail_s = float(memory_detail_s)
        self._want_detail = self.memory_detail_s > 0  # USS/PSS wanted at all
        self._detail_t = -math.inf
        self.phase = "idle"
        self.status: dict[str, str] = {}
        self.io_totals: dict[str, list[float]] = {p: [0.0, 0.0] for p in PHASE_NAMES}
        self._warn = warn or (lambda m: warnings.warn(m, ResourceMonitorWarning, stacklevel=3))
        self._off: set[str] = set()
        now = time.monotonic()
        self._main = _ProcCpu(psutil.Process(), now)
        try:
            self._main_exe = self._main.handle.exe()
        except psutil.Error:
            self._main_exe = ""
        with contextlib.suppress(psutil.Error, AttributeError):
            self._main.io_delta()  # I/O before the monitor started is not the run's
        self._workers: dict[int, _ProcCpu] = {}
        self._workers_scanned = -math.inf
        self._sys_cpu = psutil.cpu_times()
        self._disk: tuple[float, Any] | None = None
        self._net: tuple[float, Any] | None = None
        self._io_t = now
        self._cuda_total: float | None = None
        self._nvml: Any = None
        self._gpus: list[Any] = []
        self._gpu_errors: tuple[type[BaseException], ...] = ()
        self._init_gpu(nvml, device_uuids)

    # -- setup ---------------------------------------------------------------------------------

    def _init_gpu(self, nvml: Any, device_uuids: Sequence[str] | None) -> None:
        if device_uuids is not None and len(device_uuids) == 0:
            self.status["gpu"] = "unavailable (this process uses no CUDA device)"
            return
        try:
            module = nvml if nvml is not None else importlib.import_module("pynvml")
        except ImportError:
            self.status["gpu"] = "unavailable (nvidia-ml-py is not installed)"
            return
        try:
            module.nvmlInit()
        except Exception as exc:
            self.status["gpu"] = f"unavailable ({type(exc).__name__}: {exc})"
            return
        try:
            handles = {}
            for index in range(module.nvmlDeviceGetCount()):
                handle = module.nvmlDeviceGetHandleByIndex(index)
                handles[normalize_uuid(module.nvmlDeviceGetUUID(handle))] = handle
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
            self.status["gpu"] = f"unavailable ({type(exc).__name__}: {exc})"
            self._shutdown_nvml(module)
            return
        self._nvml = module
        self._gpu_errors = (getattr(module, "NVMLError_NotSupported", LookupError),)
        self.status["gpu"] = f"ok ({len(self._gpus)} device(s) via NVML)"

    @staticmethod
    def _shutdown_nvml(module: Any) -> None:
        with contextlib.suppress(Exception):  # nothing useful to do about a failing shutdown
            module.nvmlShutdown()

    def close(self) -> None:
        """Release NVML (idempotent)."""
        module, self._nvml = self._nvml, None
        if module is not None:
            self._shutdown_nvml(module)

    # -- sampling ------------------------------------------------------------------------------

    def _guard(
        self,
        source: str,
        fn: Callable[[dict[str, float], float], None],
        out: dict[str, float],
        now: float,
    ) -> None:
        if source in self._off:
            return
        try:
            fn(out, now)
        except Exception as exc:
            self._off.add(source)
            self.status[source] = f"unavailable ({type(exc).__name__}: {exc})"
            self._warn(
                f"resource monitor: {source} sampling failed and is off for this run "
                f"({type(exc).__name__}: {exc})"
            )

    def sample(self, now: float | None = None) -> dict[str, float]:
        """Every source once; ``now`` is ``time.monotonic()`` seconds (tests pass their own).
        Returns ``{"resources/<name>": value}``; a failed source's names are absent."""
        now = time.monotonic() if now is None else now
        out: dict[str, float] = {}
        self._guard("process", self._sample_process, out, now)
        self._guard("workers", self._sample_workers, out, now)
        if self._want_detail and now - self._detail_t >= self.memory_detail_s:
            self._detail_t = now
        self._guard("io", self._sample_io, out, now)
        self._guard("system", self._sample_system, out, now)
        self._guard("disk", self._sample_disk, out, now)
        self._guard("network", self._sample_network, out, now)
        if self.checkpoint_dir is not None:
            self._guard("checkpoint_dir", self._sample_free_space, out, now)
        if self._nvml is not None:
            self._guard("gpu", self._sample_gpus, out, now)
            if "gpu" in self._off:
                self.close()
        if self.cuda_device is not None:
            self._guard("torch_cuda", self._sample_torch_cuda, out, now)
        if "resources/process_rss_gb" in out:
            workers = out.get("resources/workers_uss_gb", out.get("resources/workers_rss_gb", 0.0))
            out["resources/process_tree_memory_gb"] = out["resources/process_rss_gb"] + workers
        return out

    def _full_memory(self, proc: _ProcCpu, due: bool) -> tuple[float, float] | None:
        """(USS, PSS) bytes of ``proc``, re-read when ``due`` or never read; ``None`` when the
        platform or permissions do not give them."""
        if "memory_detail" in self._off:
            return None
        if due or proc.uss is None:
            try:
                full = proc.handle.memory_full_info()
            except psutil.AccessDenied:
                self._off.add("memory_detail")
                self.status["memory_detail"] = "unavailable (access denied: no USS/PSS)"
                return None
            proc.uss = float(full.uss)
            proc.pss = float(getattr(full, "pss", full.uss))
        return proc.uss, proc.pss if proc.pss is not None else proc.uss

    def _sample_process(self, out: dict[str, float], now: float) -> None:
        main = self._main
        handle = main.handle
        out["resources/process_cpu_percent"] = main.cpu_percent(now)
        with handle.oneshot():
            out["resources/process_rss_gb"] = handle.memory_info().rss / GB
            out["resources/process_threads"] = float(handle.num_threads())
            if hasattr(handle, "num_fds"):
                out["resources/process_open_fds"] = float(handle.num_fds())
        if self._want_detail:
            detail = self._full_memory(main, now - self._detail_t >= self.memory_detail_s)
            if detail is not None:
                out["resources/process_uss_gb"] = detail[0] / GB
                out["resources/process_pss_gb"] = detail[1] / GB

    def _refresh_workers(self, now: float) -> None:
        self._workers_scanned = now
        alive = {}
        for child in self._main.handle.children(recursive=True):
            try:
                # DataLoader workers run our Python (torch names them "pt_data_worker");
                # other children, e.g. wandb's service, do not.
                if child.name() != "pt_data_worker" and child.exe() != self._main_exe:
                    continue
            except psutil.Error:
                continue
            known = self._workers.get(child.pid)
            alive[child.pid] = known if known is not None else _ProcCpu(child, now)
        self._workers = alive

    def _sample_workers(self, out: dict[str, float], now: float) -> None:
        if now - self._workers_scanned >= self.worker_refresh_s:
            self._refresh_workers(now)
        due = self._want_detail and now - self._detail_t >= self.memory_detail_s
        cpu = rss = uss = pss = 0.0
        detailed = self._want_detail
        gone = []
        for pid, worker in self._workers.items():
            try:
                cpu += worker.cpu_percent(now)
                rss += worker.handle.memory_info().rss
                detail = self._full_memory(worker, due) if self._want_detail else None
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                gone.append(pid)
                continue
            if detail is None:
                detailed = False
            else:
                uss += detail[0]
                pss += detail[1]
        for pid in gone:
            del self._workers[pid]
        out["resources/workers_count"] = float(len(self._workers))
        out["resources/workers_cpu_percent"] = cpu
        out["resources/workers_rss_gb"] = rss / GB
        if detailed:
            out["resources/workers_uss_gb"] = uss / GB
            out["resources/workers_pss_gb"] = pss / GB

    def _sample_io(self, out: dict[str, float], now: float) -> None:
        read = write = storage = 0
        for proc in (self._main, *self._workers.values()):
            try:
                r, w, s = proc.io_delta()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            read, write, storage = read + r, write + w, storage + s
        dt, self._io_t = now - self._io_t, now
        phase = self.phase if self.phase in self.io_totals else "idle"
        totals = self.io_totals[phase]
        totals[0] += read / MB
        totals[1] += write / MB
        if dt > 0:
            out["resources/io_read_mb_s"] = read / MB / dt
            out["resources/io_write_mb_s"] = write / MB / dt
            out["resources/io_storage_read_mb_s"] = storage / MB / dt
        for name, (r_mb, w_mb) in self.io_totals.items():
            out[f"resources/io_{name}_read_mb"] = r_mb
            out[f"resources/io_{name}_write_mb"] = w_mb

    def _sample_system(self, out: dict[str, float], now: float) -> None:
        times = psutil.cpu_times()
        prev, self._sys_cpu = self._sys_cpu, times
        total = sum(times) - sum(prev)
        if total > 0:
            iowait = getattr(times, "iowait", 0.0) - getattr(prev, "iowait", 0.0)
            idle = times.idle - prev.idle + iowait  # psutil counts iowait as idle too
            out["resources/system_cpu_percent"] = max(0.0, 100.0 * (1.0 - idle / total))
            out["resources/iowait_percent"] = max(0.0, 100.0 * iowait / total)
        out["resources/system_memory_percent"] = float(psutil.virtual_memory().percent)
        limit, available = memory_limit()
        out["resources/memory_limit_gb"] = limit / GB
        out["resources/memory_available_gb"] = available / GB

    @staticmethod
    def _rates(
        previous: tuple[float, Any] | None, now: float, counters: Any, fields: tuple[str, str]
    ) -> tuple[float, float] | None:
        if previous is None:
            return None
        t0, before = previous
        dt = now - t0
        if dt <= 0:
            return None
        a, b = fields
        return (
            max(getattr(counters, a) - getattr(before, a), 0) / MB / dt,
            max(getattr(counters, b) - getattr(before, b), 0) / MB / dt,
        )

    def _sample_disk(self, out: dict[str, float], now: float) -> None:
        counters = psutil.disk_io_counters()
        if counters is None:
            raise RuntimeError("no disk I/O counters on this system")
        rates = self._rates(self._disk, now, counters, ("read_bytes", "write_bytes"))
        self._disk = (now, counters)
        if rates is not None:
            out["resources/disk_read_mb_s"], out["resources/disk_write_mb_s"] = rates

    def _sample_network(self, out: dict[str, float], now: float) -> None:
        counters = psutil.net_io_counters()
        if counters is None:
            raise RuntimeError("no network I/O counters on this system")
        rates = self._rates(self._net, now, counters, ("bytes_recv", "bytes_sent"))
        self._net = (now, counters)
        if rates is not None:
            out["resources/net_recv_mb_s"], out["resources/net_sent_mb_s"] = rates

    def _sample_free_space(self, out: dict[str, float], now: float) -> None:
        assert self.checkpoint_dir is not None
        usage = shutil.disk_usage(_existing_dir(self.checkpoint_dir))
        out["resources/checkpoint_dir_free_gb"] = usage.free / GB

    def _gpu_read(self, fn: str, *args: Any) -> Any:
        """One NVML query; ``None`` when this device does not support it (not an error)."""
        try:
            return getattr(self._nvml, fn)(*args)
        except self._gpu_errors:
            return None

    def _sample_gpus(self, out: dict[str, float], now: float) -> None:
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
            util = self._gpu_read("nvmlDeviceGetUtilizationRates", handle)
            if util is not None:
                out[f"{head}util_percent"] = float(util.gpu)
                out[f"{head}memory_util_percent"] = float(util.memory)
            mem = self._gpu_read("nvmlDeviceGetMemoryInfo", handle)
            if mem is not None:
                out[f"{head}memory_used_gb"] = mem.used / GB
                out[f"{head}memory_total_gb"] = mem.total / GB
            power = self._gpu_read("nvmlDeviceGetPowerUsage", handle)
            if power is not None:
                out[f"{head}power_w"] = power / 1000.0  # NVML reports milliwatts
            limit = self._gpu_read("nvmlDeviceGetEnforcedPowerLimit", handle)
            if limit is not None:
                out[f"{head}power_limit_w"] = limit / 1000.0
            temp = self._gpu_read("nvmlDeviceGetTemperature", handle, temp_sensor)
            if temp is not None:
                out[f"{head}temperature_c"] = float(temp)
            clock = self._gpu_read("nvmlDeviceGetClockInfo", handle, sm_clock)
            if clock is not None:
                out[f"{head}sm_clock_mhz"] = float(clock)
            reasons = self._gpu_read(reasons_fn, handle)
            if reasons is not None:
                mask = int(reasons)
                out[f"{head}throttle_reasons"] = float(mask)
                out[f"{head}throttle_thermal"] = float(bool(mask & THERMAL_MASK))
                out[f"{head}throttle_power"] = float(bool(mask & POWER_MASK))

    def _sample_torch_cuda(self, out: dict[str, float], now: float) -> None:
        torch = sys.modules.get("torch")
        # Never create a CUDA context from the sampler: only read an initialised allocator.
        if torch is None or not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        device = self.cuda_device
        stats = torch.cuda.memory_stats(device)
        out["resources/cuda_allocated_gb"] = stats.get("allocated_bytes.all.current", 0) / GB
        out["resources/cuda_reserved_gb"] = stats.get("reserved_bytes.all.current", 0) / GB
        out["resources/cuda_max_reserved_gb"] = stats.get("reserved_bytes.all.peak", 0) / GB
        out["resources/cuda_alloc_retries"] = float(stats.get("num_alloc_retries", 0))
        out["resources/cuda_ooms"] = float(stats.get("num_ooms", 0))
        if self._cuda_total is None:
            self._cuda_total = torch.cuda.get_device_properties(device).total_memory / GB
        out["resources/cuda_total_gb"] = self._cuda_total


class StepSignals:
    """Counters stamped by the training thread's hooks (a few attribute writes per step) and
    read by the sampler thread. Single writer; plain int/float attribute reads and writes are
    atomic in CPython, and a reading one sample late is harmless.

    Data wait: the time from one training batch's end to the next one's start (the loop
    fetching the next batch, plus other callbacks' batch hooks: an upper bound of the data
    wait), summed in ``wait_ns``. The first batch after an epoch start or a validation run is not
    counted (no previous end in the same stretch of training).
    """

    __slots__ = (
        "batches",
        "checkpoint_bytes",
        "epoch",
        "last_end_ns",
        "last_train_end_ns",
        "loss",
        "phase",
        "steps",
        "straggler",
        "train_clock",
        "wait_ns",
    )

    def __init__(self) -> None:
        self.phase = "idle"
        self.epoch = 0
        self.steps = 0  # training batches completed
        self.batches = 0  # batches of any stage completed
        self.wait_ns = 0
        # (ns of closed train stretches, start of the open one or 0): one tuple, so the sampler
        # thread never reads one half updated.
        self.train_clock = (0, 0)
        self.last_end_ns = 0  # any stage, for the hang rule
        self.last_train_end_ns = 0  # 0: no previous training batch in this stretch
        # The latest training loss, kept by reference: the sampler thread reads it (for a CUDA
        # tensor that read waits for the step on the sampler thread, not the training thread).
        self.loss: Any = None
        self.checkpoint_bytes = 0.0
        self.straggler: dict[str, float | str] | None = None

    def set_phase(self, phase: str) -> None:
        """Enter ``phase`` ("train", "val", "test", "idle"); closes the train stretch."""
        now = time.perf_counter_ns()
        closed, since = self.train_clock
        if since:
            closed += now - since
        self.train_clock = (closed, now if phase == "train" else 0)
        self.last_train_end_ns = 0
        self.phase = phase

    def train_time_ns(self, now: int) -> int:
        """Training wall time so far (the open stretch included)."""
        closed, since = self.train_clock
        return closed + (now - since if since else 0)

    def train_batch_start(self) -> None:
        now = time.perf_counter_ns()
        last = self.last_train_end_ns
        if last:
            self.wait_ns += now - last

    def train_batch_end(self, loss: Any) -> None:
        now = time.perf_counter_ns()
        self.last_train_end_ns = self.last_end_ns = now
        self.steps += 1
        self.batches += 1
        self.loss = loss

    def eval_batch_end(self) -> None:
        self.last_end_ns = time.perf_counter_ns()
        self.batches += 1


def _is_nonfinite(loss: Any) -> float | None:
    """1.0 / 0.0 for the latest loss (a tensor or a number), None when there is none."""
    if loss is None:
        return None
    try:
        value = float(loss.detach()) if hasattr(loss, "detach") else float(loss)
    except (TypeError, ValueError, RuntimeError):
        return None
    return 0.0 if math.isfinite(value) else 1.0


# Metric-name suffixes averaged over a logging interval; other names (memory gauges, counters,
# cumulative totals) report their last value.
_MEAN_SUFFIXES = ("_percent", "_mb_s", "_w", "_c", "_mhz", "_share", "_per_s")


class ResourceMonitor:
    """The sampler on a daemon thread, the training signals, the alert engine and the records.

    Each tick (every ``interval_s``): sample, add the training signals, evaluate the alert rules,
    fold the values into the logging interval and the run summary, and (``record_samples``)
    write the sample to ``writer`` (``resources.jsonl``: the report plots every one). Every
    ``log_interval_s`` the interval's record (rates averaged) is left in :attr:`pending` for the
    training thread to hand to the loggers (:meth:`take_pending`: loggers are not thread-safe),
    and, without ``record_samples``, written instead.
    A tick that raises is one warning and stops the thread; training goes on.

    Args:
        sampler: the :class:`ResourceSampler` (closed by :meth:`close`).
        signals: the :class:`StepSignals` the training hooks stamp.
        engine: alert rules and sinks, or ``None`` for no alerting. Default ``None``.
        writer: ``resources.jsonl`` writer, or ``None`` (non-zero ranks). Default ``None``.
        interval_s: seconds between samples. Default ``1.0``.
        log_interval_s: seconds between logged records (independent of ``interval_s``; at least
            one sample each). Default ``10.0``.
        record_samples: write every sample to ``writer`` (about 2 KB each on a CPU host: some
            7 MB per hour at ``interval_s=1``); ``False``: one record per logging interval, for
            runs of weeks. Default ``True``.
        rate_window_s: window of the data-wait share and the step rate, seconds. Default
            ``10.0``.
        rank: global rank written in the records. Default ``0``.
        context: returns ``(step, epoch)`` for the records (read from the sampler thread).
            Default: the signals' step count and epoch.
        main_thread_ident: thread whose current frame a hang alert cites; default the thread
            that builds the monitor.
    """

    def __init__(
        self,
        sampler: ResourceSampler,
        signals: StepSignals,
        engine: AlertEngine | None = None,
        writer: RecordWriter | None = None,
        interval_s: float = 1.0,
        log_interval_s: float = 10.0,
        rate_window_s: float = 10.0,
        record_samples: bool = True,
        rank: int = 0,
        context: Callable[[], tuple[int, int]] | None = None,
        main_thread_ident: int | None = None,
    ) -> None:
        for name, value in (
            ("interval_s", interval_s),
            ("log_interval_s", log_interval_s),
            ("rate_window_s", rate_window_s),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"ResourceMonitor: {name} must be > 0 seconds, got {value!r}")
        self.sampler = sampler
        self.signals = signals
        self.engine = engine
        self.writer = writer
        self.interval_s = float(interval_s)
        self.log_interval_s = float(log_interval_s)
        self.rate_window_s = float(rate_window_s)
        self.record_samples = bool(record_samples)
        self.rank = rank
        self._context = context or (lambda: (signals.steps, signals.epoch))
        self._main_ident = main_thread_ident or threading.get_ident()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one tick at a time (thread vs the final tick)
        self.pending: dict[str, float] | None = None
        self.samples = 0
        self.failed = False
        self._window: deque[tuple[int, int, int]] = deque()  # (train_ns, wait_ns, steps)
        self._periods: deque[float] = deque(maxlen=600)
        self._last_steps = 0
        self._last_train_ns = 0
        self._interval_sums: dict[str, float] = {}
        self._interval_counts: dict[str, int] = {}
        self._interval_last: dict[str, float] = {}
        self._interval_start: float | None = None
        self._summary: dict[str, list[float]] = {}  # name -> [sum, count, max, last]
        self._write_failed = False

    # -- thread --------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """True while the sampler thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the daemon sampler thread (a daemon never keeps the process alive)."""
        if self.alive:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop and join the thread (idempotent); :meth:`tick` still works after."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def close(self) -> None:
        """:meth:`stop`, then release the sampler (NVML) and the alert sinks (idempotent)."""
        self.stop()
        self.sampler.close()
        if self.engine is not None:
            self.engine.close()

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:
                self.failed = True
                warnings.warn(
                    f"resource monitor failed and is off for the rest of this run "
                    f"({type(exc).__name__}: {exc})",
                    ResourceMonitorWarning,
                    stacklevel=1,
                )
                return
            # Fixed rate; after a stall, skip the missed ticks rather than bursting.
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:
                next_t = now + self.interval_s
            self._stop.wait(next_t - now)

    # -- one tick ------------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> dict[str, float]:
        """Sample once, evaluate the alert rules and fold the values into the records; returns
        the sample (with the training signals). Called by the thread; tests call it directly."""
        with self._lock:
            mono = time.monotonic() if now is None else now
            self.sampler.phase = self.signals.phase
            values = self.sampler.sample(mono)
            values.update(self._training_signals())
            step, epoch = self._context()
            if self.engine is not None:
                self.engine.update(
                    values,
                    t=mono,
                    phase=self.signals.phase,
                    step=step,
                    epoch=epoch,
                    extra=self._extra(values),
                )
            if self.record_samples:
                self._write(self._record(values, step, epoch))
            self._fold(values, mono, step, epoch)
            self.samples += 1
            return values

    def _record(self, metrics: Mapping[str, float], step: int, epoch: int) -> ResourceSample:
        """A ``resources.jsonl`` line (non-finite values left out: JSON has no NaN)."""
        return ResourceSample(
            t=time.time(),
            phase=self.signals.phase,
            epoch=epoch,
            step=step,
            rank=self.rank,
            metrics={k: v for k, v in metrics.items() if math.isfinite(v)},
        )

    def _extra(self, values: Mapping[str, float]) -> dict[str, Any]:
        """Non-metric inputs of the rules."""
        extra: dict[str, Any] = {"checkpoint_bytes": self.signals.checkpoint_bytes}
        if self.signals.straggler is not None:
            extra["straggler"] = self.signals.straggler
        age = values.get("resources/last_step_age_s")
        if age is not None and age > 5.0:
            frame = sys._current_frames().get(self._main_ident)
            if frame is not None:
                code = frame.f_code
                extra["where"] = f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
        return extra

    def _training_signals(self) -> dict[str, float]:
        sig = self.signals
        now = time.perf_counter_ns()
        out: dict[str, float] = {}
        if sig.phase == "train":
            train_ns = sig.train_time_ns(now)
            window = self._window
            window.append((train_ns, sig.wait_ns, sig.steps))
            horizon = train_ns - int(self.rate_window_s * 1e9)
            while len(window) > 2 and window[1][0] <= horizon:
                window.popleft()
            t0, w0, s0 = window[0]
            span = train_ns - t0
            if span > 0 and len(window) > 1:
                out["resources/data_wait_share"] = min(max((sig.wait_ns - w0) / span, 0.0), 1.0)
                out["resources/train_steps_per_s"] = (sig.steps - s0) / (span / 1e9)
        else:
            self._window.clear()
        steps = sig.steps
        train_ns = sig.train_time_ns(now)
        if steps > self._last_steps and train_ns > self._last_train_ns:
            self._periods.append(
                (train_ns - self._last_train_ns) / 1e9 / (steps - self._last_steps)
            )
        self._last_steps, self._last_train_ns = steps, train_ns
        if self._periods:
            out["resources/step_time_median_s"] = statistics.median(self._periods)
        if sig.last_end_ns:
            out["resources/last_step_age_s"] = (now - sig.last_end_ns) / 1e9
        nonfinite = _is_nonfinite(sig.loss)
        if nonfinite is not None:
            out["resources/loss_nonfinite"] = nonfinite
        return out

    # -- records -------------------------------------------------------------------------------

    def _fold(self, values: Mapping[str, float], mono: float, step: int, epoch: int) -> None:
        if self._interval_start is None:
            self._interval_start = mono
        sums, counts, last = self._interval_sums, self._interval_counts, self._interval_last
        for name, value in values.items():
            if not math.isfinite(value):
                continue
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
            last[name] = value
            entry = self._summary.get(name)
            if entry is None:
                self._summary[name] = [value, 1.0, value, value]
            else:
                entry[0] += value
                entry[1] += 1.0
                entry[2] = max(entry[2], value)
                entry[3] = value
        if mono - self._interval_start >= self.log_interval_s - 1e-9:
            self.flush_interval(step, epoch)
            self._interval_start = mono

    def flush_interval(self, step: int | None = None, epoch: int | None = None) -> None:
        """Close the logging interval: its record to :attr:`pending` (and to the writer without
        ``record_samples``)."""
        if not self._interval_last:
            return
        metrics = {
            name: (self._interval_sums[name] / self._interval_counts[name])
            if name.endswith(_MEAN_SUFFIXES)
            else value
            for name, value in self._interval_last.items()
        }
        self._interval_sums, self._interval_counts, self._interval_last = {}, {}, {}
        if step is None or epoch is None:
            step, epoch = self._context()
        self.pending = metrics
        if not self.record_samples:  # otherwise every sample is in the file already
            self._write(self._record(metrics, step, epoch))

    def _write(
        self, record: ResourceSample | ResourceSummary, writer: RecordWriter | None = None
    ) -> None:
        writer = writer or self.writer
        if writer is None or self._write_failed:
            return
        try:
            writer.write(record)
        except OSError as exc:
            self._write_failed = True
            warnings.warn(
                f"resource monitor: cannot write {writer.path} ({exc}); records are off",
                ResourceMonitorWarning,
                stacklevel=2,
            )

    def take_pending(self) -> dict[str, float] | None:
        """The latest unlogged interval record (for the loggers), or None; clears it."""
        pending, self.pending = self.pending, None
        return pending

    def summary(self) -> dict[str, float]:
        """Run summary: ``<name>_mean`` and ``<name>_max`` of every sampled metric, plus the
        per-phase I/O totals, ``resources/samples`` and ``alerts/fired`` (events fired)."""
        out: dict[str, float] = {}
        for name, (total, count, peak, last) in sorted(self._summary.items()):
            if "/io_" in name and name.endswith("_mb"):
                out[name] = last  # cumulative per-phase totals
                continue
            out[f"{name}_mean"] = total / count
            out[f"{name}_max"] = peak
        out["resources/samples"] = float(self.samples)
        if self.engine is not None:
            out["alerts/fired"] = float(self.engine.fired_count)
        return out

    def write_summary(
        self, writer: RecordWriter | None = None, run: str | None = None
    ) -> dict[str, float]:
        """Write the summary record (schema ``receipt-ocr/resource-summary``) and return it.
        ``run`` names what was sampled (``"fit"``, ``"validate"``, ``"test"``): one run folder
        may hold a fit and the test that follows it."""
        summary = self.summary()
        if writer is None and self.writer is not None:
            writer = RecordWriter(self.writer.path)
        if writer is not None:
            record = ResourceSummary(
                t=time.time(),
                rank=self.rank,
                status=dict(self.sampler.status),
                metrics=summary,
                run=run,
            )
            self._write(record, writer)
            writer.close()
        return summary
