"""How a step's wall time is split into phases: labelled and inferred regions.

How a step's wall time is split into phases: the labelled spans (:func:`classify_phase`: torch's,
user ``## forward ##`` markers, a registered framework's actions), the host ops that copy a batch
to the device, and the forward and backward regions inferred where a trace lacks those labels;
the interval arithmetic and the launch join the step breakdown uses. Pure numpy over an
:class:`~trainperf.analysis.trace.table.EventTable`; times are int64 ns.
"""

from __future__ import annotations

import re

import numpy as np

from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.core.actions import TRACE_PHASES, is_module_span, span_action, trace_phase

__all__ = [
    "BACKWARD_OP",
    "GPU_PARTS",
    "PHASES",
    "PHASE_CODE",
    "STEP_NAME",
    "backward_clusters",
    "classify_phase",
    "infer_regions",
    "launch_calls",
    "marker_arrays",
    "merge_intervals",
    "stage_of",
    "union_in_windows",
]

#: Phases of a step's wall time on its host thread (they partition it): the live clock's names
#: (:data:`trainperf.core.actions.TRACE_PHASES`: the clock's phases a trace can tell apart).
PHASES = TRACE_PHASES
#: Parts of a step's wall time seen from the GPU (they partition it too).
GPU_PARTS = ("kernel", "memcpy", "memset", "idle")

PHASE_CODE = {p: k for k, p in enumerate(PHASES)}
_P_DATA = PHASE_CODE["data_wait"]
_P_XFER = PHASE_CODE["transfer"]
_P_FWD = PHASE_CODE["forward"]
_P_BWD = PHASE_CODE["backward"]
_P_OPT = PHASE_CODE["optimizer"]
_P_OTHER = PHASE_CODE["unattributed"]

#: A step span's name (``ProfilerStep#N``), N in group 1.
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function: |Backward\d*$|AccumulateGrad$")
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
    return PHASE_CODE[trace_phase(action.phase)]


def stage_of(name: str) -> str | None:
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


def marker_arrays(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
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


def backward_clusters(
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


def infer_regions(
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
