"""Performance baselines and the regression gate (``ocr-perf baseline`` / ``ocr-perf check``).

A *baseline* is a JSON file (schema ``"receipt-ocr/perf-baseline"`` v1) that summarises one stage
of a run, or one benchmark, as named *figures*: each figure keeps its per-epoch (or
per-repetition) values, their median, its unit and which direction is better. Sources
(:func:`load_source`):

* a run directory (``<run>/perf/epochs.jsonl``, written by the performance callbacks; also the
  ``perf`` folder or the ``.jsonl`` file itself): one stage (default ``val``), the first
  ``skip_epochs`` epochs of it dropped (worker start-up, JIT compilation, a cold cache);
* a bench JSON (schema ``"receipt-ocr/bench"`` v1, the ``--json`` output of ``benchmarks/``);
* a baseline JSON (returned as it is, after validation).

Figures of a run's stage, per kept epoch: ``epoch_wall_s``, ``phase_<phase>_s`` (the phases of
``epochs.jsonl``), ``batch_median_s``, ``batch_p95_s``, ``samples_per_sec``,
``worker_<part>_ms_per_batch`` (DataLoader work timed in the workers), ``targets_ms_per_image``
(``worker_s["targets"] / samples``), ``polygon_cache_hit_rate`` (from ``worker_counts``) and
``peak_rss_gb``; plus the pooled per-batch times (``batch_times_s``) for a distribution test.

The gate (:func:`check_baseline`) is noise-aware in two ways, because wall-clock figures on a
shared machine move by tens of percent between identical epochs:

* **Figure rows** compare medians over epochs (a ratio). A row moves only beyond its threshold:
  the tolerance (default 10 %; percentage points for fractions, default 2) *widened to the
  baseline's own epoch-to-epoch spread* (``(max - min) / median`` of its values), so a figure the
  baseline itself could not hold steady cannot fail the gate by that much. Phase times must also
  move by at least 2 % of the baseline's epoch wall time, so a phase of a few milliseconds
  cannot fail it by doubling. With at least :data:`MIN_EPOCHS_FOR_TEST` epochs on both sides, a
  one-sided Mann-Whitney U test of the per-epoch values must also call the shift significant
  (p < 0.05).
* **The batch-time row** compares the pooled per-batch times: the median must shift beyond the
  same kind of threshold *and* a one-sided Mann-Whitney U test must find the current batches
  slower (p < 0.05) when both sides have at least :data:`MIN_BATCHES` batches.

Sufficient data: a run side (baseline or current) needs at least :data:`MIN_EPOCHS_TO_JUDGE`
kept epochs (after the skipped ones) and :data:`MIN_BATCHES` batches in them. With fewer, the
thresholds rest on no measured noise (one epoch has a 0 % spread, which is not evidence of no
noise) and no test can run, so the verdict is ``"insufficient data"``: the rows are still
computed, but a row that moved is marked ``"unjudged"`` (``moved`` keeps which way), never a
regression. Bench sources (repetitions chosen by the benchmark) are not held to this.

Comparability: a different stage, a different workload (samples or batches per epoch, batch
size, world size; for benchmarks a different name) or a different machine class (device, CUDA
device names, CPU count) makes the verdict ``"not comparable"`` — wall times of different
hardware say nothing about the code. ``allow_other_machine=True`` compares anyway and keeps a
warning in the notes. A different host name of the same class is only a note.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ocr.errors import ConfigError, InputError
from ocr.perf.records import (
    PERF_DIRNAME,
    EpochRecord,
    RunDirError,
    read_records,
    read_run_record,
)
from ocr.perf.rundir import polygon_cache_hit_rate, to_jsonable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "BASELINE_SCHEMA",
    "BENCH_SCHEMA",
    "DEFAULT_FRACTION_TOLERANCE",
    "DEFAULT_TOLERANCE_PCT",
    "MIN_BATCHES",
    "MIN_EPOCHS_FOR_TEST",
    "MIN_EPOCHS_TO_JUDGE",
    "VERDICTS",
    "BaselineError",
    "BaselineOutcome",
    "BaselineRow",
    "check_baseline",
    "load_source",
    "make_baseline",
    "print_baseline",
    "print_check",
    "write_baseline",
]

BASELINE_SCHEMA = "receipt-ocr/perf-baseline"
BASELINE_VERSION = 1
BENCH_SCHEMA = "receipt-ocr/bench"
BENCH_VERSION = 1

#: Relative tolerance of time / rate figures when none is given, in percent.
DEFAULT_TOLERANCE_PCT = 10.0
#: Tolerance of fraction figures (hit rates) when none is given, in percentage points.
DEFAULT_FRACTION_TOLERANCE = 2.0
#: A phase row moves only when it changes by at least this share of the baseline epoch wall time.
PHASE_FLOOR_SHARE = 0.02
#: Fewer pooled batch times than this on a side: the batch row is judged on its median alone.
MIN_BATCHES = 8
#: With at least this many epochs on both sides a figure row also needs a significant
#: Mann-Whitney test (with 3 against 3 the smallest possible p-value is 0.05).
MIN_EPOCHS_FOR_TEST = 4
_ALPHA = 0.05
#: A run side needs at least this many kept epochs: the baseline's epoch-to-epoch spread widens
#: the thresholds, and a spread needs two values (one epoch's 0 % is not evidence of no noise);
#: the current side's median of one epoch is a single draw of that noise.
MIN_EPOCHS_TO_JUDGE = 2
#: The verdicts of :func:`check_baseline`, from the most to the least binding.
VERDICTS = ("not comparable", "insufficient data", "regression", "pass")

_MACHINE_CLASS_KEYS = ("device", "cuda_devices", "cpu_count")
_WORKLOAD_KEYS = ("samples", "num_batches", "batch_size", "world_size", "name")
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


# -- figures -------------------------------------------------------------------------------------


def _figure(values: Sequence[float], unit: str, better: str) -> dict[str, Any]:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return {
        "unit": unit,
        "better": better,
        "values": finite,
        "median": float(np.median(finite)) if finite else None,
    }


def _guess_unit(name: str) -> tuple[str, str]:
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
        ("_gb", "GiB"),  # our *_gb figures are GiB (ocr.perf.memory.GB = 2**30)
    ):
        if lower.endswith(suffix):
            return unit, "lower"
    return "", "none"


def _epoch_figures(records: list[EpochRecord], where: str) -> dict[str, dict[str, Any]]:
    """The figures of a stage's kept epochs (module docstring)."""
    series: dict[str, tuple[str, str, list[float]]] = {}

    def add(name: str, unit: str, better: str, value: float | None) -> None:
        entry = series.setdefault(name, (unit, better, []))
        entry[2].append(math.nan if value is None else float(value))

    for index, rec in enumerate(records):
        try:
            wall = rec.wall_s
            samples = rec.samples
            batches = rec.num_batches
            add("epoch_wall_s", "s", "lower", wall)
            for phase, seconds in rec.phases_s.items():
                add(f"phase_{phase}_s", "s", "lower", seconds)
            stats = rec.batch_stats
            add("batch_median_s", "s", "lower", stats.get("median"))
            add("batch_p95_s", "s", "lower", stats.get("p95"))
            rate = rec.samples_per_sec
            if rate is None and wall > 0:
                rate = samples / wall
            add("samples_per_sec", "samples/s", "higher", rate)
            worker = rec.worker_s
            for part, seconds in worker.items():
                if batches and seconds is not None:
                    add(f"worker_{part}_ms_per_batch", "ms/batch", "lower", 1e3 * seconds / batches)
            if worker.get("targets") is not None and samples:
                add("targets_ms_per_image", "ms/image", "lower", 1e3 * worker["targets"] / samples)
            hit_rate = polygon_cache_hit_rate(rec.worker_counts)
            if hit_rate is not None:
                add("polygon_cache_hit_rate", "fraction", "higher", hit_rate)
            if rec.peak_rss_gb is not None:
                add("peak_rss_gb", "GiB", "lower", rec.peak_rss_gb)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(
                f"{where}: {rec.stage} epoch {rec.epoch} (record {index + 1}) is malformed: {exc!r}"
            ) from exc
    figures = {name: _figure(vals, unit, better) for name, (unit, better, vals) in series.items()}
    return {name: fig for name, fig in figures.items() if fig["values"]}


