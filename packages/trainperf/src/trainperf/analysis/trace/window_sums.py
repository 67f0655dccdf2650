"""The sums one table or time window contributes to a trace analysis.

The sums one table (or one time window of a large file) contributes to an analysis
(:class:`WindowSums`, adding up over the windows), and the typed
:class:`~trainperf.analysis.trace.trace_analysis.TraceAnalysis`
made from them (:func:`finish`).

A table loaded whole is one window: :func:`~trainperf.analysis.trace.analyze.analyze_table` is
``finish(sums_of(table))``, so a file analysed in windows
(:mod:`~trainperf.analysis.trace.windowed`)
and the same file analysed whole go through the same arithmetic. Only a window's *counted*
events (:meth:`~trainperf.analysis.trace.table.EventTable.members`) enter its sums; figures placed
in steps count the events of the window's steps.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainperf.analysis.trace.aggregates import (
    DeviceSums,
    OpSums,
    device_ops,
    device_sums,
    host_ops,
    host_self_ns,
    host_sums,
    ms,
)
from trainperf.analysis.trace.comms import (
    CommTable,
    add_metrics,
    communication,
    concat_comm,
    summarise,
)
from trainperf.analysis.trace.integrity import IntegritySums, check_integrity, integrity_sums
from trainperf.analysis.trace.measures import (
    MeasureSums,
    add_device,
    data_share_without_steps,
    measure,
    measure_sums,
)
from trainperf.analysis.trace.memory_timeline import MemoryPeaks
from trainperf.analysis.trace.step_phases import PHASES
from trainperf.analysis.trace.steps import StepTable, concat_steps, locate
from trainperf.analysis.trace.steps_view import per_rank, phase_summaries, step_rows
from trainperf.analysis.trace.syncs import sync_points
from trainperf.analysis.trace.table import EventTable, Kind, TraceSource
from trainperf.analysis.trace.trace_analysis import DeviceInfo, SourceInfo, Summary, TraceAnalysis
from trainperf.analysis.trace.trace_rules import TraceRule, evaluate
from trainperf.core.actions import CALLBACK, DATAMODULE, MODULE, Action, span_action
from trainperf.core.findings import post_hoc_thresholds

__all__ = ["HookTimes", "WindowSums", "finish", "merge", "sums_of"]

#: Time per callback and per module hook in the steps: ``stage -> group -> owner -> ms per step``.
HookTimes = dict[str, dict[str, dict[str, float]]]

_P_DATA = PHASES.index("data_wait")
_GROUP_OF_KIND = {CALLBACK: "callbacks", MODULE: "module_hooks", DATAMODULE: "module_hooks"}


@dataclass
class WindowSums:
    """One window's (or a whole table's) part of an analysis.

    Args:
        steps, comm: its steps and their communication (rows aligned).
        events: counted events; ``start``, ``end``: their earliest start and latest end (ns).
        has_gpu: whether it counts device events.
        cpu, annotations: sums of host ops and user annotations; ``host_self``: self ns of all
            counted host events.
        device: sums of device events.
        measured: what the metrics need; ``integrity``: what the checks need.
        hook_ns: ns of Lightning's hook and callback spans in steps per (stage, group, owner).
        no_steps_data_pct: the data share of a table without steps.
    """

    steps: StepTable
    comm: CommTable
    events: int
    start: int
    end: int
    has_gpu: bool
    cpu: OpSums
    annotations: OpSums
    host_self: int
    device: DeviceSums
    measured: MeasureSums
    integrity: IntegritySums
    hook_ns: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    no_steps_data_pct: float = 0.0


def sums_of(
    table: EventTable,
    steps: StepTable,
    has_gpu: bool,
    limits: Mapping[int, int],
    cut: bool = True,
    step_offset: int = 0,
) -> WindowSums:
    """The :class:`WindowSums` of ``table`` with its ``steps``; ``has_gpu``: whether the file
    has device events; ``limits``: implausible durations per source; ``cut``: look for steps cut
    by the window's edge (the table holds the file's last steps, indexed from
    ``step_offset``). Sets ``steps.blocked``: the host time blocked in the steps' sync points,
    by phase."""
    member = table.members()
    counted = np.flatnonzero(member)
    syncs = sync_points(table, steps)
    steps.blocked = syncs.blocked
    return WindowSums(
        steps=steps,
        comm=communication(table, steps),
        events=int(counted.size),
        start=int(table.start[counted].min()) if counted.size else 0,
        end=int((table.start[counted] + table.dur[counted]).max()) if counted.size else 0,
        has_gpu=bool((np.isin(table.kind, Kind.DEVICE) & member).any()),
        cpu=host_sums(table, (Kind.CPU_OP,)),
        annotations=host_sums(table, (Kind.USER_ANNOTATION,)),
        host_self=host_self_ns(table),
        device=device_sums(table),
        measured=measure_sums(table, steps, has_gpu, syncs),
        integrity=integrity_sums(table, steps, limits, cut=cut, step_offset=step_offset),
        hook_ns=_hook_ns(table, steps),
        no_steps_data_pct=0.0 if len(steps) else data_share_without_steps(table),
    )


def merge(parts: list[WindowSums]) -> WindowSums:
    """The sums of consecutive time windows of one file, in time order."""
    if len(parts) == 1:
        return parts[0]

    def added(name: str) -> Any:
        return functools.reduce(operator.add, (getattr(p, name) for p in parts))

    return WindowSums(
        steps=concat_steps([p.steps for p in parts]),
        comm=concat_comm([p.comm for p in parts]),
        events=added("events"),
        start=min(p.start for p in parts if p.events),
        end=max(p.end for p in parts if p.events),
        has_gpu=any(p.has_gpu for p in parts),
        cpu=added("cpu"),
        annotations=added("annotations"),
        host_self=added("host_self"),
        device=added("device"),
        measured=added("measured"),
        integrity=added("integrity"),
        hook_ns=added("hook_ns"),
    )


def finish(
    part: WindowSums,
    sources: list[TraceSource],
    names: list[str],
    origin_ns: int,
    memory: MemoryPeaks,
    warnings: list[str],
    top_k: int | None = 20,
    rules: Sequence[TraceRule] | None = None,
) -> TraceAnalysis:
    """The analysis of a table or file from its window sums, its ``sources`` and (interned)
    ``names``, the gathered ``memory`` peaks and the loader's ``warnings``; its findings are
    those of ``rules`` (default: ``TRACE_RULES.default()``)."""
    steps = part.steps
    n_steps = len(steps)
    wall = steps.wall
    wall_total = int(wall.sum())
    if n_steps:
        dl_pct = 100.0 * float(steps.phases[:, _P_DATA].sum()) / wall_total if wall_total else 0.0
    else:
        dl_pct = part.no_steps_data_pct
    peaks, timeline = memory.finish(sources, steps.label)
    metrics = measure(part.measured, names, steps, part.has_gpu, dl_pct, peaks)
    add_device(metrics, sources)
    add_metrics(metrics, part.comm, steps)
    phase_summary, step_stats, outliers = phase_summaries(steps)
    return TraceAnalysis(
        sources=[_source(s) for s in sources],
        summary=Summary(
            events=part.events,
            span_ms=ms(part.end - part.start),
            has_gpu=part.has_gpu,
            devices=sorted(
                {n for s in sources for d in s.device_properties if (n := d.get("name"))}
            ),
            ranks=sorted({s.rank for s in sources if s.rank is not None}),
            n_steps=n_steps,
            stages=list(phase_summary),
            origin_ns=origin_ns,
        ),
        top_cpu_ops=host_ops(names, part.cpu, part.host_self, top_k, n_steps),
        top_annotations=host_ops(names, part.annotations, part.host_self, top_k, n_steps),
        top_cuda_ops=device_ops(names, part.device, top_k, n_steps),
        memory_peaks=peaks,
        memory_timeline=timeline,
        dataloader_time_pct=round(float(dl_pct), 3),
        steps=step_rows(steps, sources, outliers),
        phase_summary=phase_summary,
        step_stats=step_stats,
        per_rank=per_rank(steps, sources),
        metrics=metrics,
        findings=evaluate(metrics, rules),
        thresholds=post_hoc_thresholds(),
        warnings=[*warnings, *steps.warnings()],
        integrity=check_integrity(part.integrity, steps, sources),
        communication=summarise(part.comm, steps, [s.rank for s in sources]),
    )


def hook_times(part: WindowSums) -> HookTimes:
    """Time per callback and per module hook in the steps (ms per step of the stage), from
    a framework's action spans (callbacks, module and data-module hooks; see
    :func:`trainperf.core.actions.span_action`), as the live clock names them."""
    counts = Counter(part.steps.stage)
    out: HookTimes = {}
    for (stage, group, owner), ns in part.hook_ns.items():
        per = out.setdefault(stage, {}).setdefault(group, {})
        per[owner] = ns / 1e6 / counts[stage]
    return out


def _is_hook(action: Action | None) -> bool:
    return action is not None and action.kind in (CALLBACK, MODULE, DATAMODULE)


def _hook_ns(table: EventTable, steps: StepTable) -> Counter[tuple[str, str, str]]:
    is_action = table.name_ids(lambda n: _is_hook(span_action(n)))
    idx = np.flatnonzero(is_action[table.name] & np.isin(table.kind, Kind.HOST) & (table.dur > 0))
    step_of, _ = locate(steps, table, idx)
    out: Counter[tuple[str, str, str]] = Counter()
    for i, st in zip(idx.tolist(), step_of.tolist(), strict=True):
        if st < 0:
            continue
        action = span_action(table.names[int(table.name[i])])
        group = _GROUP_OF_KIND.get(action.kind) if action is not None else None
        if action is None or group is None or not action.owner:
            continue
        out[(steps.stage[st], group, action.owner)] += int(table.dur[i])
    return out


def _source(s: TraceSource) -> SourceInfo:
    def number(v: object) -> int | None:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    return SourceInfo(
        path=str(s.path),
        rank=s.rank,
        rank_from=s.rank_from,
        world_size=s.world_size,
        schema=s.schema,
        framework=s.framework,
        devices=[
            DeviceInfo(
                id=number(d.get("id")),
                name=str(d["name"]) if d.get("name") is not None else None,
                total_mem=number(d.get("totalGlobalMem")),
            )
            for d in s.device_properties
        ],
        n_events=s.n_events,
        parse_s=round(s.parse_s, 4),
    )
