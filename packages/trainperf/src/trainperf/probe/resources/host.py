"""Host-side resource sources: memory limit and one process's CPU, I/O, USS.

Host-side sources: cgroup-aware memory limit, and CPU / I/O / USS-PSS of one process from a
kept ``psutil`` handle (a fresh handle reads 0 % CPU on its first call)."""

from __future__ import annotations

import time
from pathlib import Path

import psutil


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


def existing_dir(path: Path) -> Path:
    """``path`` or its nearest existing parent (the checkpoint folder may not exist yet)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


class ProcHandle:
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
        read, written, stored = (max(c - p, 0) for c, p in zip(current, previous, strict=True))
        return read, written, stored
