"""Plots of the report as inline SVG strings (matplotlib, no pyplot state, no network).

Output is deterministic: a fixed ``svg.hashsalt`` (element ids), no ``Date`` metadata and glyphs
as paths, so the same run gives byte-identical SVG on any machine with the same matplotlib.
"""

from __future__ import annotations

import io
import math
from functools import partial
from typing import Any

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from matplotlib.typing import RcKeyType

from trainperf.analysis.run import RunData
from trainperf.analysis.stages import batch_times, num, training_rates
from trainperf.core.clock import PHASES
from trainperf.core.stage import STAGE_ORDER, Stage
from trainperf.records.epochs import EpochRecord

PHASE_COLORS = {
    "data_wait": "#d62728",
    "transfer": "#ff9896",
    "forward": "#1f77b4",
    "backward": "#2ca02c",
    "optimizer": "#9467bd",
    "sync_wait": "#bcbd22",
    "postprocess": "#ff7f0e",
    "metric": "#e377c2",
    "module_hooks": "#17becf",
    "callbacks": "#8c564b",
    "checkpoint": "#c49c94",
    "unattributed": "#7f7f7f",
}
_STAGE_COLORS = {"train": "#1f77b4", "val": "#ff7f0e", "test": "#2ca02c"}
_RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "trainperf-report",
    "svg.fonttype": "path",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_SEVERITY_COLORS = {"critical": "#d62728", "warning": "#ff7f0e"}
_style = partial(mpl.rc_context, _RC)


def svg(fig: Figure | None) -> str | None:
    """``fig`` as an inline ``<svg>`` element (``None`` for no figure)."""
    if fig is None:
        return None
    buf = io.StringIO()
    with _style():  # the SVG settings (hash salt, glyphs as paths) apply when saving
        fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    # inline <svg> in HTML: drop the XML prolog and DOCTYPE
    return text[text.index("<svg") :]


def _by_stage(run: RunData) -> dict[Stage, list[EpochRecord]]:
    """The run's epoch records of each stage that has some, in stage order."""
    return {s: r for s in STAGE_ORDER if (r := [e for e in run.epochs if e.stage == s])}


def phase_plot(run: RunData) -> str | None:
    """Stacked bars of seconds per phase for every epoch, one panel per stage."""
    stages = _by_stage(run)
    if not stages:
        return None
    with _style():
        fig = Figure(figsize=(3.6 * len(stages) + 1.6, 3.2))
        axes = fig.subplots(1, len(stages), squeeze=False)[0]
        for ax, (stage, records) in zip(axes, stages.items(), strict=True):
            x = list(range(len(records)))
            bottom = [0.0] * len(records)
            for phase in PHASES:
                values = [r.phases_s.get(phase, 0.0) for r in records]
                ax.bar(x, values, bottom=bottom, color=PHASE_COLORS[phase], label=phase, width=0.7)
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
            ticks = [str(i if r.epoch is None else r.epoch) for i, r in enumerate(records)]
            every = thinned_ticks(len(x))
            ax.set_xticks(x[::every], ticks[::every])
            ax.set_xlabel("epoch")
            ax.set_title(stage.label)
        axes[0].set_ylabel("seconds")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
        fig.tight_layout()
        return svg(fig)


#: Tick labels on one categorical axis at most (24 epochs' labels ran together).
MAX_TICKS = 8

#: The batch-time histogram's axis ends at Tukey's far fence, the third quartile plus this many
#: interquartile ranges; slower batches share one overflow bar at its right (one 1.6 s batch
#: among 70 ms ones put every other bar at the left edge).
FENCE_IQR = 3.0


def thinned_ticks(n: int, most: int = MAX_TICKS) -> int:
    """Label every how-many-th of ``n`` ticks so that at most ``most`` are labelled."""
    return max(1, math.ceil(n / most))


