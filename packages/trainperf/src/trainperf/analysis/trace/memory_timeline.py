"""Memory peaks per source and device and their downsampled timeline.

Memory peaks per (source, device) and their downsampled timeline, from the ``[memory]`` events
of one table or of the time windows of a large file, in time order (:class:`MemoryPeaks`).

Uses ``Total Allocated`` / ``Total Reserved`` where the trace writes them; older traces only have
per-event ``Bytes``, so the running sum is used and the peak is marked ``estimated`` (growth since
profiling started; allocations made before are unknown)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainperf.analysis.trace.aggregates import ms
from trainperf.analysis.trace.step_phases import PHASES
from trainperf.analysis.trace.steps import StepTable
from trainperf.analysis.trace.table import MemoryTable, TraceSource
from trainperf.analysis.trace.trace_analysis import MemoryPeak

__all__ = ["DeviceRange", "MemoryPeaks", "device_key", "device_ranges"]

#: Points of each device's timeline.
POINTS = 200


@dataclass(frozen=True)
class DeviceRange:
    """What the whole file says of one device's ``[memory]`` events before they are read in
    windows: the first and last time (ns) and whether any lacks ``Total Allocated``."""

    first: int
    last: int
    estimated: bool


def device_key(src: np.ndarray | int, device_type: np.ndarray, device_id: np.ndarray) -> np.ndarray:
    """The key of each ``[memory]`` event's (source, device)."""
    return src * 1_000_000 + device_type * 1000 + (device_id + 1)


def _keys(mem: MemoryTable) -> np.ndarray:
    return device_key(mem.src, mem.device_type, mem.device_id)


def device_ranges(mem: MemoryTable) -> dict[int, DeviceRange]:
    """The :class:`DeviceRange` of each device key of ``mem`` (a whole table)."""
    keys = _keys(mem)
    out = {}
    for key in np.unique(keys).tolist():
        rows = keys == key
        ts = mem.ts[rows]
        out[key] = DeviceRange(
            int(ts.min()), int(ts.max()), bool((mem.total_allocated[rows] < 0).any())
        )
    return out


@dataclass
class _Device:
    src: int
    device_type: int
    device_id: int
    span: DeviceRange
    events: int = 0
    carried: int = 0  # the running sum of ``Bytes`` so far (estimated peaks)
    lowest: int = 0  # its lowest value (estimated peaks are counted from it)
    peak: int | None = None
    at: int = 0
    step: int | None = None
    phase: str | None = None
    reserved: int = -1
    hi: np.ndarray = field(default_factory=lambda: np.full(POINTS, np.iinfo(np.int64).min))
    t_bin: np.ndarray = field(default_factory=lambda: np.zeros(POINTS, np.int64))
    used: np.ndarray = field(default_factory=lambda: np.zeros(POINTS, bool))


