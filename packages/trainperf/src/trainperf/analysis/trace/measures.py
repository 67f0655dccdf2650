"""The figures the trace's finding rules judge, measured over one event table.

The figures the trace's finding rules judge
(:class:`~trainperf.analysis.trace.trace_metrics.TraceMetrics`),
measured over one :class:`~trainperf.analysis.trace.table.EventTable` and its steps: data wait
share, GPU busy share, memory peak, sync points (:mod:`~trainperf.analysis.trace.syncs`), kernel and
op sizes, the optimizer's own work (host, device work it launched, time blocked), the AMP grad
scaler, layout conversion kernels and the device's properties."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from trainperf.analysis.trace.field_sums import FieldSums
from trainperf.analysis.trace.stacks import SyncCall, sync_sites
from trainperf.analysis.trace.step_phases import PHASES, classify_phase, union_in_windows
from trainperf.analysis.trace.steps import StepTable, locate
from trainperf.analysis.trace.syncs import SyncPoints
from trainperf.analysis.trace.table import EventTable, Kind, TraceSource
from trainperf.analysis.trace.trace_analysis import MemoryPeak
from trainperf.analysis.trace.trace_metrics import TraceMetrics
from trainperf.core.actions import label_prefixes
from trainperf.core.findings import threshold

__all__ = [
    "MeasureSums",
    "add_device",
    "data_share_without_steps",
    "is_conv_kernel",
    "is_conv_op",
    "is_layout_kernel",
    "measure",
    "measure_sums",
]

_P_DATA = PHASES.index("data_wait")
_P_OPT = PHASES.index("optimizer")
#: Kernels that convert between NCHW and NHWC (cuDNN inserts them around convolutions of
#: NCHW tensors: ``nchwToNhwcKernel``, ``nhwcToNchwKernel``).
_LAYOUT_KERNEL = re.compile(r"nchw_?to_?nhwc|nhwc_?to_?nchw", re.IGNORECASE)
#: The ops of torch's AMP grad scaler (``torch.amp.GradScaler``: unscale + inf check, update).
_SCALER_OPS = ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_")
#: Compute capability from which a CUDA device runs bfloat16 natively (Ampere).
_BF16_MAJOR = 8
#: Convolution ops (``aten::conv2d``, ``aten::cudnn_convolution``, ``ConvolutionBackward0``,
#: ``slow_conv2d_forward``; not ``convert``).
_CONV_OP = re.compile(r"conv(?!ert)", re.IGNORECASE)
#: cuDNN's and cuBLAS-lt's convolution kernels (``dgrad_engine``, ``wgrad_alg0_engine``,
#: ``implicit_convolve_sgemm``, ``volta_scudnn_winograd_...``, ``sm80_xmma_fprop_...``); its
#: batch-norm kernels (``cudnn::bn_...``) are not convolutions.
_CONV_KERNEL = re.compile(r"conv(?!ert)|dgrad|wgrad|fprop|winograd|scudnn", re.IGNORECASE)
_LOADER = re.compile(r"^enumerate\(DataLoader\)#(\w+)")
_OPTIMIZER = re.compile(r"^Optimizer\.step#(\w+)\.step$")


def is_layout_kernel(name: str) -> bool:
    """Whether a kernel name is an NCHW <-> NHWC layout conversion."""
    return _LAYOUT_KERNEL.search(name) is not None


def is_conv_op(name: str) -> bool:
    """Whether a CPU op name is a convolution (forward or backward)."""
    return _CONV_OP.search(name) is not None


def is_conv_kernel(name: str) -> bool:
    """Whether a device kernel name is a convolution's."""
    return _CONV_KERNEL.search(name) is not None


def data_share_without_steps(table: EventTable) -> float:
    """Without steps: union of DataLoader spans over the host span of the trace (%)."""
    is_dl = table.name_ids(
        lambda n: n.startswith("enumerate(DataLoader)#") or n.endswith("_dataloader_next")
    )
    host = np.isin(table.kind, Kind.HOST)
    m = is_dl[table.name] & host
    if not m.any():
        return 0.0
    span = int(table.end[host].max() - table.start[host].min()) or 1
    covered = union_in_windows(
        table.start[m],
        table.end[m],
        np.array([table.start[host].min()]),
        np.array([table.end[host].max()]),
    )
    return 100.0 * float(covered[0]) / span