# -- sources -------------------------------------------------------------------------------------


def _epochs_file(path: Path) -> Path | None:
    if path.is_file() and path.suffix == ".jsonl":
        return path
    for candidate in (path / PERF_DIRNAME / "epochs.jsonl", path / "epochs.jsonl"):
        if candidate.is_file():
            return candidate
    return None


def _run_machine(run_dir: Path, device: str | None) -> dict[str, Any]:
    machine: dict[str, Any] = {}
    try:
        record = read_run_record(run_dir)
    except (FileNotFoundError, RunDirError):
        record = None
    for key in _MACHINE_KEYS:
        value = getattr(record, key, None)
        if value is not None:
            machine[key] = value
    machine["device"] = device
    return machine


def _from_run(epochs_path: Path, stage: str | None, skip_epochs: int) -> dict[str, Any]:
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
    machine = _run_machine(run_dir, last.device) if run_dir else {"device": last.device}
    batch_times: list[float] = []
    for rec in kept:
        batch_times.extend(t for t in rec.batch_times_s if t is not None)
    samples = {r.samples for r in kept}
    batches = {r.num_batches for r in kept}
    if len(samples) > 1 or len(batches) > 1:
        notes.append(
            f"the kept {stage} epochs differ in size (samples {sorted(samples)}, batches "
            f"{sorted(batches)}); the workload of the last one is recorded"
        )
    counts: dict[str, int] = {}
    for rec in kept:
        for name, value in rec.worker_counts.items():
            counts[name] = counts.get(name, 0) + value
    return {
        "source": {"kind": "run", "path": str(epochs_path)},
        "stage": stage,
        "skip_epochs": skip_epochs,
        "epochs": [-1 if r.epoch is None else r.epoch for r in kept],
        "workload": {
            "samples": last.samples,
            "num_batches": last.num_batches,
            "batch_size": last.batch_size,
            "num_workers": last.num_workers,
            "world_size": last.world_size,
        },
        "machine": machine,
        "figures": _epoch_figures(kept, str(epochs_path)),
        "batch_times_s": batch_times,
        # all batches of the kept epochs (batch_times_s may be strided on long epochs)
        "batches": sum(r.num_batches for r in kept),
        "counts": counts,
        "notes": notes,
    }


