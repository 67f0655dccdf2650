"""Host-device sync points of a trace: the calls that block the host until the device is done.

A sync point is a blocking CUDA call: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
``cudaEventSynchronize`` (and their driver forms ``cuStreamSynchronize``, ``cuCtxSynchronize``,
``cuEventSynchronize``), a synchronous copy or memset (``cudaMemcpy``, ``cudaMemset``,
``cuMemcpyDtoH``...; not their ``Async`` variants), and any runtime call that a Kineto
``cuda_sync`` event names by correlation (recorded with ``torch.profiler._ExperimentalConfig(
enable_cuda_sync_events=True)``; a ``Stream Wait Event`` is a device-side wait, no host sync).
A ``cuda_sync`` event whose call the trace lacks counts by itself. A chain of them (a runtime
call over its driver call) is one sync point, its outermost call.

``aten::item`` / ``_local_scalar_dense`` are not sync points themselves: on a device tensor they
hold one (a DtoH ``cudaMemcpyAsync`` then a ``cudaStreamSynchronize``); on a CPU tensor (an
optimizer's ``step`` counter) none, and they cost no device time at all.

A sync point's cost is the host time it blocked (its duration). It *stalled* the host when
device work queued before it ended while it blocked (or it blocked ``sync_stall_us`` or longer);
only those are counted as sync points per step. One that found the device idle returns in
microseconds and is counted apart (``sync_idle_calls_per_step``) and still named: it blocks
whenever work is queued (remove the sync before it, and the wait moves there). Only the
calls on the step's own host thread count: a pin-memory thread that blocks does not stall the
loop. :func:`sync_points` places each one in its step and phase and names it
(:func:`~trainperf.analysis.trace.stacks.sync_calls`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainperf.analysis.trace.stacks import SyncCall, sync_calls
from trainperf.analysis.trace.step_phases import PHASES, launch_calls
from trainperf.analysis.trace.steps import StepTable, locate
from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.core.findings import threshold

__all__ = ["SyncPoints", "blocking_calls", "is_blocking_call", "stalled", "sync_points", "waited"]

_SYNC_NAMES = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
    }
)
# cudaMemcpy, cudaMemcpy2D, cudaMemcpyToSymbol, cudaMemset, cuMemcpyDtoH_v2, ...: not *Async*
_SYNC_COPY = re.compile(r"^cu(?:da)?Mem(?:cpy|set)(?!\w*Async)\w*$")
#: ``cuda_sync`` events that are no host sync: a stream waiting on an event, on the device.
_DEVICE_WAIT = "Wait Event"
#: Parent levels climbed to find whether a blocking call is inside another one.
_CHAIN = 8


def is_blocking_call(name: str) -> bool:
    """Whether a runtime or driver call of this name blocks the host (see the module doc)."""
    return name in _SYNC_NAMES or _SYNC_COPY.match(name) is not None


def blocking_calls(table: EventTable) -> np.ndarray:
    """Event indexes of every sync point of ``table`` (see the module doc), ascending."""
    calls = np.isin(table.kind, (Kind.RUNTIME, Kind.DRIVER))
    sync = table.name_ids(is_blocking_call)[table.name] & calls
    standalone = np.zeros(0, np.int64)
    marks = np.flatnonzero(
        (table.kind == Kind.SYNC) & ~table.name_ids(lambda s: _DEVICE_WAIT in s)[table.name]
    )
    if marks.size:
        linked = launch_calls(table, marks)
        sync[linked[linked >= 0]] = True
        standalone = marks[linked < 0]
    # only the outermost call of a chain (cudaStreamSynchronize > cuStreamSynchronize)
    outer = sync.copy()
    anc = table.parent.astype(np.int64)
    for _ in range(_CHAIN):
        valid = anc >= 0
        if not valid.any():
            break
        outer[valid] &= ~sync[anc[valid]]
        anc = np.where(valid, table.parent[np.maximum(anc, 0)], -1)
    return np.union1d(np.flatnonzero(outer), standalone)


def _op_start(table: EventTable, idx: np.ndarray) -> np.ndarray:
    """Start (ns) of the outermost operator above each call ``idx`` (its own start without
    one): the op whose own device work (``aten::item``'s DtoH copy) the sync then waits for."""
    start = table.start[idx].copy()
    a = table.parent[idx].astype(np.int64)
    for _ in range(64):  # op stacks are shallow; the bound guards malformed parents
        ok = a >= 0
        ok[ok] &= table.kind[a[ok]] == Kind.CPU_OP
        if not ok.any():
            break
        start[ok] = table.start[a[ok]]
        a = np.where(ok, table.parent[np.maximum(a, 0)], -1)
    return start


def waited(table: EventTable, idx: np.ndarray) -> np.ndarray:
    """Per sync point ``idx``: whether it waited for device work queued before it: a kernel or
    copy of its file that ended while it blocked, launched before the operator that holds the
    sync began (so not the operator's own DtoH copy of ``.item()``)."""
    out = np.zeros(idx.size, bool)
    dev = np.flatnonzero(np.isin(table.kind, Kind.DEVICE))
    rt = launch_calls(table, dev)
    queued_at = np.where(rt >= 0, table.start[np.maximum(rt, 0)], table.start[dev])
    since = _op_start(table, idx)
    for src in np.unique(table.src[idx]).tolist():
        of_src = table.src[dev] == src
        order = np.argsort(table.end[dev[of_src]], kind="stable")
        ends, launched = table.end[dev[of_src]][order], queued_at[of_src][order]
        rows = np.flatnonzero(table.src[idx] == src)
        lo = np.searchsorted(ends, table.start[idx[rows]], side="right")
        hi = np.searchsorted(ends, table.end[idx[rows]], side="right")
        some = np.flatnonzero(hi > lo)
        if some.size:
            # the earliest launch among the device events that ended while each call blocked
            # (reduceat over the pairs lo, hi: its even results reduce [lo, hi))
            pairs = np.stack([lo[some], hi[some]], axis=1).ravel()
            first = np.minimum.reduceat(np.append(launched, 0), pairs)[::2]
            out[rows[some]] = first < since[rows[some]]
    return out


def stalled(table: EventTable, idx: np.ndarray) -> np.ndarray:
    """Per sync point ``idx``: whether it stalled the host: it :func:`waited` for device work
    queued before it, or blocked at least ``sync_stall_us`` (device work the trace lost, another
    stream's). The others found the device idle and returned in microseconds."""
    long = table.dur[idx] >= threshold("sync_stall_us") * 1e3
    return waited(table, idx) | long


@dataclass
class SyncPoints:
    """The sync points inside the steps of one table.

    Args:
        idx: their event indexes; step, phase: the step and phase each is in.
        calls: each one named (:class:`~trainperf.analysis.trace.stacks.SyncCall`), aligned with
        ``idx``.
        blocked: (n_steps, len(PHASES)) ns of host time blocked, by step and phase.
    """

    idx: np.ndarray
    step: np.ndarray
    phase: np.ndarray
    calls: list[SyncCall]
    blocked: np.ndarray


def sync_points(table: EventTable, steps: StepTable) -> SyncPoints:
    """The sync points of ``table`` inside its ``steps``: blocking calls on a step's own host
    thread (``cuda_sync`` events without their call: in the steps of their file)."""
    idx = blocking_calls(table)
    on_host = table.kind[idx] != Kind.SYNC
    step = np.full(idx.size, -1, np.int64)
    phase = np.full(idx.size, -1, np.int64)
    step[on_host], phase[on_host] = locate(steps, table, idx[on_host])
    step[~on_host], phase[~on_host] = locate(steps, table, idx[~on_host], by_source=True)
    inside = step >= 0
    same_thread = np.zeros(idx.size, bool)
    same_thread[inside] = table.thread[idx[inside]] == steps.thread[step[inside]]
    keep = inside & (same_thread | ~on_host)
    idx, step, phase = idx[keep], step[keep], phase[keep]
    blocked = np.zeros((len(steps), len(PHASES)), np.int64)
    np.add.at(blocked, (step, phase), table.dur[idx])
    return SyncPoints(
        idx=idx,
        step=step,
        phase=phase,
        calls=sync_calls(table, idx, stalled(table, idx)),
        blocked=blocked,
    )
