"""Steps of a trace and the split of each one's wall time into phases.

:func:`compute_steps` finds the ``ProfilerStep#N`` spans of an
:class:`~trainperf.analysis.trace.table.EventTable` and splits each one's wall time into the live
clock's phases (:data:`PHASES`, see :mod:`trainperf.core.actions`) and, with device events, into
:data:`GPU_PARTS`; :func:`locate` places any event in its step and phase. Pure and vectorised:
nothing here reads files or prints. Times are int64 ns.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.core.actions import TRACE_PHASES, is_module_span, span_action, trace_phase

__all__ = [
    "GPU_PARTS",
    "PHASES",
    "STEP_NAME",
    "StepTable",
    "classify_phase",
    "compute_steps",
    "concat_steps",
    "launch_calls",
    "locate",
    "merge_intervals",
    "process_key",
    "union_in_windows",
]

#: Phases of a step's wall time on its host thread (they partition it): the live clock's names
#: (:data:`trainperf.core.actions.TRACE_PHASES`: the clock's phases a trace can tell apart).
PHASES = TRACE_PHASES
#: Parts of a step's wall time seen from the GPU (they partition it too).
GPU_PARTS = ("kernel", "memcpy", "memset", "idle")

_CODE = {p: k for k, p in enumerate(PHASES)}
_P_DATA = _CODE["data_wait"]
_P_XFER = _CODE["transfer"]
_P_FWD = _CODE["forward"]
_P_BWD = _CODE["backward"]
_P_OPT = _CODE["optimizer"]
_P_OTHER = _CODE["unattributed"]

#: A step span's name (``ProfilerStep#N``), N in group 1.
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function: |Backward\d*$|AccumulateGrad$")
_HASH_MARKER = re.compile(r"^#+\s*(forward|backward|optimizer|data\w*)\s*#+$", re.IGNORECASE)


def classify_phase(name: str) -> int:
    """Phase code (index into :data:`PHASES`) of a labelled span, or ``-1`` for a span that is
    not a label (an op, a loop container).

    Covers torch's own annotations (``enumerate(DataLoader)#...``, ``Optimizer.step#...``),
    ``## forward ##``-style user annotations, and the spans of a registered framework's grammar
    (:mod:`trainperf.core.actions`): its module spans (forward) and its actions, classified by
    :func:`trainperf.core.actions.span_action` with the classifier the live phase clock uses.
    Transparent actions are not labels: their time stays with the enclosing label.
    """
    if name.startswith("enumerate(DataLoader)#"):
        return _P_DATA
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return _P_OPT
    m = _HASH_MARKER.match(name)
    if m:
        word = m.group(1).lower()
        if word.startswith("data"):
            return _P_DATA
        return {"forward": _P_FWD, "backward": _P_BWD, "optimizer": _P_OPT}[word]
    if is_module_span(name):
        return _P_FWD
    action = span_action(name)
    if action is None or not action.phase:
        return -1
    return _CODE[trace_phase(action.phase)]


def _stage_of(name: str) -> str | None:
    for stage, short in (("validation", "val"), ("test", "test"), ("predict", "predict")):
        if name.endswith((f".{stage}_step", f"].{short}_next")):
            return stage
    return None


def union_in_windows(
    starts: np.ndarray, ends: np.ndarray, win_start: np.ndarray, win_end: np.ndarray
) -> np.ndarray:
    """Length of the union of intervals ``[starts, ends)`` inside each window (int64 ns each)."""
    out = np.zeros(win_start.shape[0], np.int64)
    if starts.size == 0 or win_start.size == 0:
        return out
    ms, me = merge_intervals(starts, ends)
    before = np.concatenate(([0], np.cumsum(me - ms)))

    def covered(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(ms, t, side="right") - 1
        kk = np.maximum(k, 0)
        inside = np.minimum(np.clip(t - ms[kk], 0, None), me[kk] - ms[kk])
        return np.where(k >= 0, before[kk] + inside, 0)

    return covered(win_end) - covered(win_start)


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
    is_step_name = table.name_ids(lambda n: STEP_NAME.match(n) is not None)
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


def _marker_arrays(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """Labelled spans (see :func:`classify_phase`) and the host ops that copy a batch to the
    device (transfer), sorted by (thread, start); and each name code's phase (-1: no label)."""
    phase_of_name = np.fromiter(
        (classify_phase(n) for n in table.names), np.int64, len(table.names)
    )
    host = np.isin(table.kind, (Kind.CPU_OP, Kind.USER_ANNOTATION))
    mk = np.flatnonzero((phase_of_name[table.name] >= 0) & host & (table.dur > 0))
    mk = np.union1d(mk, _transfer_ops(table, phase_of_name))
    order = np.lexsort((table.start[mk], table.thread[mk]))
    return mk[order], phase_of_name


