"""Performance baselines: making, writing and reading them (``trainperf baseline``).

A *baseline* (:class:`Baseline`, written as JSON with schema ``"trainperf/perf-baseline"``
v1) summarises one stage of a run, or one benchmark, as named *figures*
(:class:`Figure`): each keeps its per-epoch (or per-repetition) values, their median, its unit
and which direction is better. Sources (:func:`load_source`):

* a run directory (``<run>/perf/epochs.jsonl``, written by the performance callbacks; also the
  ``perf`` folder or the ``.jsonl`` file itself): one stage (default ``val``), the first
  ``skip_epochs`` epochs of it dropped (worker start-up, JIT compilation, a cold cache);
* a bench JSON (schema ``"trainperf/bench"`` v1, the ``--json`` output of ``benchmarks/``);

Files written before the toolkit left the app that grew it carry these schemas under the legacy
prefix (:data:`~trainperf.records.schema.LEGACY_SCHEMA_PREFIX`); they are read the same.
* a baseline JSON (read back, after validation).

Figures of a run's stage, per kept epoch: ``epoch_wall_s``, ``phase_<phase>_s`` (the phases of
``epochs.jsonl``), ``batch_median_s``, ``batch_p95_s``, ``samples_per_sec``,
``worker_<part>_ms_per_batch`` (DataLoader work timed in the workers), ``targets_ms_per_image``
(``worker_s["targets"] / samples``), ``X_hit_rate`` for every cache X that counted
``X_hits`` / ``X_misses`` in ``worker_counts`` (:func:`~trainperf.records.run_info.hit_rates`) and
``peak_rss_gb``; plus the pooled per-batch times (``batch_times_s``) for a distribution test.

Sufficient data (:func:`too_little_data`): a run side needs at least
:data:`MIN_EPOCHS_TO_JUDGE` kept epochs (after the skipped ones) and :data:`MIN_BATCHES`
batches in them, or the gate (:mod:`trainperf.analysis.gate`) answers ``"insufficient data"``. Bench
sources (repetitions chosen by the benchmark) are not held to this.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, cast

import msgspec
import numpy as np

from trainperf.core.significance import noise_allowance
from trainperf.errors import InputError
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records, read_run_record
from trainperf.records.run_info import hit_rates, to_jsonable
from trainperf.records.schema import PERF_DIRNAME, JsonValue, RunDirError, current_schema

BASELINE_SCHEMA = "trainperf/perf-baseline"
BASELINE_VERSION = 1
BENCH_SCHEMA = "trainperf/bench"
BENCH_VERSION = 1

#: Fewer pooled batch times than this on a side: the batch row is judged on its median alone.
MIN_BATCHES = 8
#: Noise needs two values: one epoch's 0 % spread is not evidence of no noise.
MIN_EPOCHS_TO_JUDGE = 2

Better = Literal["lower", "higher", "none"]
_BETTER = ("lower", "higher", "none")

_MACHINE_KEYS = (
    "hostname",
    "platform",
    "python",
    "cpu_count",
    "torch_version",
    "numpy_version",
    "cuda_devices",
)


class BaselineError(InputError, ValueError):
    """A source or baseline is missing, malformed or unusable; the message names the file."""


#: A value of a baseline's workload or machine description (JSON scalars, or a list of names).
Meta = str | int | float | bool | list[str] | None


class Figure(msgspec.Struct, frozen=True):
    """One named figure of a baseline: its ``unit`` (``fraction`` for rates in 0-1, judged in
    percentage points), which direction is ``better`` (``none``: not judged) and one finite
    value per kept epoch (or repetition)."""

    unit: str
    better: Better
    values: tuple[float, ...]

    @property
    def median(self) -> float | None:
        return float(np.median(self.values)) if self.values else None

    @property
    def fraction(self) -> bool:
        return self.unit == "fraction"

    @property
    def noise(self) -> float:
        """The noise allowance of :attr:`values` in the units the gate judges them: % of the
        median, percentage points for a fraction."""
        if self.fraction:
            return 100.0 * noise_allowance(self.values, relative=False)
        return noise_allowance(self.values)

    @classmethod
    def of(cls, values: Sequence[float | None], unit: str, better: Better) -> Figure:
        """The figure of ``values``, keeping the finite ones."""
        finite = (float(v) for v in values if v is not None)
        return cls(unit, better, tuple(v for v in finite if math.isfinite(v)))


class Source(msgspec.Struct, frozen=True):
    """Where a baseline's figures came from: ``kind`` ``run`` or ``bench``, and the file."""

    kind: str
    path: str