def clip_edge(ms: list[float]) -> float | None:
    """Where the histogram's axis ends: the slowest of ``ms`` (sorted) within the far fence
    (:data:`FENCE_IQR`), or ``None`` when none lies beyond it (or there are too few batches to
    call any an outlier)."""
    if len(ms) < 20:
        return None
    q1, q3 = ms[len(ms) // 4], ms[(3 * len(ms)) // 4]
    fence = q3 + FENCE_IQR * max(q3 - q1, 1e-9)
    inside = [t for t in ms if t <= fence]
    return inside[-1] if len(inside) < len(ms) and inside[-1] > ms[0] else None


def batch_times_plot(run: RunData) -> str | None:
    """Histogram of batch times (ms) per stage with median and p95 marked; outliers beyond the
    far fence (:func:`clip_edge`) counted in one overflow bar at the right, so the body of the
    distribution keeps the axis."""
    stages = {s: times for s, r in _by_stage(run).items() if (times := batch_times(r))}
    if not stages:
        return None
    with _style():
        fig = Figure(figsize=(3.6 * len(stages), 2.8))
        axes = fig.subplots(1, len(stages), squeeze=False)[0]
        for ax, (stage, times) in zip(axes, stages.items(), strict=True):
            ms = sorted(1000.0 * t for _, _, t in times)
            bins = min(40, max(5, len(ms) // 3))
            edge = clip_edge(ms)
            body = ms if edge is None else [t for t in ms if t <= edge]
            _, edges, _ = ax.hist(body, bins=bins, color=_STAGE_COLORS[stage])
            if edge is not None:
                over = len(ms) - len(body)
                width = float(edges[1] - edges[0])
                ax.bar(
                    edge + 1.5 * width,
                    over,
                    width=width,
                    color="#7f7f7f",
                    label=f"> {edge:.0f} ms: {over} (max {ms[-1]:,.0f})",
                )
            median = ms[len(ms) // 2]
            p95 = ms[min(len(ms) - 1, math.ceil(0.95 * len(ms)) - 1)]
            ax.axvline(median, color="black", linewidth=1, label=f"median {median:.0f} ms")
            ax.axvline(p95, color="black", linestyle="--", linewidth=1, label=f"p95 {p95:.0f} ms")
            ax.set_title(f"{stage.label} ({len(ms)} batches)")
            ax.set_xlabel("batch time (ms)")
            ax.legend(frameon=False, fontsize=7)
        axes[0].set_ylabel("batches")
        fig.tight_layout()
        return svg(fig)


def _integer_x(ax: Axes) -> None:
    """Ticks on whole epochs / steps only: "epoch 0.5" does not exist (matplotlib's default
    locator puts fractional ticks on a short integer axis)."""
    # min_n_ticks=1: with the default 2, a single epoch's axis (one whole number in view)
    # falls back to fractional ticks
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    lo, hi = ax.get_xlim()
    if hi - lo < 1.0:  # one point: half an epoch / step either side, not a sliver
        middle = round((lo + hi) / 2.0)
        ax.set_xlim(middle - 0.5, middle + 0.5)


def throughput_figure(run: RunData) -> Figure | None:
    """Samples per second per epoch and stage; with interval records, the training rate against
    the global step as a second panel. Both x axes tick on whole numbers."""
    stages = _by_stage(run)
    rates = training_rates(run.intervals)
    if not stages and not rates:
        return None
    with _style():
        panels = int(bool(stages)) + int(bool(rates))
        fig = Figure(figsize=(4.6 * panels, 2.8))
        axes = list(fig.subplots(1, panels, squeeze=False)[0])
        if stages:
            ax = axes.pop(0)
            for stage, records in stages.items():
                xs = [num(r.epoch, i) for i, r in enumerate(records)]
                ys = [num(r.samples_per_sec, math.nan) for r in records]
                ax.plot(xs, ys, marker="o", color=_STAGE_COLORS[stage], label=stage.label)
            ax.set_xlabel("epoch")
            ax.set_ylabel("samples / s")
            ax.set_title("throughput per epoch")
            ax.legend(frameon=False, fontsize=7)
            _integer_x(ax)
        if rates:
            ax = axes.pop(0)
            ax.plot(
                [r[0] for r in rates],
                [r[1] for r in rates],
                marker="." if len(rates) < 50 else "",
                color=_STAGE_COLORS["train"],
            )
            ax.set_xlabel("training step")
            ax.set_ylabel("samples / s")
            ax.set_title("training throughput over the run")
            _integer_x(ax)
        fig.tight_layout()
        return fig


# (panel title, unit, metric names without "resources/": "{i}" stands for each GPU index)
_RESOURCE_PANELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "CPU",
        "%",
        ("process_cpu_percent", "workers_cpu_percent", "system_cpu_percent", "iowait_percent"),
    ),
    ("memory", "GiB", ("process_rss_gb", "workers_uss_gb", "gpu{i}_memory_used_gb")),
    ("system memory", "%", ("system_memory_percent",)),
    ("GPU", "%", ("gpu{i}_util_percent",)),
    ("I/O", "MB/s", ("disk_read_mb_s", "disk_write_mb_s", "net_recv_mb_s", "net_sent_mb_s")),
)


def _expand(name: str, present: set[str]) -> list[str]:
    """The recorded ``resources/`` metrics of a panel's ``name`` (one per GPU for ``{i}``)."""
    name = f"resources/{name}"
    if "{i}" not in name:
        return [name] if name in present else []
    return [n for i in range(16) if (n := name.format(i=i)) in present]


#: Points per resource line above which :func:`thin` keeps each stretch's extremes only: a
#: day sampled every second would put 86,400 points per line into the page's SVG.
MAX_LINE_POINTS = 2000


Points = list[tuple[float, float]]


def thin(points: Points, limit: int = MAX_LINE_POINTS) -> Points:
    """``points`` as they are when at most ``limit``; otherwise, per stretch of consecutive
    points, its lowest and highest (in time order), about ``limit`` in all. A spike or a dip of
    one sample stays visible, which averaging or striding would hide."""
    if len(points) <= limit:
        return points
    buckets = max(limit // 2, 1)
    size = math.ceil(len(points) / buckets)
    out: Points = []
    for start in range(0, len(points), size):
        chunk = points[start : start + size]
        low = min(range(len(chunk)), key=lambda i: chunk[i][1])
        high = max(range(len(chunk)), key=lambda i: chunk[i][1])
        out.extend(chunk[i] for i in sorted({low, high}))
    return out


def resources_figure(run: RunData) -> Figure | None:
    """CPU / memory / GPU / I/O over the run's time, one panel each (those with data), a point
    per record of ``resources.jsonl`` (every sample the monitor wrote; beyond
    :data:`MAX_LINE_POINTS` per line, each stretch's extremes: :func:`thin`), alerts as vertical
    lines (red critical, orange warning; dotted when resolved)."""
    if not run.resources:
        return None
    present = {k for r in run.resources for k in r.metrics}
    panels = []
    for title, unit, names in _RESOURCE_PANELS:
        series = [n for name in names for n in _expand(name, present)]
        if series:
            panels.append((title, unit, series))
    if not panels:
        return None
    t0 = min(r.t for r in run.resources)
    with _style():
        fig = Figure(figsize=(8.5, 1.9 * len(panels) + 0.4))
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, (title, unit, series) in zip(axes, panels, strict=True):
            for name in series:
                pts = thin(
                    [
                        ((r.t - t0) / 60.0, v)
                        for r in run.resources
                        if (v := r.metrics.get(name)) is not None
                    ]
                )
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name.split("/", 1)[-1])
            ax.set_ylabel(unit)
            ax.set_title(title, loc="left")
            ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
            _mark_alerts(ax, run, t0, label=ax is axes[0])
        axes[-1].set_xlabel("minutes since the first sample")
        fig.tight_layout()
        return fig


def _mark_alerts(ax: Axes, run: RunData, t0: float, label: bool) -> None:
    for alert in run.alerts:
        x = (alert.t - t0) / 60.0
        fired = alert.event == "fired"
        color = _SEVERITY_COLORS.get(alert.severity, "#ff7f0e")
        ax.axvline(x, color=color, linestyle="-" if fired else ":", linewidth=1.2, alpha=0.8)
        if label and fired:
            ax.annotate(
                alert.rule,
                xy=(x, 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize=7,
                color=color,
            )


def memory_timeline_plot(timeline: dict[str, list[list[float]]] | None) -> str | None:
    """Allocated memory over the profiled window, one line per device (the trace analysis'
    ``memory_timeline``: device -> [[ms, bytes], ...])."""
    if not timeline:
        return None
    with _style():
        fig = Figure(figsize=(7.0, 2.6))
        ax = fig.subplots()
        for device in sorted(timeline):
            points = timeline[device]
            if not points:
                continue
            start = points[0][0]
            ax.plot([p[0] - start for p in points], [p[1] / 2**30 for p in points], label=device)
        ax.set_xlabel("ms since the first allocation in the trace")
        ax.set_ylabel("allocated (GiB)")
        ax.legend(frameon=False, fontsize=7)
        fig.tight_layout()
        return svg(fig)
