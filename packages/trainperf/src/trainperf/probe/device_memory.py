"""Memory snapshots of this process, the host and the CUDA device.

One cheap memory snapshot of this process, the host and the current CUDA device; a cheaper
sample of what a peak needs; and :class:`MemorySampler`, which paces in-epoch peak samples."""

from __future__ import annotations

import os
import time

import psutil
import torch

GB = float(1 << 30)  # "GB" in metric names means GiB, as torch's memory summaries do

# A handle is cached because building one per call costs more than the reading itself; it is
# rebuilt when the pid changes (a forked DataLoader worker inherits the parent's handle).
_process: psutil.Process | None = None


def _this_process() -> psutil.Process:
    global _process
    if _process is None or _process.pid != os.getpid():
        _process = psutil.Process()
    return _process


def _cuda_ready() -> bool:
    # is_initialized(): never create a CUDA context just to report that it is empty.
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def memory_snapshot() -> dict[str, float]:
    """Memory figures now, in GiB (``*_gb``) or percent.

    Keys: ``process_rss_gb`` (this process only; no child scan, so DataLoader workers are not
    included), ``system_memory_percent`` (the host, not a container limit); when CUDA is
    available and initialised, for the current device: ``cuda_allocated_gb``,
    ``cuda_reserved_gb``, ``cuda_max_allocated_gb`` (peak since the last
    :func:`reset_peak_memory`). Costs tens of microseconds; never synchronises the GPU.
    """
    out = {
        "process_rss_gb": _this_process().memory_info().rss / GB,
        "system_memory_percent": float(psutil.virtual_memory().percent),
    }
    if _cuda_ready():
        device = torch.cuda.current_device()
        out["cuda_allocated_gb"] = torch.cuda.memory_allocated(device) / GB
        out["cuda_reserved_gb"] = torch.cuda.memory_reserved(device) / GB
        out["cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated(device) / GB
    return out


def peak_sample() -> dict[str, float]:
    """What an in-epoch peak needs, and no more: ``process_rss_gb`` and, when CUDA is available
    and initialised, ``cuda_max_allocated_gb`` (as in :func:`memory_snapshot`). A quarter of a
    snapshot's cost: the host-wide ``system_memory_percent`` (``psutil.virtual_memory()``,
    which parses all of ``/proc/meminfo``: ~210,000 of a snapshot's ~260,000 instructions) is
    left out, as the peaks do not use it."""
    out = {"process_rss_gb": _this_process().memory_info().rss / GB}
    if _cuda_ready():
        device = torch.cuda.current_device()
        out["cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated(device) / GB
    return out


def reset_peak_memory() -> None:
    """Start a new peak window for ``cuda_max_allocated_gb`` (no-op without initialised CUDA)."""
    if _cuda_ready():
        torch.cuda.reset_peak_memory_stats(torch.cuda.current_device())


#: In-epoch memory samples (for the peaks) at most this often: a peak sample costs ~10 us.
MEMORY_PERIOD_NS = 1_000_000_000


class MemorySampler:
    """Memory readings for a window's peaks, paced: the recorder samples at a window's open,
    pause and close, and in between at most once per ``period_ns`` (``due``). ``track`` off
    (no subscriber asked for memory): the recorder takes no reading at all.

    The hot path reads ``track``, ``last_ns`` and ``period_ns`` directly (no call per batch).
    """

    __slots__ = ("last_ns", "period_ns", "track")

    def __init__(self, period_ns: int | None = None) -> None:
        self.track = False
        self.period_ns = MEMORY_PERIOD_NS if period_ns is None else period_ns
        self.last_ns = 0  # perf_counter_ns of the last reading

    def due(self, now_ns: int) -> bool:
        """Whether an in-epoch sample is due at ``now_ns`` (tracking on, a period since the
        last reading)."""
        return self.track and now_ns - self.last_ns >= self.period_ns

    def sample(self, full: bool = False) -> dict[str, float]:
        """A reading now: the whole :func:`memory_snapshot` with ``full`` (the epoch-end
        gauges), else only what the peaks need (:func:`peak_sample`)."""
        snap = memory_snapshot() if full else peak_sample()
        self.last_ns = time.perf_counter_ns()
        return snap

    def restart_peak(self) -> None:
        """A new peak window for the CUDA allocator's peak (:func:`reset_peak_memory`)."""
        reset_peak_memory()