def _transfer_ops(table: EventTable, phase_of_name: np.ndarray) -> np.ndarray:
    """Outermost host ops (``aten::to``, ``aten::copy_``...) whose subtree launched a
    host-to-device copy: found through the copy's runtime call (joined on correlation id) and
    its chain of parent ops, stopping below labels and step spans."""
    dev = np.flatnonzero(table.kind == Kind.MEMCPY)
    if dev.size == 0:
        return np.zeros(0, np.int64)
    htod = table.name_ids(lambda n: "HtoD" in n)
    dev = dev[htod[table.name[dev]]]
    rt = launch_calls(table, dev)
    op = table.parent[rt[rt >= 0]]
    op = op[op >= 0]
    is_step = table.name_ids(lambda n: STEP_NAME.match(n) is not None)

    def plain_op(idx: np.ndarray) -> np.ndarray:
        ok = idx >= 0
        safe = np.maximum(idx, 0)
        names = table.name[safe]
        return ok & (table.kind[safe] == Kind.CPU_OP) & (phase_of_name[names] < 0) & ~is_step[names]

    op = op[plain_op(op)]
    for _ in range(64):  # op stacks are shallow; the bound only guards malformed parents
        up = table.parent[op]
        climb = plain_op(up)
        if not climb.any():
            break
        op = np.where(climb, up, op)
    return np.unique(op)


def launch_calls(table: EventTable, dev: np.ndarray) -> np.ndarray:
    """Index of the runtime call (``cudaLaunchKernel``, ``cudaMemcpyAsync``...) that launched
    each device event, joined on (source, correlation id); -1 where unknown."""
    out = np.full(dev.size, -1, np.int64)
    rt = np.flatnonzero((table.kind == Kind.RUNTIME) & (table.correlation >= 0))
    if rt.size == 0 or dev.size == 0:
        return out
    scale = int(max(table.correlation.max(), 0)) + 1
    rkey = table.src[rt].astype(np.int64) * scale + table.correlation[rt]
    order = np.argsort(rkey, kind="stable")
    rkey = rkey[order]
    dkey = table.src[dev].astype(np.int64) * scale + table.correlation[dev]
    k = np.clip(np.searchsorted(rkey, dkey), 0, rkey.size - 1)
    hit = (rkey[k] == dkey) & (table.correlation[dev] >= 0)
    out[hit] = rt[order][k[hit]]
    return out


def _backward_clusters(
    us: np.ndarray, ue: np.ndarray, breakers: np.ndarray
) -> list[tuple[int, int]]:
    """Merge the (sorted, disjoint) intervals of backward ops into backward passes: two
    neighbours belong to one pass unless a non-backward op starts between them (the next
    forward, an optimizer step). ``breakers`` are those ops' start times, sorted."""
    if us.size == 0:
        return []
    gap_has_op = np.searchsorted(breakers, us[1:], "left") > np.searchsorted(
        breakers, ue[:-1], "left"
    )
    firsts = np.concatenate(([0], np.flatnonzero(gap_has_op) + 1))
    lasts = np.concatenate((firsts[1:] - 1, [us.size - 1]))
    return [(int(us[a]), int(ue[b])) for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True)]


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted disjoint ``(starts, ends)``."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > run_end[:-1]
    group = np.cumsum(new) - 1
    me = np.zeros(int(group[-1]) + 1, np.int64)
    np.maximum.at(me, group, e)
    return s[new], me