def _from_bench(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    version = doc.get("v", 1)
    if not isinstance(version, int) or version > BENCH_VERSION:
        raise BaselineError(f"{path}: {BENCH_SCHEMA} version {version!r}; this reads up to 1")
    raw = doc.get("figures")
    if not isinstance(raw, Mapping) or not raw:
        raise BaselineError(f"{path}: a {BENCH_SCHEMA} file needs a non-empty 'figures' object")
    units = doc.get("units") or {}
    better = doc.get("better") or {}
    figures: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise BaselineError(f"{path}: figure {name!r} must be a number or a list of numbers")
        unit, direction = _guess_unit(str(name))
        figure = _figure(values, str(units.get(name, unit)), str(better.get(name, direction)))
        if figure["better"] not in ("lower", "higher", "none"):
            raise BaselineError(f"{path}: better[{name!r}] must be 'lower', 'higher' or 'none'")
        if figure["values"]:
            figures[str(name)] = figure
    batch_times = doc.get("batch_times_s") or []
    return {
        "source": {"kind": "bench", "path": str(path)},
        "stage": doc.get("stage"),
        "skip_epochs": doc.get("skip_epochs"),
        "epochs": [],
        "workload": {"name": doc.get("name"), **dict(doc.get("workload") or {})},
        "machine": dict(doc.get("machine") or {}),
        "figures": figures,
        "batch_times_s": [float(t) for t in batch_times],
        "counts": dict(doc.get("counts") or {}),
        "notes": [],
    }


def _validate_baseline(doc: dict[str, Any], where: str) -> dict[str, Any]:
    version = doc.get("v")
    if not isinstance(version, int) or version > BASELINE_VERSION:
        raise BaselineError(
            f"{where}: {BASELINE_SCHEMA} version {version!r}; this receipt-ocr reads up to "
            f"{BASELINE_VERSION}"
        )
    figures = doc.get("figures")
    if not isinstance(figures, Mapping):
        raise BaselineError(f"{where}: 'figures' must be an object")
    for name, fig in figures.items():
        if not isinstance(fig, Mapping) or not isinstance(fig.get("values"), list):
            raise BaselineError(f"{where}: figure {name!r} needs a 'values' list")
        if fig.get("better") not in ("lower", "higher", "none"):
            raise BaselineError(f"{where}: figure {name!r}: 'better' must be lower/higher/none")
    if not isinstance(doc.get("batch_times_s", []), list):
        raise BaselineError(f"{where}: 'batch_times_s' must be a list")
    return doc


def load_source(
    path: str | os.PathLike[str], *, stage: str | None = None, skip_epochs: int = 1
) -> dict[str, Any]:
    """A run directory, a bench JSON or a baseline JSON as a baseline-shaped dict.

    Args:
        path: run directory (or its ``perf/`` folder, or an ``epochs.jsonl`` file), bench JSON
            (schema ``receipt-ocr/bench``) or baseline JSON (schema ``receipt-ocr/perf-baseline``).
        stage: for runs, the stage to summarise; ``None`` = ``val`` if present, else ``train``,
            else ``test``. Ignored for JSON files.
        skip_epochs: for runs, leading epochs of the stage to drop (>= 0). Default 1.

    Raises:
        BaselineError: missing file, unknown format or malformed content (names the file).
    """
    if skip_epochs < 0:
        raise BaselineError(f"skip_epochs must be >= 0, got {skip_epochs}")
    p = Path(path)
    if not p.exists():
        raise BaselineError(f"{p}: no such file or directory")
    epochs = _epochs_file(p)
    if epochs is not None:
        result = _from_run(epochs, stage, skip_epochs)
    elif p.is_dir():
        raise BaselineError(
            f"{p}: not a run directory (no {PERF_DIRNAME}/epochs.jsonl; were the performance "
            "callbacks attached, e.g. callbacks=monitoring?)"
        )
    else:
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise BaselineError(f"{p}: cannot read: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise BaselineError(f"{p}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
        schema = doc.get("schema") if isinstance(doc, dict) else None
        if schema == BASELINE_SCHEMA:
            return _validate_baseline(doc, str(p))
        if schema != BENCH_SCHEMA:
            raise BaselineError(
                f"{p}: schema {schema!r} is neither {BASELINE_SCHEMA!r} nor {BENCH_SCHEMA!r}"
            )
        result = _from_bench(doc, p)
    return {"schema": BASELINE_SCHEMA, "v": BASELINE_VERSION, **result}


def make_baseline(
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    stage: str | None = None,
    skip_epochs: int = 1,
) -> dict[str, Any]:
    """:func:`load_source` plus ``name`` (default: the source's file or folder name) and
    ``created_at`` (unix seconds): what ``ocr-perf baseline`` writes."""
    baseline = load_source(path, stage=stage, skip_epochs=skip_epochs)
    reason = _too_little_data("baseline", baseline)
    if reason is not None:  # said now, not first at the check that cannot use it
        baseline.setdefault("notes", []).append(
            f"{reason}; `ocr-perf check` against it answers 'insufficient data'"
        )
    baseline["name"] = name or Path(path).resolve().name
    baseline["created_at"] = time.time()
    return baseline


def write_baseline(baseline: Mapping[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write ``baseline`` as indented JSON (atomically; folders created); returns the path."""
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps(to_jsonable(dict(baseline)), indent=1, allow_nan=False) + "\n", encoding="utf-8"
    )
    os.replace(tmp, target)
    return target


# -- the gate ------------------------------------------------------------------------------------


def _spread(values: Sequence[float], fraction: bool) -> float:
    """Epoch-to-epoch spread: percent of the median, or percentage points for fractions."""
    if len(values) < 2:
        return 0.0
    lo, hi, med = min(values), max(values), float(np.median(values))
    if fraction:
        return 100.0 * (hi - lo)
    return 100.0 * (hi - lo) / med if med > 0 else 0.0


def _judge(
    base: float, cur: float, better: str, fraction: bool, threshold: float, floor: float
) -> tuple[str, float | None]:
    """(status, ratio) of one figure; ``floor`` is the smallest absolute change that counts."""
    ratio = cur / base if base else (None if cur else 1.0)
    if better == "none" or abs(cur - base) < floor:
        return "ok", ratio
    if fraction:
        delta_pts = 100.0 * (cur - base)
        worse, better_by = (
            (-delta_pts, delta_pts) if better == "higher" else (delta_pts, -delta_pts)
        )
        if worse > threshold:
            return "regression", ratio
        if better_by > threshold:
            return "improvement", ratio
        return "ok", ratio
    factor = 1.0 + threshold / 100.0
    if ratio is None:  # baseline 0, current positive
        return ("regression" if better == "lower" else "improvement"), ratio
    slower = ratio > factor if better == "lower" else ratio < 1.0 / factor
    faster = ratio < 1.0 / factor if better == "lower" else ratio > factor
    return ("regression" if slower else "improvement" if faster else "ok"), ratio


def _comparability(
    baseline: Mapping[str, Any], current: Mapping[str, Any], allow_other_machine: bool
) -> tuple[bool, list[str]]:
    notes: list[str] = []
    ok = True
    if baseline.get("stage") != current.get("stage"):
        ok = False
        notes.append(
            f"different stages: baseline {baseline.get('stage')!r}, current "
            f"{current.get('stage')!r}"
        )
    kinds = (baseline.get("source", {}).get("kind"), current.get("source", {}).get("kind"))
    if "bench" in kinds and kinds[0] != kinds[1]:
        ok = False
        notes.append(f"a {kinds[0]} compared with a {kinds[1]}: different kinds of figures")
    wb, wc = baseline.get("workload") or {}, current.get("workload") or {}
    for key in _WORKLOAD_KEYS:
        if key in wb and key in wc and wb[key] != wc[key]:
            ok = False
            notes.append(f"different workload: {key} {wb[key]!r} in the baseline, {wc[key]!r} now")
    mb, mc = baseline.get("machine") or {}, current.get("machine") or {}
    differ = [
        f"{key} {mb[key]!r} vs {mc[key]!r}"
        for key in _MACHINE_CLASS_KEYS
        if key in mb and key in mc and mb[key] != mc[key]
    ]
    if differ:
        if allow_other_machine:
            notes.append("WARNING: different machines (" + "; ".join(differ) + "), compared anyway")
        else:
            ok = False
            notes.append(
                "different machines (" + "; ".join(differ) + "): wall times are not comparable "
                "(allow_other_machine / --allow-other-machine compares anyway)"
            )
    elif mb.get("hostname") and mc.get("hostname") and mb["hostname"] != mc["hostname"]:
        notes.append(f"different hosts of the same class: {mb['hostname']} vs {mc['hostname']}")
    return ok, notes


def _batch_row(
    baseline: Mapping[str, Any], current: Mapping[str, Any], tolerance: float
) -> dict[str, Any] | None:
    a = np.asarray(baseline.get("batch_times_s") or [], dtype=np.float64)
    b = np.asarray(current.get("batch_times_s") or [], dtype=np.float64)
    if a.size == 0 or b.size == 0:
        return None
    base, cur = float(np.median(a)), float(np.median(b))
    per_epoch = (baseline.get("figures") or {}).get("batch_median_s", {}).get("values") or []
    threshold = max(tolerance, _spread(per_epoch, fraction=False))
    status, ratio = _judge(base, cur, "lower", False, threshold, 0.0)
    row: dict[str, Any] = {
        "figure": "batch_time_s (distribution)",
        "unit": "s",
        "baseline": base,
        "current": cur,
        "ratio": ratio,
        "threshold": threshold,
        "threshold_unit": "%",
        "better": "lower",
        "status": status,
        "p_value": None,
        "widened": threshold > tolerance,
        "n": [int(a.size), int(b.size)],
    }
    _noise_test(row, a.tolist(), b.tolist(), MIN_BATCHES)
    return row


def _noise_test(
    row: dict[str, Any], base: Sequence[float], cur: Sequence[float], min_n: int
) -> None:
    """A moved row stays moved only if a one-sided Mann-Whitney U test of the values says the
    shift is not noise (p < 0.05); with fewer than ``min_n`` values a side, the medians decide."""
    from ocr.perf.trace.compare import mann_whitney_greater

    if row["status"] not in ("regression", "improvement") or min(len(base), len(cur)) < min_n:
        return
    a, b = np.asarray(base, dtype=np.float64), np.asarray(cur, dtype=np.float64)
    larger = (row["status"] == "regression") == (row["better"] == "lower")
    p = mann_whitney_greater(a, b) if larger else mann_whitney_greater(b, a)
    row["p_value"] = p
    if p >= _ALPHA:
        row["status"] = "ok"  # the median moved, but within the spread of the values


def _too_little_data(side: str, source: Mapping[str, Any]) -> str | None:
    """Why ``source`` (a run's figures) is too little to judge, or ``None`` (see the module doc).

    Bench sources are exempt: their repetitions are the benchmark's own design."""
    if (source.get("source") or {}).get("kind") != "run":
        return None
    epochs = len(source.get("epochs") or [])
    batches = source.get("batches")
    if batches is None:  # a baseline written before the field existed
        batches = len(source.get("batch_times_s") or [])
    stage = source.get("stage")
    skipped = source.get("skip_epochs")
    if epochs < MIN_EPOCHS_TO_JUDGE:
        return (
            f"the {side} has {epochs} {stage} epoch(s) after skipping {skipped}; the gate needs "
            f"at least {MIN_EPOCHS_TO_JUDGE} (one epoch has no epoch-to-epoch spread, which is "
            "not evidence of no noise): run more epochs (trainer.max_epochs) and record again"
        )
    if int(batches) < MIN_BATCHES:
        return (
            f"the {side} has {batches} {stage} batch(es) in its {epochs} kept epochs; the gate "
            f"needs at least {MIN_BATCHES} to test the batch times: run more epochs or batches "
            "(trainer.max_epochs, trainer.limit_val_batches / limit_train_batches)"
        )
    return None


@dataclass(frozen=True)
class BaselineRow:
    """One figure of :func:`check_baseline`'s result, typed (see its doc for the fields)."""

    figure: str
    status: str
    unit: str = ""
    baseline: float | None = None
    current: float | None = None
    ratio: float | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class BaselineOutcome:
    """:func:`check_baseline`'s result as the verdict reads it.

    Args:
        verdict: ``pass``, ``regression``, ``insufficient data`` or ``not comparable``.
        rows: every compared figure.
        insufficient: why either side has too little data to judge.
    """

    verdict: str
    rows: list[BaselineRow] = field(default_factory=list)
    insufficient: list[str] = field(default_factory=list)

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> BaselineOutcome:
        """Type :func:`check_baseline`'s dict (numbers that are not numbers become ``None``)."""

        def number(value: Any) -> float | None:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            return float(value) if ok else None

        return cls(
            verdict=str(result.get("verdict", "")),
            rows=[
                BaselineRow(
                    figure=str(r.get("figure", "")),
                    status=str(r.get("status", "")),
                    unit=str(r.get("unit") or ""),
                    baseline=number(r.get("baseline")),
                    current=number(r.get("current")),
                    ratio=number(r.get("ratio")),
                    threshold=number(r.get("threshold")),
                )
                for r in result.get("rows") or []
                if isinstance(r, Mapping)
            ],
            insufficient=[str(x) for x in result.get("insufficient") or []],
        )


def check_baseline(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    tolerance_pct: float | None = None,
    *,
    allow_other_machine: bool = False,
) -> dict[str, Any]:
    """Compare ``current`` with ``baseline`` (both as :func:`load_source` returns them).

    Args:
        baseline: the reference figures.
        current: the figures to judge.
        tolerance_pct: minimal relative change that counts, in percent (percentage points for
            fractions); widened per figure to the baseline's epoch-to-epoch spread. ``None`` =
            :data:`DEFAULT_TOLERANCE_PCT` (:data:`DEFAULT_FRACTION_TOLERANCE` points for
            fractions).
        allow_other_machine: compare across machine classes (a warning note) instead of
            answering ``"not comparable"``.

    Returns:
        ``{"verdict": "pass"|"regression"|"insufficient data"|"not comparable", "rows":
        [{"figure", "unit", "baseline", "current", "ratio", "threshold", "threshold_unit",
        "better", "status"}, ...], "notes": [...], "insufficient": [...]}``; ``status`` is
        ``"ok"``, ``"regression"``, ``"improvement"``, ``"missing"`` (in the baseline, absent now:
        a note, not a failure) or ``"unjudged"`` (moved, but too little data to judge: ``moved``
        says which way). ``insufficient`` lists why either side is too little to judge.
    """
    if tolerance_pct is not None and not tolerance_pct >= 0:
        raise ConfigError(f"tolerance_pct must be >= 0, got {tolerance_pct!r}")
    comparable, notes = _comparability(baseline, current, allow_other_machine)
    base_figs = baseline.get("figures") or {}
    cur_figs = current.get("figures") or {}
    wall = (base_figs.get("epoch_wall_s") or {}).get("median") or 0.0
    rows: list[dict[str, Any]] = []
    for name, bfig in base_figs.items():
        fraction = bfig.get("unit") == "fraction"
        default = DEFAULT_FRACTION_TOLERANCE if fraction else DEFAULT_TOLERANCE_PCT
        tolerance = default if tolerance_pct is None else float(tolerance_pct)
        spread = _spread(bfig.get("values") or [], fraction)
        threshold = max(tolerance, spread)
        row: dict[str, Any] = {
            "figure": name,
            "unit": bfig.get("unit", ""),
            "baseline": bfig.get("median"),
            "current": None,
            "ratio": None,
            "threshold": threshold,
            "threshold_unit": "pts" if fraction else "%",
            "better": bfig.get("better", "none"),
            "status": "missing",
            "p_value": None,
        }
        row["widened"] = spread > tolerance
        cfig = cur_figs.get(name)
        if cfig is None or cfig.get("median") is None or bfig.get("median") is None:
            rows.append(row)
            notes.append(f"{name}: in the baseline but not in the current source")
            continue
        floor = PHASE_FLOOR_SHARE * wall if name.startswith("phase_") else 0.0
        status, ratio = _judge(
            float(bfig["median"]), float(cfig["median"]), row["better"], fraction, threshold, floor
        )
        row.update(current=cfig["median"], ratio=ratio, status=status)
        _noise_test(row, bfig["values"], cfig["values"], MIN_EPOCHS_FOR_TEST)
        rows.append(row)
    batch = _batch_row(
        baseline, current, DEFAULT_TOLERANCE_PCT if tolerance_pct is None else tolerance_pct
    )
    if batch is not None:
        rows.append(batch)
    new = sorted(set(cur_figs) - set(base_figs))
    if new:
        notes.append(f"not in the baseline (not judged): {', '.join(new)}")
    insufficient = [
        reason
        for side, source in (("baseline", baseline), ("current run", current))
        if (reason := _too_little_data(side, source)) is not None
    ]
    if insufficient:
        for row in rows:
            if row["status"] in ("regression", "improvement"):
                row["moved"], row["status"] = row["status"], "unjudged"
    if not comparable:
        verdict = "not comparable"
    elif insufficient:
        verdict = "insufficient data"
    elif any(r["status"] == "regression" for r in rows):
        verdict = "regression"
    else:
        verdict = "pass"
    return {"verdict": verdict, "rows": rows, "notes": notes, "insufficient": insufficient}


# -- rendering -----------------------------------------------------------------------------------


def _num(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.3f}"
    return f"{value:.4g}"


_STYLES = {
    "regression": "bold red",
    "improvement": "green",
    "missing": "yellow",
    "unjudged": "yellow",
    "ok": "",
}


def _unit_label(figure: str, unit: str) -> str:
    """The unit as shown. Our ``*_gb`` figures are GiB (2**30 bytes, ``ocr.perf.memory.GB``);
    baselines recorded before the label said so carry "GB" for the same values."""
    return "GiB" if unit == "GB" and figure.endswith("_gb") else unit


def print_check(result: Mapping[str, Any], console: Console | None = None) -> None:
    """A table of :func:`check_baseline`'s rows (what moved first) and its verdict.

    Fits the terminal: the figure name wraps, and when even that is too wide the unit, then the
    threshold, then the baseline value are left out; the status is always shown in full."""
    from rich.console import Console

    from ocr.console import fit_table

    console = console or Console()
    order = {"regression": 0, "improvement": 1, "unjudged": 2, "missing": 3, "ok": 4}
    rows: list[tuple[str, ...]] = []
    styles: list[str] = []
    widened = False
    for row in sorted(result["rows"], key=lambda r: order.get(r["status"], 9)):
        fraction = row.get("threshold_unit") == "pts"
        if row["baseline"] is None or row["current"] is None:
            change = "-"
        elif fraction:
            change = f"{100.0 * (row['current'] - row['baseline']):+.1f} pts"
        elif row["ratio"] is None:
            change = "new"
        else:
            change = f"{100.0 * (row['ratio'] - 1.0):+.1f} %"
        mark = "*" if row.get("widened") else ""
        widened = widened or bool(mark)
        status = row["status"]
        if row.get("moved"):
            status += f" ({row['moved']}?)"
        if row.get("p_value") is not None:
            status += f" (p={row['p_value']:.3f})"
        rows.append(
            (
                row["figure"],
                _unit_label(row["figure"], row["unit"]),
                _num(row["baseline"]),
                _num(row["current"]),
                change,
                f"{row['threshold']:.1f} {row.get('threshold_unit', '%')}{mark}",
                status,
            )
        )
        styles.append(_STYLES.get(row["status"], ""))
    columns = ("figure", "unit", "baseline", "current", "change", "threshold", "status")

    def build(dropped: frozenset[str]) -> Table:
        from rich.table import Table

        table = Table(title="performance check: current vs baseline (medians over epochs)")
        keep = [i for i, c in enumerate(columns) if c not in dropped]
        for i in keep:
            name = columns[i]
            if name == "figure":
                table.add_column(name, overflow="fold", min_width=14)
            else:
                table.add_column(
                    name, justify="left" if name == "status" else "right", no_wrap=True
                )
        for cells, style in zip(rows, styles, strict=True):
            table.add_row(*(cells[i] for i in keep), style=style)
        return table

    console.print(fit_table(build, ("unit", "threshold", "baseline"), console.width))
    if widened:
        console.print("* threshold widened to the baseline's own epoch-to-epoch spread")
    for note in result["notes"]:
        console.print(f"note: {note}")
    for reason in result.get("insufficient") or []:
        console.print(f"insufficient data: {reason}", style="yellow")
    style = {"pass": "bold green", "regression": "bold red"}.get(result["verdict"], "bold yellow")
    console.print(f"verdict: {result['verdict']}", style=style)


def print_baseline(baseline: Mapping[str, Any], console: Console | None = None) -> None:
    """A table of a baseline's figures (median, spread over epochs, values)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    source = baseline.get("source") or {}
    table = Table(
        title=f"baseline {baseline.get('name', '')}: {source.get('kind')} {source.get('path')}, "
        f"stage {baseline.get('stage')}, epochs {baseline.get('epochs')}"
    )
    table.add_column("figure", overflow="fold", min_width=14)
    for column in ("unit", "median", "spread"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("values", overflow="fold", min_width=12)
    for name, fig in (baseline.get("figures") or {}).items():
        fraction = fig.get("unit") == "fraction"
        spread = _spread(fig.get("values") or [], fraction)
        table.add_row(
            name,
            _unit_label(name, fig.get("unit", "")),
            _num(fig.get("median")),
            f"{spread:.1f} {'pts' if fraction else '%'}",
            ", ".join(_num(v) for v in (fig.get("values") or [])[:8]),
        )
    console.print(table)
    times = baseline.get("batch_times_s") or []
    if times:
        console.print(
            f"{len(times)} batch times: median {_num(float(np.median(times)))} s, "
            f"p95 {_num(float(np.quantile(times, 0.95)))} s"
        )
    for note in baseline.get("notes") or []:
        console.print(f"note: {note}")
