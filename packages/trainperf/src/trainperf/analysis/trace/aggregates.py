"""Per-op totals, memory peaks and step-time statistics over an event table.

Aggregates over an :class:`~trainperf.analysis.trace.table.EventTable`: per-op totals (host and
device), memory peaks with their timeline, and step-time statistics.

Pure and vectorised, like :mod:`~trainperf.analysis.trace.steps`; results are the typed rows of
:mod:`~trainperf.analysis.trace.trace_analysis` (ms, µs and bytes as their names say).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from trainperf.analysis.trace.field_sums import FieldSums
from trainperf.analysis.trace.step_phases import STEP_NAME, launch_calls
from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.analysis.trace.trace_analysis import DeviceOpRow, OpRow, Outlier, StepStats

__all__ = [
    "DeviceSums",
    "OpSums",
    "device_ops",
    "device_sums",
    "host_ops",
    "host_self_ns",
    "host_sums",
    "ms",
    "step_statistics",
]


def ms(ns: float) -> float:
    """ns -> ms, rounded to the ns."""
    return round(float(ns) / 1e6, 6)


@dataclass
class OpSums(FieldSums):
    """Per-name sums of host events (name codes of the table, plus one pooled
    ``ProfilerStep*`` code at the end): calls, self and total (outermost same-name calls) ns."""

    calls: np.ndarray
    self_ns: np.ndarray
    total_ns: np.ndarray


def host_sums(table: EventTable, kinds: tuple[int, ...]) -> OpSums:
    """:class:`OpSums` of the table's counted host events of ``kinds``. ``ProfilerStep#N`` names
    are pooled as ``ProfilerStep*`` (as torch's ``key_averages`` does)."""
    sel = np.isin(table.kind, kinds) & table.members()
    step_alias = table.name_ids(lambda n: STEP_NAME.match(n) is not None)
    names = table.name[sel]
    alias_code = len(table.names)
    names = np.where(step_alias[names], alias_code, names)
    size = alias_code + 1
    calls = np.bincount(names, minlength=size)
    self_ns = np.bincount(names, weights=table.self_ns[sel], minlength=size).astype(np.int64)
    # total time: nested calls of the same name are not double counted (only the outermost)
    parent = table.parent[sel]
    par_name = np.where(parent >= 0, table.name[np.maximum(parent, 0)], -1)
    par_name = np.where((par_name >= 0) & step_alias[np.maximum(par_name, 0)], alias_code, par_name)
    outer = par_name != names
    total_ns = np.bincount(names[outer], weights=table.dur[sel][outer], minlength=size)
    return OpSums(calls, self_ns, total_ns.astype(np.int64))


def host_self_ns(table: EventTable) -> int:
    """Self time of the counted host events (every host kind): the base of ``self_pct``."""
    host = np.isin(table.kind, Kind.HOST) & table.members()
    return int(table.self_ns[host].sum())


def host_ops(
    names: list[str], sums: OpSums, total_self: int, top_k: int | None, n_steps: int
) -> list[OpRow]:
    """Rows of :class:`OpSums` (``names`` the table's): calls, self and total time, share of
    all host self time (``total_self``); sorted by self time."""
    alias_code = len(names)
    total = float(total_self) or 1.0
    order = np.argsort(-sums.self_ns, kind="stable")
    order = order[sums.calls[order] > 0]
    if top_k is not None:
        order = order[:top_k]
    return [
        OpRow(
            name="ProfilerStep*" if c == alias_code else names[c],
            calls=int(sums.calls[c]),
            self_ms=ms(sums.self_ns[c]),
            total_ms=ms(sums.total_ns[c]),
            self_pct=round(float(100.0 * sums.self_ns[c] / total), 3),
            self_ms_per_step=ms(sums.self_ns[c] / n_steps) if n_steps else None,
        )
        for c in order.tolist()
    ]


def _first_kind(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(a >= 0, a, b)


@dataclass
class DeviceSums(FieldSums):
    """Per-name sums of device events: calls, ns, the kind of each name (first seen, -1 for
    none) and launches per ``(device name, launching op name)`` code pair."""

    calls: np.ndarray
    dur: np.ndarray
    kind: np.ndarray = field(metadata={"merge": _first_kind})
    launched: Counter[tuple[int, int]]


def device_sums(table: EventTable) -> DeviceSums:
    """:class:`DeviceSums` of the table's counted kernels, memcpy and memset; the launching
    op through ``correlation``."""
    size = len(table.names)
    dev = np.flatnonzero(np.isin(table.kind, Kind.DEVICE) & table.members())
    names = table.name[dev]
    kind = np.full(size, -1, np.int64)
    codes, at = np.unique(names, return_index=True)  # the first event of each name
    kind[codes] = table.kind[dev[at]]
    launcher = _launchers(table, dev)
    ok = launcher >= 0
    pairs, counts = np.unique(
        names[ok].astype(np.int64) * (size + 1) + launcher[ok], return_counts=True
    )
    launched: Counter[tuple[int, int]] = Counter(
        {
            (int(p) // (size + 1), int(p) % (size + 1)): int(k)
            for p, k in zip(pairs.tolist(), counts.tolist(), strict=True)
        }
    )
    return DeviceSums(
        calls=np.bincount(names, minlength=size),
        dur=np.bincount(names, weights=table.dur[dev], minlength=size).astype(np.int64),
        kind=kind,
        launched=launched,
    )


def device_ops(
    names: list[str], sums: DeviceSums, top_k: int | None, n_steps: int
) -> list[DeviceOpRow]:
    """Rows of :class:`DeviceSums`: calls, total (= self) time, mean, share of device busy time,
    and the CPU op that launched them most often."""
    total = float(sums.dur.sum()) or 1.0
    order = np.argsort(-sums.dur, kind="stable")
    order = order[sums.calls[order] > 0]
    if top_k is not None:
        order = order[:top_k]
    by_name: dict[int, list[tuple[int, int]]] = {}
    for (d, launcher), k in sums.launched.items():
        by_name.setdefault(d, []).append((k, launcher))
    rows = []
    for c in order.tolist():
        # the most frequent launcher, the lowest code on a tie (as ``bincount().argmax()``)
        best = max(by_name.get(c, []), key=lambda kl: (kl[0], -kl[1]), default=None)
        rows.append(
            DeviceOpRow(
                name=names[c],
                kind=_DEVICE_KINDS[int(sums.kind[c])],
                calls=int(sums.calls[c]),
                total_ms=ms(sums.dur[c]),
                self_ms=ms(sums.dur[c]),
                mean_us=round(float(sums.dur[c]) / float(sums.calls[c]) / 1e3, 3),
                share_pct=round(float(100.0 * sums.dur[c] / total), 3),
                self_ms_per_step=ms(sums.dur[c] / n_steps) if n_steps else None,
                launched_by=names[best[1]] if best is not None else None,
            )
        )
    return rows


_DEVICE_KINDS = {Kind.KERNEL: "kernel", Kind.MEMCPY: "memcpy", Kind.MEMSET: "memset"}


def _launchers(table: EventTable, dev: np.ndarray) -> np.ndarray:
    """Name code of the CPU op that launched each device event (runtime call's parent op), -1
    where unknown. Joined on (source, correlation id)."""
    out = np.full(dev.size, -1, np.int64)
    rt = launch_calls(table, dev)
    par = np.where(rt >= 0, table.parent[np.maximum(rt, 0)], -1)
    ok = par >= 0
    out[ok] = table.name[par[ok]]
    return out


def step_statistics(wall_ns: np.ndarray, labels: list[str]) -> StepStats | None:
    """Summary of step wall times (ms) with robust outliers (|modified z| > 3.5, MAD based);
    ``None`` without steps."""
    if wall_ns.size == 0:
        return None
    w = wall_ns.astype(np.float64) / 1e6  # the steps in ms
    med = float(np.median(w))
    mad = float(np.median(np.abs(w - med)))
    outliers = []
    if mad > 0:
        z = 0.6745 * (w - med) / mad
        # a tight distribution makes tiny deviations "significant": also ask for 10 % off median
        far = np.abs(w - med) > 0.1 * med
        for i in np.flatnonzero((np.abs(z) > 3.5) & far).tolist():
            outliers.append(
                Outlier(step=labels[i], ms=round(float(w[i]), 4), robust_z=round(float(z[i]), 2))
            )
    mean = float(w.mean())
    std = float(w.std())
    return StepStats(
        count=int(w.size),
        mean_ms=round(mean, 4),
        median_ms=round(med, 4),
        std_ms=round(std, 4),
        cv=round(std / mean, 4) if mean > 0 else math.nan,
        min_ms=round(float(w.min()), 4),
        p90_ms=round(float(np.quantile(w, 0.9)), 4),
        max_ms=round(float(w.max()), 4),
        total_ms=round(float(w.sum()), 4),
        outliers=outliers,
    )