@dataclass
class MeasureSums(FieldSums):
    """What :func:`measure` needs of the events in steps, as sums that add over the time
    windows of one file: counts, ns, and each duration's count where a median is asked for."""

    sync_calls: list[SyncCall] = field(default_factory=list)
    n_sync: int = 0
    n_sync_waited: int = 0
    sync_ns: int = 0
    sync_top: Counter[int] = field(default_factory=Counter)  # name code -> calls
    device_ns: int = 0  # kernels, copies and memsets
    layout_ns: int = 0
    layout_top: Counter[int] = field(default_factory=Counter)  # name code -> calls
    scaler_top: Counter[int] = field(default_factory=Counter)  # name code -> calls
    n_kernels: int = 0
    n_tiny_kernels: int = 0
    kernel_durs: Counter[int] = field(default_factory=Counter)
    launch_ns: int = 0
    n_ops: int = 0
    n_tiny_ops: int = 0
    tiny_op_self_ns: int = 0
    op_durs: Counter[int] = field(default_factory=Counter)
    optimizer_steps: int = 0
    optimizer_own_ops: int = 0
    optimizer_multi: int = 0
    optimizer_multi_own: int = 0
    optimizer_fused: int = 0
    optimizer_params: int = field(default=0, metadata={"merge": max})  # per step: the most
    outer_op_ns: int = 0  # outermost CPU ops (their parent is no op)
    conv_op_ns: int = 0  # of them, convolutions
    kernel_ns: int = 0
    conv_kernel_ns: int = 0


def _counts(values: np.ndarray) -> Counter[int]:
    v, k = np.unique(values, return_counts=True)
    return Counter(dict(zip(v.tolist(), k.tolist(), strict=True)))


