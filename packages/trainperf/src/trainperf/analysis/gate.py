"""The regression gate (``trainperf check``): a run's figures against a baseline's.

:func:`check_baseline` loads what it is given (a baseline JSON, bench JSON or run folder; the
current run as a folder or a loaded :class:`~trainperf.analysis.run.RunData`), compares the two
:class:`~trainperf.analysis.baseline.Baseline` s figure by figure and answers a
:class:`GateOutcome`; each :class:`GateRow` lists the rules that decided its
status, in the units they were applied in. Noise-aware, because wall-clock figures on a shared
machine move by tens of percent between identical epochs:

* **Band.** A figure *moves* when its change leaves a band. Times and rates change by
  ``current / baseline - 1`` and the band is multiplicative: a threshold of ``t`` % moves up
  beyond ``+t`` % and down beyond ``100 / (1 + t/100) - 100`` % (``+33.1`` pairs with
  ``-24.9``). Fractions (hit rates) change in percentage points, band ``+-t``.
* **Threshold** ``t``: the tolerance (10 %; 2 points) widened to the baseline's epoch-to-epoch
  noise (:func:`trainperf.core.significance.noise_allowance`), which outlying epochs cannot widen:
  more epochs never make the gate blind.
* **Phase floor.** A phase must also move by the larger of 2 % of the baseline's epoch wall time
  (:data:`PHASE_FLOOR_SHARE`) and :data:`PHASE_FLOOR_S` (10 ms: a few scheduler slices, see
  there); where that floor is the wider rule, band and change are in seconds.
* **Noise test.** A moved figure is a ``regression`` / ``improvement`` only if a one-sided
  Mann-Whitney test agrees (p < 0.05; per-epoch values with :data:`MIN_EPOCHS_FOR_TEST` epochs a
  side, pooled batch times with :data:`~trainperf.analysis.baseline.MIN_BATCHES`), else
  ``inconclusive``;
  with fewer values the medians decide.
* **The epoch judges its parts.** A part of the epoch's time (:func:`is_epoch_part`: the phases,
  the batch times and their distribution row, the DataLoader work per batch or image) is a
  ``regression`` / ``improvement`` only when ``epoch_wall_s`` is the same outcome; else it is
  ``inconclusive`` (``moved`` keeps which way) and its rules say why. A part that moves while the
  epoch does not is time moving between parts (which the epoch row already judges), work hidden
  by parallel workers, or the load of a shared machine in a small figure: one of three identical
  reruns of a 20 ms-step module failed on ``phase_unattributed_s`` (+6.6 ms an epoch, 2.4 % of a
  0.27 s epoch whose own wall time stayed inside its band), and the batch-time rows of
  identical reruns moved +12 to +15 % beside another job while their epochs moved +7 % (the
  step times cluster near 21, 24 and 28 ms, and a median jumps between clusters). Without an
  ``epoch_wall_s`` on both sides (a bench) each part is judged alone.
* **Enough data** (:func:`~trainperf.analysis.baseline.too_little_data`), else the verdict is
  ``insufficient data`` and a moved row ``inconclusive`` (``moved`` keeps which way).

Statuses are :class:`~trainperf.core.significance.Outcome` words, plus ``missing`` (absent now: a
note)
and ``not judged`` (no better direction); a status never contradicts its change and band. A
different stage, workload (samples, batches, batch size, world size; a bench's name) or machine
class (device, CUDA devices, CPU count) is ``not comparable`` (``allow_other_machine`` compares
anyway, with a warning); another host of the same class is a note.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from trainperf.analysis.baseline import (
    MIN_BATCHES,
    Baseline,
    Figure,
    load_source,
    too_little_data,
)
from trainperf.core.significance import ALPHA, Outcome, mann_whitney_greater
from trainperf.errors import ConfigError
from trainperf.records.run_info import to_jsonable
from trainperf.records.schema import JsonValue

#: What the gate compares: a loaded baseline, or a path to one (a baseline or bench JSON, a run
#: folder); the current side may also be a loaded run (:class:`LoadedRun`).
BaselineLike = Baseline | str | os.PathLike[str]


@runtime_checkable
class LoadedRun(Protocol):
    """A loaded run (:class:`~trainperf.analysis.run.RunData`, which imports this module): the
    gate reads its folder."""

    @property
    def run_dir(self) -> Path: ...


#: Relative tolerance of time / rate figures when none is given, in percent.
DEFAULT_TOLERANCE_PCT = 10.0
#: Tolerance of fraction figures (hit rates) when none is given, in percentage points.
DEFAULT_FRACTION_TOLERANCE = 2.0
#: A phase row moves only when it changes by at least this share of the baseline epoch wall time
#: (and by :data:`PHASE_FLOOR_S`).
PHASE_FLOOR_SHARE = 0.02
#: ... and by at least this many seconds an epoch. Why 10 ms: on a shared host a runnable thread
#: that another process holds off the CPU waits out that process's slice, and Linux's slice is
#: 0.75 ms x (1 + log2(CPUs, at most 8)): 1.5 ms on 2 CPUs, 3 ms on 8 or more (CFS's
#: ``sched_min_granularity_ns``, EEVDF's ``sched_base_slice_ns``). A few such waits landing in one
#: phase of one epoch (measured on a shared 2-CPU host: ``phase_unattributed_s`` of identical
#: 12-step epochs of a 20 ms-step module spread from 3.8 to 12.6 ms) are noise, not code;
#: the clock itself (``perf_counter_ns``, tens of ns) is no limit. On long epochs 2 % is wider.
PHASE_FLOOR_S = 0.010
#: The figure that judges the parts of the epoch's time (module docstring).
EPOCH_ROW = "epoch_wall_s"
#: With at least this many epochs on both sides a figure row also needs a significant
#: Mann-Whitney test (with 3 against 3 the smallest possible p-value is 0.05).
MIN_EPOCHS_FOR_TEST = 4
#: The row of the pooled per-batch times.
BATCH_ROW = "batch_time_s (distribution)"
#: Row statuses besides the outcome words: in the baseline but not now; no better direction.
MISSING = "missing"
NOT_JUDGED = "not judged"

_MACHINE_CLASS_KEYS = ("device", "cuda_devices", "cpu_count")
_WORKLOAD_KEYS = ("samples", "num_batches", "batch_size", "world_size", "name")


@dataclass(frozen=True)
class Band:
    """The change a figure must leave to count as moved, as applied: edges ``down`` < 0 < ``up``
    in ``unit``: ``%`` (relative change), ``pts`` (percentage points, for fractions) or ``s``
    (seconds: a phase whose floor, 2 % of the epoch, is wider than its threshold)."""

    down: float
    up: float
    unit: str

    def moved(self, change: float) -> str | None:
        """``up``, ``down`` or ``None`` (inside the band)."""
        if change > self.up:
            return "up"
        if change < self.down:
            return "down"
        return None


@dataclass(frozen=True)
class GateRow:
    """One compared figure: its ``status`` (an Outcome word, :data:`MISSING` or
    :data:`NOT_JUDGED`), the medians, ``ratio`` (``current / baseline``), ``change`` (in the
    band's unit), ``threshold`` (the tolerance widened to the noise, ``threshold_unit``), the
    ``band`` applied, the ``rules`` that decided, in order, the Mann-Whitney ``p_value`` in the
    direction the median moved (enough values a side), ``moved`` (``regression`` /
    ``improvement`` when the change left the band), ``widened``, ``n`` (values a side) and
    ``held_by``: the figure whose outcome this one waits for (:data:`EPOCH_ROW`, for a part of
    the epoch that moved alone: then ``inconclusive``)."""

    figure: str
    status: str
    unit: str = ""
    better: str = "none"
    baseline: float | None = None
    current: float | None = None
    ratio: float | None = None
    change: float | None = None
    threshold: float | None = None
    threshold_unit: str = "%"
    band: Band | None = None
    rules: tuple[str, ...] = ()
    p_value: float | None = None
    moved: str | None = None
    widened: bool = False
    n: tuple[int, int] = (0, 0)
    held_by: str | None = None


@dataclass(frozen=True)
class GateOutcome:
    """What :func:`check_baseline` found: a verdict (from the most binding: ``not comparable``,
    ``insufficient data``, ``regression``, ``pass``), every compared figure, comparability notes
    and why either side has too little data to judge."""

    verdict: str
    rows: list[GateRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    insufficient: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, JsonValue]:
        """The JSON view (``trainperf check --json``): the same fields, rows and bands nested."""
        out = to_jsonable(asdict(self))
        assert isinstance(out, dict)
        return out


def _change(base: float, cur: float, fraction: bool) -> float:
    if fraction:
        return 100.0 * (cur - base)
    if base == 0:
        return 0.0 if cur == 0 else math.copysign(math.inf, cur)
    return 100.0 * (cur / base - 1.0)


def _band(threshold: float, fraction: bool, floor_pct: float) -> Band:
    """The band in percent (points for fractions); the floor, a relative change too here,
    widens a side where it is wider."""
    if fraction:
        return Band(-threshold, threshold, "pts")
    down = 100.0 * (1.0 / (1.0 + threshold / 100.0) - 1.0)
    return Band(min(down, -floor_pct), max(threshold, floor_pct), "%")


def _row(
    name: str,
    bfig: Figure,
    base: float | None,
    cur: float | None,
    tolerance: float,
    test: tuple[Sequence[float], Sequence[float]],
    *,
    floor_s: float = 0.0,
    floor_rule: str = "",
    min_n: int = MIN_EPOCHS_FOR_TEST,
    what: str = "epochs",
) -> GateRow:
    """Judge one figure (module docstring): ``bfig`` gives the unit, the better direction and the
    epoch values whose noise widens the threshold; ``base`` / ``cur`` are the medians compared;
    ``test`` the values of the noise test; ``floor_s`` the smallest absolute change that
    counts, ``floor_rule`` where it comes from."""
    fraction = bfig.fraction
    unit = "pts" if fraction else "%"
    noise = bfig.noise
    threshold = max(tolerance, noise)
    widened = noise > tolerance
    rules = [
        f"baseline noise {noise:.1f} {unit} (3 sigmas from the IQR of {len(bfig.values)} "
        f"epochs) > tolerance {tolerance:.1f} {unit}"
        if widened
        else f"tolerance {tolerance:.1f} {unit}"
    ]

    def row(status: str, **found: object) -> GateRow:
        return GateRow(
            name,
            status,
            unit=bfig.unit,
            better=bfig.better,
            baseline=base,
            threshold=threshold,
            threshold_unit=unit,
            widened=widened,
            rules=tuple(rules),
            n=(len(test[0]), len(test[1])),
            **found,  # type: ignore[arg-type]
        )

    if base is None or cur is None:
        rules.append("absent from the current source")
        return row(MISSING)
    change = _change(base, cur, fraction)
    floor_pct = 100.0 * floor_s / abs(base) if floor_s and base else 0.0
    band = _band(threshold, fraction, floor_pct)
    if floor_pct > threshold:
        # the floor holds both sides: the band and the change in the seconds it is applied in
        rules.append(f"phase floor: {floor_rule} (wider than the {threshold:.1f} % threshold)")
        band, change, unit = Band(-floor_s, floor_s, "s"), cur - base, "s"
    measured = {"current": cur, "ratio": cur / base if base else None, "change": change}
    if bfig.better == "none":
        rules.append("no better direction: not judged")
        return row(NOT_JUDGED, band=band, **measured)
    direction = band.moved(change)
    p_value = None  # that the current values are shifted the way the median moved
    if min(map(len, test)) >= min_n:
        lower, higher = test if change > 0 else test[::-1]
        p_value = mann_whitney_greater(lower, higher)
    shown = f"{change:+.3g} s" if unit == "s" else f"{change:+.1f} {unit}"
    moved: str | None = None
    if direction is None:
        rules.append(f"change {shown} inside the band")
        status = str(Outcome.NO_CHANGE)
    else:
        worse = (direction == "up") == (bfig.better == "lower")
        moved = str(Outcome.REGRESSION if worse else Outcome.IMPROVEMENT)
        rules.append(f"change {shown} outside the band")
        if p_value is None:
            rules.append(f"no noise test (fewer than {min_n} {what} a side): the medians decide")
            status = moved
        elif p_value < ALPHA:
            rules.append(f"Mann-Whitney p={p_value:.3f} < {ALPHA}: beyond the noise")
            status = moved
        else:
            rules.append(f"Mann-Whitney p={p_value:.3f} >= {ALPHA}: within the noise")
            status = str(Outcome.INCONCLUSIVE)
    return row(status, band=band, p_value=p_value, moved=moved, **measured)


def _comparability(
    baseline: Baseline, current: Baseline, allow_other_machine: bool
) -> tuple[bool, list[str]]:
    notes: list[str] = []  # why the two are not comparable, then what to know anyway
    if baseline.stage != current.stage:
        notes.append(f"different stages: baseline {baseline.stage!r}, current {current.stage!r}")
    kinds = (baseline.source.kind, current.source.kind)
    if "bench" in kinds and kinds[0] != kinds[1]:
        notes.append(f"a {kinds[0]} compared with a {kinds[1]}: different kinds of figures")
    wb, wc = baseline.workload, current.workload
    for key in _WORKLOAD_KEYS:
        if key in wb and key in wc and wb[key] != wc[key]:
            notes.append(f"different workload: {key} {wb[key]!r} in the baseline, {wc[key]!r} now")
    mb, mc = baseline.machine, current.machine
    differ = "; ".join(
        f"{key} {mb[key]!r} vs {mc[key]!r}"
        for key in _MACHINE_CLASS_KEYS
        if key in mb and key in mc and mb[key] != mc[key]
    )
    if differ and not allow_other_machine:
        notes.append(
            f"different machines ({differ}): wall times are not comparable "
            "(allow_other_machine / --allow-other-machine compares anyway)"
        )
    comparable = not notes
    if differ and allow_other_machine:
        notes.append(f"WARNING: different machines ({differ}), compared anyway")
    hosts = mb.get("hostname"), mc.get("hostname")
    if not differ and all(hosts) and hosts[0] != hosts[1]:
        notes.append(f"different hosts of the same class: {hosts[0]} vs {hosts[1]}")
    return comparable, notes


def _batch_row(baseline: Baseline, current: Baseline, tolerance: float) -> GateRow | None:
    """The pooled per-batch times: their medians against a band sized by the noise of the
    baseline's per-epoch batch medians, the noise test on all the batches."""
    a, b = baseline.batch_times_s, current.batch_times_s
    if not a or not b:
        return None
    per_epoch = baseline.figures.get("batch_median_s")
    noise = Figure("s", "lower", per_epoch.values if per_epoch is not None else ())
    return _row(
        BATCH_ROW,
        noise,
        float(np.median(a)),
        float(np.median(b)),
        tolerance,
        (a, b),
        min_n=MIN_BATCHES,
        what="batches",
    )


def check_baseline(
    baseline: BaselineLike,
    current: BaselineLike | LoadedRun,
    tolerance_pct: float | None = None,
    *,
    allow_other_machine: bool = False,
    stage: str | None = None,
    skip_epochs: int = 1,
) -> GateOutcome:
    """Compare ``current`` with ``baseline`` by the rules of the module docstring.

    ``baseline``: a baseline JSON (``trainperf baseline``), a bench JSON or a run folder, or one
    already loaded (:class:`~trainperf.analysis.baseline.Baseline`); ``current``: the same, or
    a loaded run (:func:`~trainperf.analysis.run.load_run`). A side given as a path is loaded
    with :func:`~trainperf.analysis.baseline.load_source`: ``stage`` (``None``: ``val`` if
    present, else ``train``, else ``test``) and ``skip_epochs`` apply to run folders; an
    unreadable or unusable one is a :class:`~trainperf.analysis.baseline.BaselineError` naming
    it. ``tolerance_pct``: the smallest change that counts, in percent (points for fractions;
    ``None``: the defaults above); ``allow_other_machine``: compare across machine classes (a
    warning note) instead of answering ``"not comparable"``."""
    if tolerance_pct is not None and not tolerance_pct >= 0:
        raise ConfigError(f"tolerance_pct must be >= 0, got {tolerance_pct!r}")
    baseline = _loaded(baseline, stage, skip_epochs)
    current = _loaded(current, stage, skip_epochs)
    comparable, notes = _comparability(baseline, current, allow_other_machine)
    notes.extend(_contention_notes(baseline, current))
    wall_figure = baseline.figures.get(EPOCH_ROW)
    wall = (wall_figure.median if wall_figure is not None else None) or 0.0
    rows: list[GateRow] = []
    for name, bfig in baseline.figures.items():
        default = DEFAULT_FRACTION_TOLERANCE if bfig.fraction else DEFAULT_TOLERANCE_PCT
        tolerance = default if tolerance_pct is None else float(tolerance_pct)
        cfig = current.figures.get(name)
        floor_s, floor_rule = _phase_floor(wall if name.startswith("phase_") else 0.0)
        rows.append(
            _row(
                name,
                bfig,
                bfig.median,
                None if cfig is None else cfig.median,
                tolerance,
                (bfig.values, () if cfig is None else cfig.values),
                floor_s=floor_s,
                floor_rule=floor_rule,
            )
        )
        if rows[-1].status == MISSING:
            notes.append(f"{name}: in the baseline but not in the current source")
    batch = _batch_row(
        baseline, current, DEFAULT_TOLERANCE_PCT if tolerance_pct is None else tolerance_pct
    )
    if batch is not None:
        rows.append(batch)
    rows = _judged_by_the_epoch(rows)
    new = sorted(set(current.figures) - set(baseline.figures))
    if new:
        notes.append(f"not in the baseline (not judged): {', '.join(new)}")
    insufficient = [
        reason
        for side, source in (("baseline", baseline), ("current run", current))
        if (reason := too_little_data(side, source)) is not None
    ]
    if insufficient:
        rows = [_unjudged(row) if row.moved is not None else row for row in rows]
    if not comparable:
        verdict = "not comparable"
    elif insufficient:
        verdict = "insufficient data"
    elif any(row.status == Outcome.REGRESSION for row in rows):
        verdict = "regression"
    else:
        verdict = "pass"
    return GateOutcome(verdict, rows, notes, insufficient)


def _loaded(side: BaselineLike | LoadedRun, stage: str | None, skip_epochs: int) -> Baseline:
    """``side`` as a :class:`Baseline`: itself, or its file or folder (a run's folder) loaded."""
    if isinstance(side, Baseline):
        return side
    if isinstance(side, str | os.PathLike):
        return load_source(side, stage=stage, skip_epochs=skip_epochs)
    if isinstance(side, LoadedRun):
        return load_source(side.run_dir, stage=stage, skip_epochs=skip_epochs)
    raise TypeError(
        "check_baseline: expected a Baseline, a RunData or a path, got " + type(side).__name__
    )


def _phase_floor(epoch_wall_s: float) -> tuple[float, str]:
    """``floor_s`` and ``floor_rule`` of a phase row: the larger of :data:`PHASE_FLOOR_SHARE` of
    the baseline's epoch wall and :data:`PHASE_FLOOR_S`; none without an epoch wall (a bench)."""
    if epoch_wall_s <= 0:
        return 0.0, ""
    share = PHASE_FLOOR_SHARE * epoch_wall_s
    percent = f"{100 * PHASE_FLOOR_SHARE:.0f} % of the epoch wall = {share:.3g} s"
    if share >= PHASE_FLOOR_S:
        return share, percent
    return PHASE_FLOOR_S, f"{PHASE_FLOOR_S:.3g} s, above {percent}"


def is_epoch_part(figure: str, unit: str) -> bool:
    """Whether a row measures a part of the epoch's time, which ``epoch_wall_s`` judges (module
    docstring): a phase, the batch times (median, p95, the distribution row), DataLoader work
    per batch or per image; never a fraction, a rate or memory."""
    if unit == "fraction":
        return False
    return (
        figure.startswith("phase_")
        or figure in ("batch_median_s", "batch_p95_s", BATCH_ROW, "targets_ms_per_image")
        or (figure.startswith("worker_") and figure.endswith("_ms_per_batch"))
    )


def _judged_by_the_epoch(rows: list[GateRow]) -> list[GateRow]:
    """Each part of the epoch that is a regression / improvement while ``epoch_wall_s`` is not
    the same outcome: inconclusive, with the epoch's status as its last rule."""
    whole = next((r for r in rows if r.figure == EPOCH_ROW and r.change is not None), None)
    if whole is None:
        return rows
    outcomes = (Outcome.REGRESSION, Outcome.IMPROVEMENT)
    shown = f"{whole.change:+.1f} %" if whole.change is not None else ""
    out = []
    for row in rows:
        if (
            row.figure != EPOCH_ROW
            and row.status in outcomes
            and row.status != whole.status
            and is_epoch_part(row.figure, row.unit)
        ):
            rule = (
                f"{EPOCH_ROW} {shown} is {whole.status}: a part of the epoch that moves while "
                "the epoch does not is time moving between parts or noise; the epoch row judges"
            )
            row = replace(
                row, status=str(Outcome.INCONCLUSIVE), rules=(*row.rules, rule), held_by=EPOCH_ROW
            )
        out.append(row)
    return out


def _contention_notes(baseline: Baseline, current: Baseline) -> list[str]:
    """A note for each run-sourced side measured under CPU contention
    (trainperf.analysis.contention)."""
    from trainperf.analysis.contention import contention_note

    out = []
    for what, side in (("the baseline", baseline), ("the current run", current)):
        if side.source.kind == "run":  # path: <run>/perf/epochs.jsonl
            note = contention_note(what, Path(side.source.path).parent.parent)
            if note is not None:
                out.append(note)
    return out


def _unjudged(row: GateRow) -> GateRow:
    """A row that moved, on too little data: inconclusive, whatever its test said."""
    rules = (*row.rules, "too little data to judge (see 'insufficient data')")
    return replace(row, status=str(Outcome.INCONCLUSIVE), rules=rules)