class Baseline(msgspec.Struct):
    """A source's figures, as :func:`load_source` reads them and ``trainperf baseline`` writes
    them (the JSON has the same fields, plus ``schema``, ``v`` and each figure's median).

    Args:
        stage: the stage summarised (``None`` for a bench that does not say).
        skip_epochs: leading epochs of the stage dropped (``None`` for a bench).
        epochs: the kept epochs' numbers (empty for a bench).
        workload: what was run (samples, num_batches, batch_size, num_workers, world_size; a
            bench's name and workload): a different one is not comparable.
        machine: where (device, cpu_count, cuda_devices, hostname, versions).
        figures: by name (module docstring).
        batches: all batches of the kept epochs (``batch_times_s`` may be strided); ``None`` for
            a bench, or a baseline written before the field existed.
        counts: worker counters summed over the kept epochs.
        notes: what the reader should know (a too-short run, epochs of different sizes).
        name, created_at: set by ``trainperf baseline`` (its ``--name``; unix seconds).
    """

    source: Source
    stage: str | None
    skip_epochs: int | None
    epochs: list[int]
    workload: dict[str, Meta]
    machine: dict[str, Meta]
    figures: dict[str, Figure]
    batch_times_s: list[float] = []
    batches: int | None = None
    counts: dict[str, int] = {}
    notes: list[str] = []
    name: str | None = None
    created_at: float | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON object ``trainperf baseline`` writes."""
        doc = msgspec.to_builtins(self)
        for name, fig in self.figures.items():  # for the reader of the file
            doc["figures"][name]["median"] = fig.median
        out = to_jsonable({"schema": BASELINE_SCHEMA, "v": BASELINE_VERSION, **doc})
        assert isinstance(out, dict)
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, object], where: str) -> Baseline:
        """A baseline JSON object read back (unknown keys ignored); :class:`BaselineError`
        naming ``where`` when it is newer than this reader or malformed."""
        version = doc.get("v")
        if not isinstance(version, int) or version > BASELINE_VERSION:
            raise BaselineError(
                f"{where}: {BASELINE_SCHEMA} version {version!r}; this trainperf reads up to "
                f"{BASELINE_VERSION}"
            )
        try:
            return msgspec.convert(doc, cls)
        except msgspec.ValidationError as exc:
            raise BaselineError(f"{where}: malformed {BASELINE_SCHEMA} file: {exc}") from exc


def _guess_unit(name: str) -> tuple[str, Better]:
    """(unit, better) of a bench figure from its name, when the bench JSON does not say."""
    lower = name.lower()
    if lower.endswith("hit_rate"):
        return "fraction", "higher"
    if lower.endswith(("_per_sec", "_per_s", "/s")):
        return "1/s", "higher"
    if lower.endswith(("_ratio", "_speedup", "_x")):
        return "x", "higher"
    for suffix, unit in (
        ("_ms_per_image", "ms/image"),
        ("_ms_per_batch", "ms/batch"),
        ("_ms", "ms"),
        ("_s", "s"),
        ("_gb", "GiB"),  # our *_gb figures are GiB (trainperf.probe.device_memory.GB = 2**30)
    ):
        if lower.endswith(suffix):
            return unit, "lower"
    return "", "none"


def _epoch_figures(records: list[EpochRecord]) -> dict[str, Figure]:
    """The figures of a stage's kept epochs (module docstring)."""
    series: dict[str, tuple[str, Better, list[float | None]]] = {}

    def add(name: str, unit: str, better: Better, value: float | None) -> None:
        series.setdefault(name, (unit, better, []))[2].append(value)

    for rec in records:
        add("epoch_wall_s", "s", "lower", rec.wall_s)
        for phase, seconds in rec.phases_s.items():
            add(f"phase_{phase}_s", "s", "lower", seconds)
        add("batch_median_s", "s", "lower", rec.batch_stats.get("median"))
        add("batch_p95_s", "s", "lower", rec.batch_stats.get("p95"))
        rate = rec.samples_per_sec  # all ranks' samples / wall time
        if rate is None and rec.all_wall_s > 0:
            rate = rec.all_samples / rec.all_wall_s
        add("samples_per_sec", "samples/s", "higher", rate)
        batches, samples, worker = rec.num_batches, rec.samples, rec.worker_s
        for part, seconds in worker.items():
            if batches:
                add(f"worker_{part}_ms_per_batch", "ms/batch", "lower", 1e3 * seconds / batches)
        if "targets" in worker and samples:
            add("targets_ms_per_image", "ms/image", "lower", 1e3 * worker["targets"] / samples)
        for cache, rate in hit_rates(rec.worker_counts).items():
            add(f"{cache}_hit_rate", "fraction", "higher", rate)
        if rec.peak_rss_gb is not None:
            add("peak_rss_gb", "GiB", "lower", rec.peak_rss_gb)
    figures = {name: Figure.of(vals, unit, better) for name, (unit, better, vals) in series.items()}
    return {name: fig for name, fig in figures.items() if fig.values}