def _infer_regions(
    s: int,
    e: int,
    m_s: np.ndarray,
    m_e: np.ndarray,
    m_p: np.ndarray,
    true_s: np.ndarray,
    true_e: np.ndarray,
    passes: list[tuple[int, int]],
) -> tuple[list[int], list[int], list[int]]:
    """Backward and forward regions of a step whose trace lacks those labels.

    Backward: each backward pass (autograd engine ops of the process: the main thread on CPU,
    ``pt_autograd_*`` on GPU), unless a backward label exists. Forward: before each pass, from
    the latest of the previous pass, the end of the batch's data loading or transfer, and the
    start of the innermost label around the pass' start (``Optimizer.step`` when Lightning runs
    the forward inside the optimizer's closure), unless a forward label exists. A step with no
    backward (an evaluation loop) gets forward from the end of its data loading to the next
    optimizer label or the step end, when it has data loading at all.
    """
    out_s: list[int] = []
    out_e: list[int] = []
    out_p: list[int] = []
    has_bwd = bool((m_p == _P_BWD).any())
    has_fwd = bool((m_p == _P_FWD).any())
    clipped = [(max(a, s), min(b, e)) for a, b in passes if min(b, e) > max(a, s)]
    if not has_bwd:
        for a, b in clipped:
            out_s.append(a)
            out_e.append(b)
            out_p.append(_P_BWD)
    if has_fwd:
        return out_s, out_e, out_p
    if clipped and not has_bwd:
        prev_end = s
        for a, b in clipped:
            ready = m_e[((m_p == _P_DATA) | (m_p == _P_XFER)) & (m_e <= a)]
            f_from = max(prev_end, int(ready.max(initial=s)))
            around = (true_s <= a) & (true_e > a)
            if around.any():
                f_from = max(f_from, int(true_s[around].max()))
            if a > f_from:
                out_s.append(f_from)
                out_e.append(a)
                out_p.append(_P_FWD)
            prev_end = b
        return out_s, out_e, out_p
    b_start = int(m_s[m_p == _P_BWD].min()) if has_bwd else None
    data_end = m_e[m_p == _P_DATA]
    limit = b_start if b_start is not None else e
    f_from = int(data_end[data_end <= limit].max(initial=s))
    opt_s = m_s[(m_p == _P_OPT) & (m_s >= f_from)]
    f_to = b_start if b_start is not None else int(opt_s.min(initial=e))
    if (b_start is not None or data_end.size) and f_to > f_from:
        out_s.append(f_from)
        out_e.append(f_to)
        out_p.append(_P_FWD)
    return out_s, out_e, out_p


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
                p.blocked if p.blocked is not None else np.zeros((len(p), len(PHASES)), np.int64)
                for p in parts
            ]
        )
    gpu = gpu_phases = None
    if any(p.gpu is not None for p in parts):
        gpu = np.concatenate(
            [
                p.gpu
                if p.gpu is not None
                else np.column_stack([np.zeros((len(p), len(GPU_PARTS) - 1), np.int64), p.wall])
                for p in parts
            ]
        )
        gpu_phases = np.concatenate(
            [
                p.gpu_phases
                if p.gpu_phases is not None
                else np.zeros((len(p), len(PHASES)), np.int64)
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
    no_phases = np.zeros((0, len(PHASES)), np.int64)
    return StepTable([], e, e, e, e, e, [], no_phases, None, None, e, e, e, e, e, e)


def compute_steps(table: EventTable) -> StepTable:
    """Find the steps and split each one's wall time into :data:`PHASES` (host view) and, when the
    process has device events, :data:`GPU_PARTS` (device view) and device time per phase.

    Inside a step the innermost labelled span decides at every instant (latest start, then
    shortest): the step function and its ops are forward, the autograd engine's ops backward,
    ``Optimizer.step`` / ``zero_grad`` minus the forward and backward nested in them (Lightning's
    closure) optimizer, the DataLoader's ``__next__`` data loading, host-to-device copies
    transfer, Lightning's hooks module_hooks, callbacks and checkpoint (as the live clock splits
    them); time no label claims is unattributed. Labels
    missing from the trace are inferred (see :func:`_infer_regions`).
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
            int(STEP_NAME.match(table.names[table.name[i]]).group(1))  # type: ignore[union-attr]
            for i in steps
        ),
        np.int64,
        n,
    )
    labels = _labels(st_src, numbers)

    mk, phase_of_name = _marker_arrays(table)
    is_transfer_op = phase_of_name[table.name[mk]] < 0
    mk_thread = table.thread[mk]
    mk_start = table.start[mk]
    mk_end = mk_start + table.dur[mk]
    mk_phase = np.where(is_transfer_op, _P_XFER, phase_of_name[np.maximum(table.name[mk], 0)])
    max_mk = int((mk_end - mk_start).max()) if mk.size else 0

    is_bwd_name = table.name_ids(lambda x: _BACKWARD_OP.search(x) is not None)
    bwd = np.flatnonzero(is_bwd_name[table.name] & (table.kind == Kind.CPU_OP) & (table.dur > 0))
    bwd_pkey = pkey_of_thread[table.thread[bwd]]
    bwd_start = table.start[bwd]
    bwd_end = bwd_start + table.dur[bwd]
    # ops that separate two backward passes: any other op of the step's thread
    is_step_name = table.name_ids(lambda x: STEP_NAME.match(x) is not None)
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
        code: stg for code, nm in enumerate(table.names) if (stg := _stage_of(nm)) is not None
    }

    phases = np.zeros((n, len(PHASES)), np.int64)
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
        us, ue = merge_intervals(bwd_start[bsel], bwd_end[bsel])
        blo = np.searchsorted(brk_thread, t, side="left")
        bhi = np.searchsorted(brk_thread, t, side="right")
        passes = _backward_clusters(us, ue, brk_start[blo:bhi])
        inf_s, inf_e, inf_p = _infer_regions(s, e, m_s, m_e, m_p, true_s, true_e, passes)
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
        phases[i] = np.bincount(phase, weights=right - left, minlength=len(PHASES)).astype(np.int64)
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
        gpu = np.zeros((n, len(GPU_PARTS)), np.int64)
        ends = table.start + table.dur
        for src in np.unique(steps.src).tolist():
            rows = np.flatnonzero(steps.src == src)
            ws, we = steps.start[rows], steps.end[rows]
            in_src = dev & (table.src == src)
            # priority kernel > memcpy > memset where streams overlap: nested unions
            busy = [
                union_in_windows(table.start[m], ends[m], ws, we)
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
        rt = launch_calls(table, didx)
        known = rt >= 0
        step_of, phase_of = locate(steps, table, rt[known])
        ok = step_of >= 0
        gp = np.zeros((n, len(PHASES)), np.int64)
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
