"""What ``trainperf baseline`` and ``trainperf check`` print.

A baseline's figures, and the gate's rows with the band and the rules that decided each status
(:func:`row_cells`, also the report's table), then its verdict as plain words."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from trainperf.analysis.gate import EPOCH_ROW, MISSING, NOT_JUDGED, Band, GateOutcome, GateRow
from trainperf.core.significance import OUTCOME_STYLE, Outcome

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from trainperf.analysis.baseline import Baseline

#: The columns of :func:`row_cells`.
COLUMNS = ("figure", "unit", "better", "baseline", "current", "change", "band", "status", "why")
#: Shown under the table: how to read the band.
BAND_NOTE = (
    "band: a change outside it moves the figure; for times and rates it is multiplicative "
    "(+t % pairs with 100 / (1 + t/100) - 100 %), widened where the baseline's own noise "
    "(3 sigmas from the IQR of its epochs) or a phase's floor (2 % of the epoch, at least "
    "10 ms) is wider; a part of the epoch's time (a phase, the batch times, DataLoader work) "
    "fails only when epoch_wall_s does"
)
_STYLES = {**OUTCOME_STYLE, Outcome.NO_CHANGE: "", MISSING: "yellow", NOT_JUDGED: ""}
_ORDER = {
    Outcome.REGRESSION: 0,
    Outcome.IMPROVEMENT: 1,
    Outcome.INCONCLUSIVE: 2,
    MISSING: 3,
    NOT_JUDGED: 4,
    Outcome.NO_CHANGE: 5,
}


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.3f}"
    return f"{value:.4g}"


def _unit_label(figure: str, unit: str) -> str:
    """The unit as shown. Our ``*_gb`` figures are GiB (2**30 bytes,
    ``trainperf.probe.device_memory.GB``);
    baselines recorded before the label said so carry "GB" for the same values."""
    return "GiB" if unit == "GB" and figure.endswith("_gb") else unit


def _decimals(change: float, band: Band) -> int:
    """Decimals that show the band's edges with two significant digits at least, and keep
    ``change`` and the edges apart where they differ, so a status never seems to contradict
    them (a change shown equal to an edge is inside the band)."""
    edge = min(abs(band.down), abs(band.up))
    start = 1 if edge >= 1 or edge == 0 else 1 - math.floor(math.log10(edge))
    for decimals in range(start, start + 6):
        if all(
            change == e or f"{change:.{decimals}f}" != f"{e:.{decimals}f}"
            for e in (band.down, band.up)
        ):
            return decimals
    return start + 6


def row_cells(row: GateRow) -> tuple[str, ...]:
    """One row as text, in :data:`COLUMNS` order: the change and the band in the units the gate
    compared them in, and every rule that decided the status."""
    band = row.band
    change = row.change
    if change is None:
        change_text = band_text = "-"
    elif math.isinf(change):
        change_text = "from 0"
        band_text = "-" if band is None else f"{band.down:+.1f} / {band.up:+.1f} {band.unit}"
    elif band is None:
        change_text, band_text = f"{change:+.1f} {row.threshold_unit}", "-"
    else:
        d = _decimals(change, band)
        change_text = f"{change:+.{d}f} {band.unit}"
        if band.down == -band.up:
            band_text = f"+-{band.up:.{d}f} {band.unit}"
        else:
            band_text = f"{band.down:+.{d}f} / {band.up:+.{d}f} {band.unit}"
    status = row.status
    if row.moved is not None and status == Outcome.INCONCLUSIVE:
        status += f" ({row.moved}?)"
    return (
        row.figure,
        _unit_label(row.figure, row.unit),
        row.better if row.better != "none" else "-",
        _num(row.baseline),
        _num(row.current),
        change_text,
        band_text,
        status,
        "; ".join(row.rules),
    )


def verdict_line(outcome: GateOutcome) -> str:
    return f"verdict: {outcome.verdict}"


def print_check(outcome: GateOutcome, console: Console) -> None:
    """A table of :func:`~trainperf.analysis.gate.check_baseline`'s rows (what moved first) and its
    verdict.

    Fits the terminal: the figure name and the rules wrap, and when even that is too wide the
    rules move under the table, then the unit, the better direction, the baseline and the
    current value are left out; the change, the band and the status are always shown."""
    from trainperf.present.console import fit_table

    ordered = sorted(outcome.rows, key=lambda r: _ORDER.get(r.status, 9))
    cells = [row_cells(r) for r in ordered]
    styles = [_STYLES.get(r.status, "") for r in ordered]

    def build(dropped: frozenset[str]) -> Table:
        from rich.table import Table

        table = Table(title="performance check: current vs baseline (medians over epochs)")
        keep = [i for i, c in enumerate(COLUMNS) if c not in dropped]
        for i in keep:
            name = COLUMNS[i]
            if name in ("figure", "why"):
                table.add_column(name, overflow="fold", min_width=14)
            else:
                table.add_column(
                    name, justify="left" if name == "status" else "right", no_wrap=True
                )
        for row, style in zip(cells, styles, strict=True):
            table.add_row(*(row[i] for i in keep), style=style)
        return table

    table = fit_table(build, ("why", "unit", "better", "baseline", "current"), console.width)
    console.print(table)
    if "why" not in [column.header for column in table.columns]:  # the rules under it
        for row in ordered:
            if row.status != Outcome.NO_CHANGE:
                console.print(f"{row.figure}: {row.status}: {'; '.join(row.rules)}", markup=False)
        floored = [r.figure for r in ordered if r.band and r.band.unit == "s"]
        held = [r.figure for r in ordered if r.held_by is not None]
        for label, names in (
            ("band widened to the baseline's noise", [r.figure for r in ordered if r.widened]),
            ("band held by the phase floor (s)", floored),
            (f"moved, but {EPOCH_ROW} did not: judged by it", held),
        ):
            if names:
                console.print(f"{label}: {', '.join(names)}", markup=False, highlight=False)
    console.print(BAND_NOTE, markup=False, highlight=False)
    for note in outcome.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    for reason in outcome.insufficient:
        console.print(f"insufficient data: {reason}", style="yellow", markup=False)
    style = {"pass": "bold green", "regression": "bold red"}.get(outcome.verdict, "bold yellow")
    console.print(verdict_line(outcome), style=style, markup=False, highlight=False)


def print_baseline(baseline: Baseline, console: Console) -> None:
    """A table of a baseline's figures (median, the noise allowance of its epochs, values)."""
    from rich.table import Table

    table = Table(
        title=f"baseline {baseline.name or ''}: {baseline.source.kind} {baseline.source.path}, "
        f"stage {baseline.stage}, epochs {baseline.epochs}"
    )
    table.add_column("figure", overflow="fold", min_width=14)
    for column in ("unit", "median", "noise"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("values", overflow="fold", min_width=12)
    for name, fig in baseline.figures.items():
        table.add_row(
            name,
            _unit_label(name, fig.unit),
            _num(fig.median),
            f"{fig.noise:.1f} {'pts' if fig.fraction else '%'}",
            ", ".join(_num(v) for v in fig.values[:8]),
        )
    console.print(table)
    console.print("noise: 3 sigmas (IQR / 1.349) of the epoch values; the gate widens to it")
    times = baseline.batch_times_s
    if times:
        console.print(
            f"{len(times)} batch times: median {_num(float(np.median(times)))} s, "
            f"p95 {_num(float(np.quantile(times, 0.95)))} s"
        )
    for note in baseline.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