def _epochs_file(path: Path) -> Path | None:
    if path.is_file() and path.suffix == ".jsonl":
        return path
    for candidate in (path / PERF_DIRNAME / "epochs.jsonl", path / "epochs.jsonl"):
        if candidate.is_file():
            return candidate
    return None


def _run_machine(run_dir: Path, device: str | None) -> dict[str, Meta]:
    try:
        record = read_run_record(run_dir)
    except (FileNotFoundError, RunDirError):
        record = None
    known = {key: getattr(record, key, None) for key in _MACHINE_KEYS}
    return {**{k: v for k, v in known.items() if v is not None}, "device": device}


def _from_run(epochs_path: Path, stage: str | None, skip_epochs: int) -> Baseline:
    try:
        records = read_records(epochs_path, EpochRecord)
    except RunDirError as exc:
        raise BaselineError(str(exc)) from exc
    if not records:
        raise BaselineError(f"{epochs_path}: no {EpochRecord.schema()} records")
    stages = sorted({str(r.stage) for r in records})
    if stage is None:
        stage = next((s for s in ("val", "train", "test") if s in stages), stages[0])
    chosen = [r for r in records if r.stage == stage]
    if not chosen:
        raise BaselineError(f"{epochs_path}: no {stage!r} epochs (stages present: {stages})")
    notes: list[str] = []
    kept = chosen[skip_epochs:]
    if not kept:
        kept = chosen[-1:]
        notes.append(
            f"only {len(chosen)} {stage} epoch(s): skipping {skip_epochs} would leave none, "
            "so the last one is used (it may include start-up costs)"
        )
    last = kept[-1]
    run_dir = epochs_path.parent.parent if epochs_path.parent.name == PERF_DIRNAME else None
    machine: dict[str, Meta] = (
        _run_machine(run_dir, last.device) if run_dir else {"device": last.device}
    )
    batch_times = [t for rec in kept for t in rec.batch_times_s if t is not None]
    samples = {r.samples for r in kept}
    batches = {r.num_batches for r in kept}
    if len(samples) > 1 or len(batches) > 1:
        notes.append(
            f"the kept {stage} epochs differ in size (samples {sorted(samples)}, batches "
            f"{sorted(batches)}); the workload of the last one is recorded"
        )
    counts: Counter[str] = Counter()
    for rec in kept:
        counts.update(rec.worker_counts)
    return Baseline(
        source=Source("run", str(epochs_path)),
        stage=stage,
        skip_epochs=skip_epochs,
        epochs=[-1 if r.epoch is None else r.epoch for r in kept],
        workload={
            "samples": last.samples,
            "num_batches": last.num_batches,
            "batch_size": last.batch_size,
            "num_workers": last.num_workers,
            "world_size": last.world_size,
        },
        machine=machine,
        figures=_epoch_figures(kept),
        batch_times_s=batch_times,
        batches=sum(r.num_batches for r in kept),
        counts=dict(counts),
        notes=notes,
    )


class _Bench(msgspec.Struct):
    """A bench JSON's fields besides its figures (``--json`` of ``benchmarks/``)."""

    v: int = 1
    name: str | None = None
    stage: str | None = None
    skip_epochs: int | None = None
    workload: dict[str, Meta] = {}
    machine: dict[str, Meta] = {}
    units: dict[str, str] = {}
    better: dict[str, str] = {}
    batch_times_s: list[float] = []
    counts: dict[str, int] = {}