def _median(counts: Counter[int]) -> float:
    """``np.median`` of the values counted in ``counts``."""
    values = sorted(counts)
    cum = np.cumsum([counts[v] for v in values])
    n = int(cum[-1])
    lo = values[int(np.searchsorted(cum, (n - 1) // 2, side="right"))]
    hi = values[int(np.searchsorted(cum, n // 2, side="right"))]
    return float(np.mean(np.array([lo, hi], np.float64)))


def measure_sums(
    table: EventTable, steps: StepTable, has_gpu: bool, syncs: SyncPoints
) -> MeasureSums:
    """The :class:`MeasureSums` of ``table``'s events in its ``steps`` (all events when there are
    no steps); ``has_gpu``: whether the file has device events; ``syncs``: its sync points."""
    n = len(steps)
    out = MeasureSums()

    # events inside steps (all counted ones when there are no steps)
    def in_steps(mask: np.ndarray, by_source: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if not n:
            idx = np.flatnonzero(mask & table.members())
            return idx, np.full(idx.size, -1, np.int64)
        idx = np.flatnonzero(mask)
        step_of, phase_of = locate(steps, table, idx, by_source=by_source)
        keep = step_of >= 0
        return idx[keep], phase_of[keep]

    if has_gpu:
        out.n_sync = int(syncs.idx.size)
        out.n_sync_waited = sum(c.waited for c in syncs.calls)
        out.sync_ns = int(table.dur[syncs.idx].sum())
        out.sync_calls = syncs.calls
        out.sync_top = _counts(table.name[syncs.idx])
        didx, _ = in_steps(np.isin(table.kind, Kind.DEVICE), by_source=True)
        out.device_ns = int(table.dur[didx].sum())
        layout = table.name_ids(is_layout_kernel)
        lidx = didx[layout[table.name[didx]] & (table.kind[didx] == Kind.KERNEL)]
        out.layout_ns = int(table.dur[lidx].sum())
        out.layout_top = _counts(table.name[lidx])
        kidx = didx[table.kind[didx] == Kind.KERNEL]
        kd = table.dur[kidx]
        out.n_kernels = int(kidx.size)
        out.n_tiny_kernels = int((kd < threshold("tiny_kernel_us") * 1e3).sum())
        out.kernel_durs = _counts(kd)
        out.kernel_ns = int(kd.sum())
        out.conv_kernel_ns = int(kd[table.name_ids(is_conv_kernel)[table.name[kidx]]].sum())
        is_launch = table.name_ids(
            lambda s: s in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel")
        )
        lidx, _ = in_steps(is_launch[table.name] & (table.kind == Kind.RUNTIME))
        out.launch_ns = int(table.dur[lidx].sum())

    oidx, ophase = in_steps(table.kind == Kind.CPU_OP)
    od = table.dur[oidx]
    tiny = od < threshold("tiny_op_us") * 1e3
    out.n_ops = int(oidx.size)
    out.n_tiny_ops = int(tiny.sum())
    out.tiny_op_self_ns = int(table.self_ns[oidx][tiny].sum())
    out.op_durs = _counts(od)
    par = table.parent[oidx]
    outer = (par < 0) | (table.kind[np.maximum(par, 0)] != Kind.CPU_OP)
    out.outer_op_ns = int(od[outer].sum())
    out.conv_op_ns = int(od[outer & table.name_ids(is_conv_op)[table.name[oidx]]].sum())
    scaler = table.name_ids(lambda s: s.removeprefix("aten::") in _SCALER_OPS)
    out.scaler_top = _counts(table.name[oidx[scaler[table.name[oidx]]]])
    if n and _optimizer_names(table.names):
        _optimizer_sums(table, steps, out, oidx, ophase)
    return out


def _optimizer_names(names: list[str]) -> list[str]:
    return sorted({g.group(1) for name in names if (g := _OPTIMIZER.match(name))})


def measure(
    sums: MeasureSums,
    names: list[str],
    steps: StepTable,
    has_gpu: bool,
    dl_pct: float,
    peaks: list[MemoryPeak],
) -> TraceMetrics:
    """The figures of a table (its ``names``) or of the windows of one file, from their
    :class:`MeasureSums`, ``steps``, whether the file ``has_gpu``, its data wait share
    ``dl_pct`` and memory ``peaks``; events outside the steps count only when there are no
    steps."""
    n = len(steps)
    wall_total = int(steps.wall.sum())
    m = TraceMetrics(
        has_gpu=has_gpu, n_steps=n, step_wall_ms=wall_total / 1e6, data_wait_pct=dl_pct
    )
    if n:
        m.data_wait_ms_per_step = float(steps.phases[:, _P_DATA].mean()) / 1e6
    m.loader_kinds = sorted({g.group(1) for name in names if (g := _LOADER.match(name))})
    m.optimizer_names = _optimizer_names(names)
    per = max(n, 1)

    if has_gpu and steps.gpu is not None and wall_total:
        idle = int(steps.gpu[:, -1].sum())
        m.gpu_busy_pct = 100.0 * (wall_total - idle) / wall_total
        m.gpu_idle_ms_per_step = idle / n / 1e6
    cuda_peaks = [(pct, p.device) for p in peaks if (pct := p.pct_of_capacity) is not None]
    if cuda_peaks:
        m.memory_peak_pct, m.memory_peak_device = max(cuda_peaks)

    m.amp_scaler_ops = {names[c]: int(sums.scaler_top[c]) for c in sorted(sums.scaler_top)}
    if has_gpu:
        m.sync_calls_per_step = sums.n_sync_waited / per
        m.sync_idle_calls_per_step = (sums.n_sync - sums.n_sync_waited) / per
        m.sync_ms_per_step = float(sums.sync_ns) / per / 1e6
        m.sync_sites = sync_sites(sums.sync_calls, n)
        m.sync_top = {names[c]: int(sums.sync_top[c]) for c in sorted(sums.sync_top)}
        if n and steps.blocked is not None:
            mean = steps.blocked.mean(axis=0)
            m.sync_phases_ms = {p: float(mean[k]) / 1e6 for k, p in enumerate(PHASES) if mean[k]}
        m.gpu_work_ms_per_step = float(sums.device_ns) / per / 1e6
        if sums.device_ns:
            m.layout_kernel_ms_per_step = float(sums.layout_ns) / per / 1e6
            m.layout_kernel_pct = 100.0 * sums.layout_ns / sums.device_ns
            m.layout_kernels = {names[c]: int(sums.layout_top[c]) for c in sorted(sums.layout_top)}
        if sums.n_kernels:
            m.kernels_per_step = sums.n_kernels / per
            m.tiny_kernel_pct = 100.0 * (sums.n_tiny_kernels / sums.n_kernels)
            m.median_kernel_us = _median(sums.kernel_durs) / 1e3
        m.launch_ms_per_step = float(sums.launch_ns) / per / 1e6

    if sums.n_ops:
        m.cpu_ops_per_step = sums.n_ops / per
        m.tiny_op_pct = 100.0 * (sums.n_tiny_ops / sums.n_ops)
        if wall_total:
            m.tiny_op_time_pct = 100.0 * float(sums.tiny_op_self_ns) / wall_total
        m.median_op_us = _median(sums.op_durs) / 1e3
    shares = []
    if sums.outer_op_ns:
        shares.append(100.0 * sums.conv_op_ns / sums.outer_op_ns)
    if sums.kernel_ns:
        shares.append(100.0 * sums.conv_kernel_ns / sums.kernel_ns)
    m.conv_pct = max(shares) if shares else None
    if n and m.optimizer_names:
        n_opt = sums.optimizer_steps or n
        m.optimizer_steps = n_opt
        m.optimizer_ops_per_step = sums.optimizer_own_ops / n_opt
        m.optimizer_multi_tensor_ops = sums.optimizer_multi
        m.optimizer_multi_tensor_ops_per_step = sums.optimizer_multi_own / n_opt
        m.optimizer_ms_per_step = float(steps.phases[:, _P_OPT].mean()) / 1e6
        m.optimizer_fused_ops = sums.optimizer_fused
        if has_gpu and steps.gpu_phases is not None:
            m.optimizer_gpu_ms_per_step = float(steps.gpu_phases[:, _P_OPT].mean()) / 1e6
        if has_gpu and steps.blocked is not None:
            m.optimizer_blocked_ms_per_step = float(steps.blocked[:, _P_OPT].mean()) / 1e6
        opt_ns = float(steps.phases[:, _P_OPT].sum())
        m.optimizer_pct = 100.0 * opt_ns / wall_total if wall_total else 0.0
        if sums.optimizer_params:
            m.optimizer_params = sums.optimizer_params
            m.optimizer_ops_per_param = m.optimizer_ops_per_step / m.optimizer_params
    return m


def _optimizer_sums(
    table: EventTable, steps: StepTable, out: MeasureSums, oidx: np.ndarray, ophase: np.ndarray
) -> None:
    """The optimizer's own work: outermost ops in the optimizer phase (the forward and backward
    a framework runs inside ``Optimizer.step``'s closure are their own phases), per optimizer step
    and per parameter (parameters = gradients accumulated by one backward pass)."""
    labels = ("Optimizer.", "ProfilerStep#", *label_prefixes())
    is_label = table.name_ids(lambda s: s.startswith(labels) or classify_phase(s) >= 0)
    in_opt = oidx[(ophase == _P_OPT) & ~is_label[table.name[oidx]]]
    # outermost: the parent is not itself an op (aten::add_ inside aten::lerp_ is one step)
    par = table.parent[in_opt]
    safe = np.maximum(par, 0)
    nested = (par >= 0) & (table.kind[safe] == Kind.CPU_OP) & ~is_label[table.name[safe]]
    own = in_opt[~nested]
    is_step = table.name_ids(lambda s: _OPTIMIZER.match(s) is not None)
    opt_spans = np.flatnonzero(is_step[table.name] & np.isin(table.kind, Kind.HOST))
    opt_step_of, _ = locate(steps, table, opt_spans)
    # an optimizer step annotated twice (a subclass calling super().step()) counts once
    par_o = table.parent[opt_spans]
    outer = ~((par_o >= 0) & is_step[table.name[np.maximum(par_o, 0)]])
    out.optimizer_steps = int(((opt_step_of >= 0) & outer).sum())
    out.optimizer_own_ops = int(own.size)
    multi = table.name_ids(lambda s: "_foreach_" in s or "_fused_" in s)
    out.optimizer_multi = int(multi[table.name[in_opt]].sum())
    out.optimizer_multi_own = int(multi[table.name[own]].sum())
    fused = table.name_ids(lambda s: "_fused_" in s)
    out.optimizer_fused = int(fused[table.name[in_opt]].sum())
    acc = table.name_ids(lambda s: s.endswith("AccumulateGrad") and "evaluate_function" in s)
    grads = np.flatnonzero(acc[table.name] & (table.kind == Kind.CPU_OP))
    if grads.size == 0:  # traces without the engine's wrapper op
        acc = table.name_ids(lambda s: s.endswith("AccumulateGrad"))
        grads = np.flatnonzero(acc[table.name] & (table.kind == Kind.CPU_OP))
    g_step, _ = locate(steps, table, grads)
    counts = np.bincount(g_step[g_step >= 0], minlength=len(steps))
    out.optimizer_params = int(counts.max()) if counts.size else 0


def add_device(m: TraceMetrics, sources: list[TraceSource]) -> None:
    """Set the device figures of ``m`` from the files' ``deviceProperties``: the first CUDA
    device's name and compute capability (``computeMajor.computeMinor``) and whether it runs
    bfloat16 natively (compute capability 8.0 or later)."""
    for source in sources:
        for props in source.device_properties:
            major, minor = props.get("computeMajor"), props.get("computeMinor")
            if not isinstance(major, int) or isinstance(major, bool):
                continue
            name = props.get("name")
            m.device_name = str(name) if name is not None else None
            m.device_capability = f"{major}.{minor if isinstance(minor, int) else 0}"
            m.device_bf16 = major >= _BF16_MAJOR
            return