class MemoryPeaks:
    """Peaks and timelines gathered window by window (:meth:`add`, in time order), then
    :meth:`finish`. ``ranges`` are the whole file's :func:`device_ranges`."""

    def __init__(self, ranges: dict[int, DeviceRange]) -> None:
        self.ranges = ranges
        self.devices: dict[int, _Device] = {}

    def add(self, mem: MemoryTable, steps: StepTable, step_offset: int = 0) -> None:
        """The ``[memory]`` events of one window (every one counted) with the window's steps,
        whose indexes start at ``step_offset`` in the merged steps."""
        if len(mem) == 0:
            return
        keys = _keys(mem)
        for key in np.unique(keys).tolist():
            rows = np.flatnonzero(keys == key)
            rows = rows[np.argsort(mem.ts[rows], kind="stable")]
            dev = self.devices.get(key)
            if dev is None:
                dev = self.devices[key] = _Device(
                    src=int(mem.src[rows[0]]),
                    device_type=int(mem.device_type[rows[0]]),
                    device_id=int(mem.device_id[rows[0]]),
                    span=self.ranges[key],
                )
            self._add(dev, mem, rows, steps, step_offset)

    @staticmethod
    def _add(
        dev: _Device, mem: MemoryTable, rows: np.ndarray, steps: StepTable, step_offset: int
    ) -> None:
        ts = mem.ts[rows]
        if dev.span.estimated:
            alloc = np.cumsum(mem.nbytes[rows]) + dev.carried
            dev.carried = int(alloc[-1])
            dev.lowest = min(dev.lowest, int(alloc.min()))
        else:
            alloc = mem.total_allocated[rows]
        dev.events += int(rows.size)
        reserved = mem.total_reserved[rows]
        dev.reserved = max(dev.reserved, int(reserved.max()))
        k = int(np.argmax(alloc))
        if dev.peak is None or int(alloc[k]) > dev.peak:
            dev.peak, dev.at = int(alloc[k]), int(ts[k])
            dev.step, dev.phase = _step_at(steps, dev.src, dev.at)
            if dev.step is not None:
                dev.step += step_offset
        # downsample keeping each bin's maximum so the peak survives
        width = max(1, dev.span.last - dev.span.first + 1)
        bins = np.minimum(((ts - dev.span.first) * POINTS) // width, POINTS - 1)
        np.maximum.at(dev.hi, bins, alloc)
        np.maximum.at(dev.t_bin, bins, ts)
        dev.used[bins] = True

    def finish(
        self, sources: list[TraceSource], labels: list[str]
    ) -> tuple[list[MemoryPeak], dict[str, list[list[float]]]]:
        """Peak memory per (source, device) and the timeline of allocated bytes; ``labels`` of
        the merged steps."""
        peaks: list[MemoryPeak] = []
        timeline: dict[str, list[list[float]]] = {}
        for key in sorted(self.devices):
            dev = self.devices[key]
            assert dev.peak is not None
            shift = -min(0, dev.lowest)  # estimated: counted from the lowest running sum
            dtype, did = dev.device_type, dev.device_id
            device = (
                "cpu" if dtype == 0 else (f"cuda:{did}" if dtype == 1 else f"type{dtype}:{did}")
            )
            label = f"{device}" if len(sources) == 1 else f"{device}@{dev.src}"
            capacity = None
            if dtype == 1:
                for d in sources[dev.src].device_properties:
                    if d.get("id") == did and isinstance(d.get("totalGlobalMem"), int | float):
                        capacity = int(d["totalGlobalMem"])
            peak = dev.peak + shift
            peak_reserved = dev.reserved if dev.reserved >= 0 else None
            peaks.append(
                MemoryPeak(
                    device=device,
                    source=dev.src,
                    peak_allocated_bytes=peak,
                    peak_reserved_bytes=peak_reserved,
                    estimated=dev.span.estimated,
                    at_ms=ms(dev.at),
                    step=labels[dev.step] if dev.step is not None else None,
                    phase=dev.phase,
                    capacity_bytes=capacity,
                    pct_of_capacity=(
                        round(100.0 * max(peak, peak_reserved or 0) / capacity, 2)
                        if capacity
                        else None
                    ),
                    events=dev.events,
                )
            )
            timeline[label] = [
                [ms(t), int(v) + shift]
                for t, v in zip(dev.t_bin[dev.used], dev.hi[dev.used], strict=True)
            ]
        return peaks, timeline


def _step_at(steps: StepTable, src: int, t: int) -> tuple[int | None, str | None]:
    """The step (index) of source ``src`` holding time ``t`` and the phase there."""
    if not len(steps):
        return None, None
    inside = np.flatnonzero((steps.src == src) & (steps.start <= t) & (steps.end > t))
    if not inside.size:
        return None, None
    si = int(inside[0])
    seg = np.flatnonzero((steps.seg_step == si) & (steps.seg_start <= t) & (steps.seg_end > t))
    return si, PHASES[int(steps.seg_phase[seg[0]])] if seg.size else None