def _from_bench(doc: Mapping[str, object], path: Path) -> Baseline:
    version = doc.get("v", 1)
    if not isinstance(version, int) or version > BENCH_VERSION:
        raise BaselineError(f"{path}: {BENCH_SCHEMA} version {version!r}; this reads up to 1")
    raw = doc.get("figures")
    if not isinstance(raw, Mapping) or not raw:
        raise BaselineError(f"{path}: a {BENCH_SCHEMA} file needs a non-empty 'figures' object")
    try:
        bench = msgspec.convert({k: v for k, v in doc.items() if k != "figures"}, _Bench)
    except msgspec.ValidationError as exc:
        raise BaselineError(f"{path}: malformed {BENCH_SCHEMA} file: {exc}") from exc
    figures: dict[str, Figure] = {}
    for name, value in raw.items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise BaselineError(f"{path}: figure {name!r} must be a number or a list of numbers")
        unit, direction = _guess_unit(str(name))
        said = bench.better.get(name, direction)
        if said not in _BETTER:
            raise BaselineError(f"{path}: better[{name!r}] must be 'lower', 'higher' or 'none'")
        figure = Figure.of(values, bench.units.get(name, unit), cast(Better, said))
        if figure.values:
            figures[str(name)] = figure
    return Baseline(
        source=Source("bench", str(path)),
        stage=bench.stage,
        skip_epochs=bench.skip_epochs,
        epochs=[],
        workload={"name": bench.name, **bench.workload},
        machine=bench.machine,
        figures=figures,
        batch_times_s=bench.batch_times_s,
        counts=bench.counts,
    )


def load_source(
    path: str | os.PathLike[str], *, stage: str | None = None, skip_epochs: int = 1
) -> Baseline:
    """A source of the module docstring as a :class:`Baseline`; ``stage`` (``None``: ``val`` if
    present, else ``train``, else ``test``) and ``skip_epochs`` (>= 0) apply to runs."""
    if skip_epochs < 0:
        raise BaselineError(f"skip_epochs must be >= 0, got {skip_epochs}")
    p = Path(path)
    if not p.exists():
        raise BaselineError(f"{p}: no such file or directory")
    epochs = _epochs_file(p)
    if epochs is not None:
        return _from_run(epochs, stage, skip_epochs)
    if p.is_dir():
        raise BaselineError(
            f"{p}: not a run directory (no {PERF_DIRNAME}/epochs.jsonl; was the run recorded "
            "with trainperf's performance monitor?)"
        )
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{p}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{p}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    schema = current_schema(doc.get("schema")) if isinstance(doc, dict) else None
    if schema == BASELINE_SCHEMA:
        return Baseline.from_json(doc, str(p))
    if schema != BENCH_SCHEMA:
        raise BaselineError(
            f"{p}: schema {schema!r} is neither {BASELINE_SCHEMA!r} nor {BENCH_SCHEMA!r}"
        )
    return _from_bench(doc, p)


def make_baseline(
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    stage: str | None = None,
    skip_epochs: int = 1,
) -> Baseline:
    """:func:`load_source` plus ``name`` (default: the source's file or folder name) and
    ``created_at``: what ``trainperf baseline`` writes."""
    baseline = load_source(path, stage=stage, skip_epochs=skip_epochs)
    reason = too_little_data("baseline", baseline)
    if reason is not None:  # said now, not first at the check that cannot use it
        baseline.notes.append(f"{reason}; `trainperf check` against it answers 'insufficient data'")
    baseline.name = name or Path(path).resolve().name
    baseline.created_at = time.time()
    return baseline


def write_baseline(baseline: Baseline, out: str | os.PathLike[str]) -> Path:
    """Write ``baseline`` as indented JSON (atomically; folders created); returns the path."""
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps(baseline.to_json(), indent=1, allow_nan=False) + "\n", encoding="utf-8"
    )
    os.replace(tmp, target)
    return target


def too_little_data(side: str, source: Baseline) -> str | None:
    """Why ``source`` is too little to judge, or ``None`` (module docstring)."""
    if source.source.kind != "run":
        return None
    epochs = len(source.epochs)
    # a baseline written before ``batches`` existed: its batch times are all there is
    batches = len(source.batch_times_s) if source.batches is None else source.batches
    if epochs < MIN_EPOCHS_TO_JUDGE:
        return (
            f"the {side} has {epochs} {source.stage} epoch(s) after skipping "
            f"{source.skip_epochs}; the gate needs at least {MIN_EPOCHS_TO_JUDGE} (one epoch has "
            "no epoch-to-epoch spread, which is not evidence of no noise): run more epochs "
            "(the run's epoch count) and record again"
        )
    if batches < MIN_BATCHES:
        return (
            f"the {side} has {batches} {source.stage} batch(es) in its {epochs} kept epochs; the "
            f"gate needs at least {MIN_BATCHES} to test the batch times: run more epochs or "
            "batches (the run's epoch count, or the batches it runs per epoch)"
        )
    return None
