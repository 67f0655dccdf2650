"""One cheap memory snapshot of this process, the host and the current CUDA device; a cheaper
sample of what a peak needs."""

from __future__ import annotations

import os

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
