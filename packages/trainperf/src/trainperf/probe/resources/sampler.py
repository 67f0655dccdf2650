"""``ResourceSampler``: every resource figure read once per call into one dict.

``ResourceSampler``: host, process, DataLoader workers, I/O, disk, network and GPU figures read
once per call into one flat ``{"resources/<name>": float}`` dict (names in
:data:`~trainperf.probe.resources.metric_names.METRIC_DOCS`).

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
- A source that raises is reported in one warning and marked unavailable; the others go on.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from trainperf.probe.device_memory import GB
from trainperf.probe.resources.host import ProcHandle, existing_dir, memory_limit
from trainperf.probe.resources.metric_names import MB, PHASE_NAMES
from trainperf.probe.resources.nvml import NvmlGpus


class ResourceMonitorWarning(UserWarning):
    """A resource source failed (it is off for the run) or the monitor turned itself off."""


class ResourceSampler:
    """Not thread-safe: one thread calls :meth:`sample` (the monitor's). :attr:`phase` may be set
    from another thread; I/O since the previous sample is charged to the phase current at
    sampling time. The intervals are validated where they come from config (the callback).

    Args:
        checkpoint_dir: folder whose file system's free space is reported (its nearest existing
            parent while it does not exist); ``None``: not reported.
        device_uuids: as :class:`~trainperf.probe.resources.nvml.NvmlGpus` takes them.
        cuda_device: torch CUDA device whose allocator counters are read (only once CUDA is
            initialised in this process); ``None``: none.
        worker_refresh_s: seconds between scans for DataLoader workers (a scan costs a few ms).
        memory_detail_s: seconds between USS/PSS reads (``memory_full_info`` walks every
            mapping: ~3 ms per process once torch is loaded; samples in between reuse the last
            figures); ``0``: never (the leak rule then watches RSS).
        nvml: the NVML module (tests pass a fake); ``None`` imports ``pynvml``.
    """

    def __init__(
        self,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        device_uuids: Sequence[str] | None = None,
        cuda_device: int | None = None,
        worker_refresh_s: float = 5.0,
        memory_detail_s: float = 5.0,
        nvml: Any = None,
    ) -> None:
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.cuda_device = cuda_device
        self.worker_refresh_s = float(worker_refresh_s)
        self.memory_detail_s = float(memory_detail_s)
        self._want_detail = self.memory_detail_s > 0  # USS/PSS wanted at all
        self._detail_t = -math.inf
        self.phase = "idle"
        self.status: dict[str, str] = {}
        self.io_totals: dict[str, list[float]] = {p: [0.0, 0.0] for p in PHASE_NAMES}
        self._off: set[str] = set()
        now = time.monotonic()
        self._main = ProcHandle(psutil.Process(), now)
        try:
            self._main_exe = self._main.handle.exe()
        except psutil.Error:
            self._main_exe = ""
        with contextlib.suppress(psutil.Error, AttributeError):
            self._main.io_delta()  # I/O before the monitor started is not the run's
        self._workers: dict[int, ProcHandle] = {}
        self._workers_scanned = -math.inf
        self._sys_cpu = psutil.cpu_times()
        self._counters: dict[str, tuple[float, Any]] = {}  # disk / network: (t, I/O counters)
        self._io_t = now
        self._cuda_total: float | None = None
        self._gpu = NvmlGpus(nvml, device_uuids)
        self.status["gpu"] = self._gpu.status

    def close(self) -> None:
        """Release NVML (idempotent)."""
        self._gpu.close()

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
            warnings.warn(
                f"resource monitor: {source} sampling failed and is off for this run "
                f"({type(exc).__name__}: {exc})",
                ResourceMonitorWarning,
                stacklevel=2,
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
        if self._gpu.active:
            self._guard("gpu", lambda values, _: self._gpu.sample(values), out, now)
            if "gpu" in self._off:
                self.close()
        if self.cuda_device is not None:
            self._guard("torch_cuda", self._sample_torch_cuda, out, now)
        if "resources/process_rss_gb" in out:
            workers = out.get("resources/workers_uss_gb", out.get("resources/workers_rss_gb", 0.0))
            out["resources/process_tree_memory_gb"] = out["resources/process_rss_gb"] + workers
        return out

    def worker_uss(self) -> dict[str, float]:
        """Each DataLoader worker's USS in bytes at its last read, by pid (empty when USS is
        not read): the per-worker series ``trainperf.analysis.memory_growth.workers`` classifies."""
        return {str(pid): w.uss for pid, w in self._workers.items() if w.uss is not None}

    def _full_memory(self, proc: ProcHandle, due: bool) -> tuple[float, float] | None:
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
            alive[child.pid] = known if known is not None else ProcHandle(child, now)
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

    def _sample_rates(
        self, out: dict[str, float], now: float, source: str, counters: Any, names: dict[str, str]
    ) -> None:
        """MB/s of each byte counter since the previous sample: ``names`` maps a counter's field
        to its metric (without ``resources/``)."""
        if counters is None:
            raise RuntimeError(f"no {source} I/O counters on this system")
        previous = self._counters.get(source)
        self._counters[source] = (now, counters)
        if previous is None or now <= previous[0]:
            return
        t0, before = previous
        for name, key in names.items():
            delta = max(getattr(counters, name) - getattr(before, name), 0)
            out[f"resources/{key}"] = delta / MB / (now - t0)

    def _sample_disk(self, out: dict[str, float], now: float) -> None:
        names = {"read_bytes": "disk_read_mb_s", "write_bytes": "disk_write_mb_s"}
        self._sample_rates(out, now, "disk", psutil.disk_io_counters(), names)

    def _sample_network(self, out: dict[str, float], now: float) -> None:
        names = {"bytes_recv": "net_recv_mb_s", "bytes_sent": "net_sent_mb_s"}
        self._sample_rates(out, now, "network", psutil.net_io_counters(), names)

    def _sample_free_space(self, out: dict[str, float], now: float) -> None:
        assert self.checkpoint_dir is not None
        usage = shutil.disk_usage(existing_dir(self.checkpoint_dir))
        out["resources/checkpoint_dir_free_gb"] = usage.free / GB

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
