"""Steps of a trace and the split of each one's wall time into phases.

:func:`compute_steps` finds the ``ProfilerStep#N`` spans of an
:class:`~trainperf.analysis.trace.table.EventTable` and splits each one's wall time into the live
clock's phases (:data:`~trainperf.analysis.trace.step_phases.PHASES`, labelled and inferred in
:mod:`~trainperf.analysis.trace.step_phases`) and, with device events, into
:data:`~trainperf.analysis.trace.step_phases.GPU_PARTS`; :func:`locate` places any event in its
step and phase. Pure and vectorised: nothing here reads files or prints. Times are int64 ns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainperf.analysis.trace import step_phases as _phases
from trainperf.analysis.trace.step_phases import (
    BACKWARD_OP,
    PHASE_CODE,
    backward_clusters,
    infer_regions,
    marker_arrays,
    stage_of,
)
from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.core.moved import moved_module

__all__ = ["StepTable", "compute_steps", "concat_steps", "locate", "process_key"]

# These names lived here until the phase split moved to step_phases (works until 0.3).
__getattr__ = moved_module(
    __name__,
    "trainperf.analysis.trace.step_phases",
    only={
        "GPU_PARTS",
        "PHASES",
        "STEP_NAME",
        "classify_phase",
        "launch_calls",
        "merge_intervals",
        "union_in_windows",
    },
)

_P_XFER = PHASE_CODE["transfer"]
_P_OTHER = PHASE_CODE["unattributed"]


@dataclass
class StepTable:
    """Steps (``ProfilerStep#N`` spans) and their breakdowns, one row per step.

    Args:
        label: unique label per step (``ProfilerStep#2``, a repeat becomes ``ProfilerStep#2 (2)``).
        number: N of ``ProfilerStep#N``.
        src, thread: source index and host thread of the step span.
        start, end: window in ns (table time).
        stage: ``train``, ``validation``, ``test`` or ``predict``.
        phases: (n_steps, len(PHASES)) ns, each row sums to the step's wall time.
        gpu: (n_steps, len(GPU_PARTS)) ns or ``None`` without device events.
        gpu_phases: (n_steps, len(PHASES)) ns of device time (kernels, copies) by the phase of
            the host call that launched it, or ``None`` without device events.
        runtime_ns: host time in CUDA runtime calls inside the step (overlaps the phases).
        seg_key, seg_start, seg_end, seg_phase, seg_step: the phase segments, keyed by
            ``src * 2**20 + pid code`` so events of any thread of the process can be placed.
        ignored: ProfilerStep spans dropped (nested in or equal to another one).
        blocked: (n_steps, len(PHASES)) ns of host time blocked in sync points, by the phase
            they are in (part of that phase's time: the host waiting for the device); set with
            the sync points (:func:`~trainperf.analysis.trace.syncs.sync_points`), ``None`` until
            then.
    """

    label: list[str]
    number: np.ndarray
    src: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    stage: list[str]
    phases: np.ndarray
    gpu: np.ndarray | None
    gpu_phases: np.ndarray | None
    runtime_ns: np.ndarray
    seg_key: np.ndarray
    seg_start: np.ndarray
    seg_end: np.ndarray
    seg_phase: np.ndarray
    seg_step: np.ndarray
    ignored: int = 0
    blocked: np.ndarray | None = None

    def warnings(self) -> list[str]:
        """What the step finder skipped, as the analysis's warnings say it."""
        if not self.ignored:
            return []
        return [f"ignored {self.ignored} ProfilerStep spans nested in or equal to another one"]

    def __len__(self) -> int:
        return len(self.label)

    @property
    def wall(self) -> np.ndarray:
        """Wall time per step (ns)."""
        return self.end - self.start


#: Events placed per block by :func:`locate`.
_LOCATE_BLOCK = 1 << 20


def process_key(table: EventTable) -> np.ndarray:
    """Per thread code: ``src * 2**20 + pid code`` (threads of one process share it)."""
    pid_codes: dict[tuple[int, str], int] = {}
    return np.fromiter(
        (
            src * (1 << 20) + pid_codes.setdefault((src, pid), len(pid_codes))
            for src, pid, _ in table.thread_keys
        ),
        np.int64,
        len(table.thread_keys),
    )


def _find_steps(table: EventTable) -> tuple[list[int], int]:
    """Event indices of the step spans after dropping exact duplicates and nested repeats, and
    the number dropped."""
    is_step_name = table.name_ids(lambda n: _phases.STEP_NAME.match(n) is not None)
    host = np.isin(table.kind, Kind.HOST)
    idx = np.flatnonzero(is_step_name[table.name] & host & (table.dur > 0))
    if idx.size == 0:
        return [], 0
    order = np.lexsort((-table.dur[idx], table.start[idx], table.thread[idx]))
    idx = idx[order]
    kept: list[int] = []
    dropped = 0
    last_end: dict[int, int] = {}
    for i in idx.tolist():
        t = int(table.thread[i])
        e = int(table.start[i] + table.dur[i])
        if t in last_end and e <= last_end[t]:
            dropped += 1  # exact duplicate or a step span inside another one
            continue
        kept.append(i)
        last_end[t] = max(e, last_end.get(t, e))
    kept.sort(key=lambda i: (int(table.src[i]), int(table.start[i])))
    return kept, dropped


def _labels(src: np.ndarray, numbers: np.ndarray) -> list[str]:
    """A unique label per step: ``ProfilerStep#N``, a repeat of N in one source
    ``ProfilerStep#N (2)``."""
    labels: list[str] = []
    seen: dict[tuple[int, int], int] = {}
    for s, num in zip(src.tolist(), numbers.tolist(), strict=True):
        k = (s, num)
        seen[k] = seen.get(k, 0) + 1
        base = f"ProfilerStep#{num}"
        labels.append(base if seen[k] == 1 else f"{base} ({seen[k]})")
    return labels


def concat_steps(parts: list[StepTable]) -> StepTable:
    """The steps of consecutive time windows of one file as one table (labels made unique
    again; a window without device events gets device rows of pure idle where others have
    them)."""
    ignored = sum(p.ignored for p in parts)
    parts = [p for p in parts if len(p)]
    if not parts:
        return _empty_steps()
    if len(parts) == 1:
        return dataclasses.replace(parts[0], ignored=ignored)
    n = [len(p) for p in parts]
    offsets = np.cumsum([0, *n[:-1]])

    def cat(get: Any) -> np.ndarray:
        return np.concatenate([get(p) for p in parts])

    src, number = cat(lambda p: p.src), cat(lambda p: p.number)
    blocked = None
    if any(p.blocked is not None for p in parts):
        blocked = np.concatenate(
            [
                p.blocked
                if p.blocked is not None
                else np.zeros((len(p), len(_phases.PHASES)), np.int64)
                for p in parts
            ]
        )
    gpu = gpu_phases = None
    if any(p.gpu is not None for p in parts):
        gpu = np.concatenate(
            [
                p.gpu
                if p.gpu is not None
                else np.column_stack(
                    [np.zeros((len(p), len(_phases.GPU_PARTS) - 1), np.int64), p.wall]
                )
                for p in parts
            ]
        )
        gpu_phases = np.concatenate(
            [
                p.gpu_phases
                if p.gpu_phases is not None
                else np.zeros((len(p), len(_phases.PHASES)), np.int64)
                for p in parts
            ]
        )
    return StepTable(
        label=_labels(src, number),
        number=number,
        src=src,
        thread=cat(lambda p: p.thread),
        start=cat(lambda p: p.start),
        end=cat(lambda p: p.end),
        stage=[s for p in parts for s in p.stage],
        phases=cat(lambda p: p.phases),
        gpu=gpu,
        gpu_phases=gpu_phases,
        runtime_ns=cat(lambda p: p.runtime_ns),
        seg_key=cat(lambda p: p.seg_key),
        seg_start=cat(lambda p: p.seg_start),
        seg_end=cat(lambda p: p.seg_end),
        seg_phase=cat(lambda p: p.seg_phase),
        seg_step=np.concatenate([p.seg_step + off for p, off in zip(parts, offsets, strict=True)]),
        ignored=ignored,
        blocked=blocked,
    )


def _empty_steps() -> StepTable:
    e = np.zeros(0, np.int64)
    no_phases = np.zeros((0, len(_phases.PHASES)), np.int64)
    return StepTable([], e, e, e, e, e, [], no_phases, None, None, e, e, e, e, e, e)


def compute_steps(table: EventTable) -> StepTable:
    """Find the steps and split each one's wall time into :data:`PHASES` (host view) and, when the
    process has device events, :data:`GPU_PARTS` (device view) and device time per phase.

    Inside a step the innermost labelled span decides at every instant (latest start, then
    shortest): the step function and its ops are forward, the autograd engine's ops backward,
    ``Optimizer.step`` / ``zero_grad`` minus the forward and backward nested in them (Lightning's
    closure) optimizer, the DataLoader's ``__next__`` data loading, host-to-device copies
    transfer, Lightning's hooks module_hooks, callbacks and checkpoint (as the live clock splits
    them); time no label claims is unattributed. Labels missing from the trace are inferred (see
    :func:`~trainperf.analysis.trace.step_phases.infer_regions`).
    """
    steps, ignored = _find_steps(table)
    n = len(steps)
    pkey_of_thread = process_key(table)
    if n == 0:
        return _empty_steps()
    sidx = np.asarray(steps, np.int64)
    st_start = table.start[sidx]
    st_end = st_start + table.dur[sidx]
    st_thread = table.thread[sidx]
    st_src = table.src[sidx]
    numbers = np.fromiter(
        (
            int(_phases.STEP_NAME.match(table.names[table.name[i]]).group(1))  # type: ignore[union-attr]
            for i in steps
        ),
        np.int64,
        n,
    )
    labels = _labels(st_src, numbers)

    mk, phase_of_name = marker_arrays(table)
    is_transfer_op = phase_of_name[table.name[mk]] < 0
    mk_thread = table.thread[mk]
    mk_start = table.start[mk]
    mk_end = mk_start + table.dur[mk]
    mk_phase = np.where(is_transfer_op, _P_XFER, phase_of_name[np.maximum(table.name[mk], 0)])
    max_mk = int((mk_end - mk_start).max()) if mk.size else 0

    is_bwd_name = table.name_ids(lambda x: BACKWARD_OP.search(x) is not None)
    bwd = np.flatnonzero(is_bwd_name[table.name] & (table.kind == Kind.CPU_OP) & (table.dur > 0))
    bwd_pkey = pkey_of_thread[table.thread[bwd]]
    bwd_start = table.start[bwd]
    bwd_end = bwd_start + table.dur[bwd]
    # ops that separate two backward passes: any other op of the step's thread
    is_step_name = table.name_ids(lambda x: _phases.STEP_NAME.match(x) is not None)
    brk = np.flatnonzero(
        (table.kind == Kind.CPU_OP)
        & ~is_bwd_name[table.name]
        & (phase_of_name[table.name] < 0)
        & ~is_step_name[table.name]
    )
    brk = brk[np.lexsort((table.start[brk], table.thread[brk]))]
    brk_thread = table.thread[brk]
    brk_start = table.start[brk]
    stage_names = {
        code: stg for code, nm in enumerate(table.names) if (stg := stage_of(nm)) is not None
    }

    phases = np.zeros((n, len(_phases.PHASES)), np.int64)
    stages: list[str] = []
    seg_key, seg_s, seg_e, seg_p, seg_step = [], [], [], [], []
    for i in range(n):
        s, e, t = int(st_start[i]), int(st_end[i]), int(st_thread[i])
        lo = np.searchsorted(mk_thread, t, side="left")
        hi = np.searchsorted(mk_thread, t, side="right")
        a = lo + np.searchsorted(mk_start[lo:hi], s - max_mk, side="left")
        b = lo + np.searchsorted(mk_start[lo:hi], e, side="left")
        sel = np.arange(a, b)
        sel = sel[mk_end[sel] > s]
        m_s = np.maximum(mk_start[sel], s)
        m_e = np.minimum(mk_end[sel], e)
        m_p = mk_phase[sel]
        true_s, true_e = mk_start[sel], mk_end[sel]
        stage = "train"
        for code in table.name[mk[sel]].tolist():
            if code in stage_names:
                stage = stage_names[code]
                break
        pk = int(pkey_of_thread[t])
        bsel = (bwd_pkey == pk) & (bwd_start < e) & (bwd_end > s)
        us, ue = _phases.merge_intervals(bwd_start[bsel], bwd_end[bsel])
        blo = np.searchsorted(brk_thread, t, side="left")
        bhi = np.searchsorted(brk_thread, t, side="right")
        passes = backward_clusters(us, ue, brk_start[blo:bhi])
        inf_s, inf_e, inf_p = infer_regions(s, e, m_s, m_e, m_p, true_s, true_e, passes)
        inf = np.asarray(inf_s, np.int64)
        all_s = np.concatenate([m_s, inf])
        all_e = np.concatenate([m_e, np.asarray(inf_e, np.int64)])
        all_p = np.concatenate([m_p, np.asarray(inf_p, np.int64)])
        all_ts = np.concatenate([true_s, inf])  # innermost = latest true start, then shortest
        all_te = np.concatenate([true_e, np.asarray(inf_e, np.int64)])
        bounds = np.unique(np.concatenate([[s, e], all_s, all_e]))
        bounds = bounds[(bounds >= s) & (bounds <= e)]
        left, right = bounds[:-1], bounds[1:]
        phase = np.full(left.size, _P_OTHER, np.int64)
        if all_s.size and left.size:
            cover = (all_s[None, :] <= left[:, None]) & (all_e[None, :] > left[:, None])
            rank = np.lexsort((-(all_te - all_ts), all_ts))
            score = np.empty(rank.size, np.int64)
            score[rank] = np.arange(rank.size)
            scored = np.where(cover, score[None, :], -1)
            best = scored.argmax(axis=1)
            got = scored.max(axis=1) >= 0
            phase = np.where(got, all_p[best], _P_OTHER)
        phases[i] = np.bincount(phase, weights=right - left, minlength=len(_phases.PHASES)).astype(
            np.int64
        )
        stages.append(stage)
        seg_key.append(np.full(left.size, pk, np.int64))
        seg_s.append(left)
        seg_e.append(right)
        seg_p.append(phase)
        seg_step.append(np.full(left.size, i, np.int64))

    out = StepTable(
        label=labels,
        number=numbers,
        src=st_src,
        thread=st_thread,
        start=st_start,
        end=st_end,
        stage=stages,
        phases=phases,
        gpu=None,
        gpu_phases=None,
        runtime_ns=np.zeros(n, np.int64),
        seg_key=np.concatenate(seg_key),
        seg_start=np.concatenate(seg_s),
        seg_end=np.concatenate(seg_e),
        seg_phase=np.concatenate(seg_p),
        seg_step=np.concatenate(seg_step),
        ignored=ignored,
    )
    _device_view(table, out, pkey_of_thread)
    return out


def _device_view(table: EventTable, steps: StepTable, pkey_of_thread: np.ndarray) -> None:
    """Fill ``gpu`` (device busy/idle per step), ``gpu_phases`` (device time per host phase, by
    the phase of the runtime call that launched each kernel or copy) and ``runtime_ns``."""
    n = len(steps)
    dev = np.isin(table.kind, Kind.DEVICE)
    if dev.any():
        gpu = np.zeros((n, len(_phases.GPU_PARTS)), np.int64)
        ends = table.start + table.dur
        for src in np.unique(steps.src).tolist():
            rows = np.flatnonzero(steps.src == src)
            ws, we = steps.start[rows], steps.end[rows]
            in_src = dev & (table.src == src)
            # priority kernel > memcpy > memset where streams overlap: nested unions
            busy = [
                _phases.union_in_windows(table.start[m], ends[m], ws, we)
                for m in (
                    in_src & (table.kind == Kind.KERNEL),
                    in_src & np.isin(table.kind, (Kind.KERNEL, Kind.MEMCPY)),
                    in_src,
                )
            ]
            k_only, kc, kcs = busy
            gpu[rows] = np.stack([k_only, kc - k_only, kcs - kc, (we - ws) - kcs], axis=1)
        steps.gpu = gpu
        didx = np.flatnonzero(dev)
        rt = _phases.launch_calls(table, didx)
        known = rt >= 0
        step_of, phase_of = locate(steps, table, rt[known])
        ok = step_of >= 0
        gp = np.zeros((n, len(_phases.PHASES)), np.int64)
        np.add.at(gp, (step_of[ok], phase_of[ok]), table.dur[didx[known][ok]])
        steps.gpu_phases = gp

    rt_all = np.flatnonzero(table.kind == Kind.RUNTIME)
    if rt_all.size:
        # Per process, the runtime calls by start: a step sums only the calls that can overlap
        # it (those starting less than the longest call before it), not every call of the trace
        # (steps x calls grew quadratically: minutes on a 4 GB trace).
        rt_key = pkey_of_thread[table.thread[rt_all]]
        rt_start = table.start[rt_all]
        order = np.lexsort((rt_start, rt_key))
        rt_key, rt_start = rt_key[order], rt_start[order]
        rt_end = rt_start + table.dur[rt_all[order]]
        step_key = pkey_of_thread[steps.thread]
        steps.runtime_ns[:] = 0
        for key in np.unique(rt_key).tolist():
            lo, hi = np.searchsorted(rt_key, [key, key + 1])
            s_k, e_k = rt_start[lo:hi], rt_end[lo:hi]
            longest = int((e_k - s_k).max())
            for i in np.flatnonzero(step_key == key).tolist():
                a, b = np.searchsorted(s_k, [steps.start[i] - longest, steps.end[i]])
                rs = np.maximum(s_k[a:b], steps.start[i])
                re_ = np.minimum(e_k[a:b], steps.end[i])
                steps.runtime_ns[i] = int(np.clip(re_ - rs, 0, None).sum())


def locate(
    steps: StepTable, table: EventTable, events: np.ndarray, by_source: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(step index, phase code)`` of each event by its start time; -1 where the event lies
    outside every step. Host events are matched to steps of their own process; with
    ``by_source`` (device events, whose pid is the GPU index) to steps of their source file."""
    step_of = np.full(events.size, -1, np.int64)
    phase_of = np.full(events.size, -1, np.int64)
    if len(steps) == 0 or events.size == 0 or steps.seg_start.size == 0:
        return step_of, phase_of
    if by_source:
        seg_keys = steps.seg_key >> 20
        lookup, code = np.arange(len(table.sources), dtype=np.int64), table.src
    else:
        seg_keys = steps.seg_key
        lookup, code = process_key(table), table.thread
    # one axis, process major and time minor; dense process ranks keep the product in int64.
    # Ranks come from the small per-source / per-thread lookup, not from a sort of all events.
    keys = np.unique(np.concatenate([seg_keys, lookup]))
    seg_rank = np.searchsorted(keys, seg_keys)
    rank_of = np.searchsorted(keys, lookup)
    scale = int(max(int(steps.seg_end.max()), int(table.start[events].max()))) + 1
    if keys.size * scale >= 2**62:
        raise OverflowError("trace spans too long to place events on one int64 axis")
    seg = seg_rank * scale + steps.seg_start
    order = np.argsort(seg, kind="stable")
    seg_sorted = seg[order]
    # in blocks: the temporaries of millions of events stay a few MB
    for at in range(0, events.size, _LOCATE_BLOCK):
        ev = events[at : at + _LOCATE_BLOCK]
        t = table.start[ev]
        pkey = rank_of[code[ev]]
        q = pkey * scale + t
        k = np.searchsorted(seg_sorted, q, side="right") - 1
        ok = k >= 0
        j = order[np.maximum(k, 0)]
        ok &= (seg_rank[j] == pkey) & (t < steps.seg_end[j])
        step_of[at : at + _LOCATE_BLOCK][ok] = steps.seg_step[j[ok]]
        phase_of[at : at + _LOCATE_BLOCK][ok] = steps.seg_phase[j[ok]]
    return step_of, phase_of
