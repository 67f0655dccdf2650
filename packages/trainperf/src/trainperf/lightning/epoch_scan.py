"""The scans at each training epoch's end: memory creep and recompiles.

At each training epoch's end: memory creep named by attribute (``trainperf.probe.growth_scan``)
and ``torch.compile`` recompiles with their reason (``trainperf.probe.recompiles``). Nothing per
step."""

from __future__ import annotations

import logging
import warnings
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import msgspec
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader

from trainperf.alerts.engine import GrowthSignal
from trainperf.analysis.memory_growth.attributes import GROWTH_EPOCHS, growing
from trainperf.analysis.memory_growth.workers import python_containers
from trainperf.analysis.recompile_rules import recompile_finding
from trainperf.errors import PerfCallbackWarning, warn_off
from trainperf.lightning.trial_fit import perf_root
from trainperf.probe.growth_scan import MAX_ITEMS, scan
from trainperf.probe.recompiles import CompileWatch, ShapeCounter
from trainperf.records.epoch_scans import GrowthRecord, RecompilesRecord
from trainperf.records.files import RecordWriter
from trainperf.records.run_info import write_run_info
from trainperf.records.run_record import RunRecord
from trainperf.records.schema import Record

log = logging.getLogger(__name__)

# Never walked into from an attribute: the run's machinery (the roots are walked on their own).
_OPAQUE: tuple[type, ...] = (L.Trainer, L.LightningDataModule, Callback, DataLoader)


def _base_names() -> frozenset[str]:
    """Attribute names Lightning's own base classes set on an instance (the trainer reference,
    hparams, logging state): not the user's state."""
    return frozenset(vars(L.LightningModule())) | frozenset(vars(L.LightningDataModule()))


class EpochScanCallback(Callback):
    """Finds what no phase shows, at each training epoch's end on rank zero (no collectives):
    memory that creeps, named by attribute (:func:`trainperf.probe.growth_scan.scan` over the
    LightningModule's, the DataModule's and the other callbacks' attributes), and
    ``torch.compile`` recompiles with the guard that failed
    (:class:`trainperf.probe.recompiles.CompileWatch`). Each is a log warning and a verdict finding;
    with a ``ResourceMonitorCallback`` beside it, creep is also its ``memory_creep`` alert. The
    README's section has the details and costs.

    ``PerformanceProfilerCallback()`` and ``ThroughputMonitorCallback()`` carry one at its
    defaults (their ``epoch_scan=True``) and run its hooks for it; pass one there
    (``callbacks=monitoring``) for other settings, or attach it as a callback of its own
    (``callbacks=epoch_scan``): a trainer runs one scan, and one attached on its own is the one
    (:mod:`trainperf.lightning.monitor_defaults`).

    Files (``<run>/perf/``, rank zero): ``growth.jsonl`` and ``recompiles.jsonl``, one line per
    training epoch, and its part of ``run.json`` (with ``memory_growth``, the training dataset's
    Python containers, read once at the start of training). The first write error is one
    warning and turns the writing off.

    Args:
        enabled: ``False`` does nothing in any hook.
        memory_growth: scan attributes at each training epoch's end.
        recompiles: count Dynamo compiles per training epoch.
        batch_shapes: also count the distinct training batch shapes per epoch (the shape of the
            batch's first tensor; one set insertion per batch in ``on_train_batch_start``, the
            only per-step work of this callback, installed only when this is ``True``).
        max_items: items one scan looks at, at most.
        write_run_files: write the two files above.
    """

    def __init__(
        self,
        enabled: bool = True,
        memory_growth: bool = True,
        recompiles: bool = True,
        batch_shapes: bool = False,
        max_items: int = MAX_ITEMS,
        write_run_files: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise ValueError(f"EpochScanCallback: max_items must be an integer >= 1: {max_items!r}")
        self.enabled = bool(enabled)
        self.memory_growth = bool(memory_growth)
        self.recompiles = bool(recompiles)
        self.batch_shapes = bool(batch_shapes)
        self.max_items = max_items
        self.write_run_files = bool(write_run_files)
        self._on = False
        self._warned = False
        self._scans: deque[GrowthRecord] = deque(maxlen=GROWTH_EPOCHS + 1)
        self._named: set[str] = set()  # growing attributes already warned about
        self._compile_warned = False
        self._compiles: list[RecompilesRecord] = []  # this run's records (one per epoch)
        self._watch: CompileWatch | None = None
        self._shapes: ShapeCounter | None = None
        self._skip: frozenset[str] = frozenset()
        self._writers: dict[str, RecordWriter] = {}
        if self.enabled and self.batch_shapes:
            # Installed on the instance only when asked for: at the default Lightning's dispatch
            # reaches the inherited no-op, which the performance clock leaves out.
            self.on_train_batch_start = self._note_batch  # type: ignore[method-assign]

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._on = False
        if not self.enabled or stage != "fit" or not trainer.is_global_zero:
            return
        try:
            self._warned = self._compile_warned = False
            self._scans.clear()
            self._named.clear()
            self._compiles = []
            self._skip = _base_names()
            self._watch = CompileWatch() if self.recompiles else None
            self._shapes = ShapeCounter() if self.batch_shapes else None
            self._writers = {}
            if self.write_run_files:
                root = perf_root(trainer)
                self._guarded(RunRecord.path(root), lambda: write_run_info(root))
                if self.memory_growth:
                    self._writers["growth"] = RecordWriter(GrowthRecord.path(root))
                if self.recompiles:
                    self._writers["recompiles"] = RecordWriter(RecompilesRecord.path(root))
            self._on = True
        except Exception as exc:
            self._fail(exc)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._on = False
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
        self._watch = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The training dataset's large Python containers, once: what forked DataLoader workers
        # copy as they read it (trainperf.analysis.memory_growth.workers; the verdict's
        # worker_memory finding).
        if not (self._on and self.memory_growth and self.write_run_files):
            return
        try:
            dataset = getattr(trainer.train_dataloader, "dataset", None)
            found = python_containers(dataset) if dataset is not None else []
            if found:
                root = perf_root(trainer)
                extra = {"dataset_containers": msgspec.to_builtins(found)}
                self._guarded(RunRecord.path(root), lambda: write_run_info(root, extra))
        except Exception as exc:
            self._fail(exc)

    def _note_batch(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        shapes = self._shapes
        if shapes is not None and self._on:
            shapes.note(batch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._on:
            return
        try:
            epoch = trainer.current_epoch
            if self.memory_growth:
                self._scan(trainer, pl_module, epoch)
            self._count_compiles(epoch)
        except Exception as exc:
            self._fail(exc)

    def _roots(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, object]:
        roots: dict[str, object] = {type(pl_module).__name__: pl_module}
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is not None:
            roots[type(datamodule).__name__] = datamodule
        seen: Counter[str] = Counter()
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if callback is self:
                continue
            name = type(callback).__name__
            seen[name] += 1
            roots[name if seen[name] == 1 else f"{name}#{seen[name]}"] = callback
        return roots

    def _scan(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch: int) -> None:
        result = scan(
            self._roots(trainer, pl_module),
            epoch,
            opaque=_OPAQUE,
            skip=self._skip,
            max_items=self.max_items,
        )
        self._scans.append(result)
        self._write("growth", result)
        found = growing(list(self._scans))
        for g in found:
            if g.path not in self._named:
                self._named.add(g.path)
                log.warning("memory creep (epoch %d): %s", epoch, g.message)
        # the memory_creep alert rule's input, for a resource monitor's engine (alerts.jsonl)
        signal = GrowthSignal(
            epoch=epoch,
            paths=tuple(g.path for g in found),
            message=found[0].message.removesuffix(f" -- {found[0].advice}") if found else "",
            advice=found[0].advice if found else "",
        )
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            signals = getattr(getattr(callback, "monitor", None), "signals", None)
            if signals is not None and hasattr(signals, "growth"):
                signals.growth = signal

    def _count_compiles(self, epoch: int) -> None:
        watch = self._watch
        if watch is None:
            return
        record = watch.take(epoch)
        if self._shapes is not None:
            count, examples = self._shapes.take()
            record = msgspec.structs.replace(record, batch_shapes=count, shape_examples=examples)
        self._compiles.append(record)
        self._write("recompiles", record)
        finding = recompile_finding(self._compiles)
        if finding is not None and not self._compile_warned:
            self._compile_warned = True
            log.warning("%s -- %s", finding.title, finding.suggestion)

    def _write(self, kind: str, record: Record) -> None:
        writer = self._writers.get(kind)
        if writer is not None:
            self._guarded(writer.path, lambda: writer.write(record))

    def _guarded(self, path: Path, write: Callable[[], object]) -> None:
        """Run ``write``; the first error is one warning and turns the writing off."""
        try:
            write()
        except (OSError, TypeError, ValueError) as exc:
            self._writers.clear()
            self.write_run_files = False
            warnings.warn(
                f"EpochScanCallback: cannot write {path} ({type(exc).__name__}: {exc}); "
                "the log warnings go on",
                PerfCallbackWarning,
                stacklevel=3,
            )

    def _fail(self, exc: BaseException) -> None:
        """An internal error: one warning, then this callback is off for the run."""
        self._on = False
        if not self._warned:
            self._warned = True
            warn_off("EpochScanCallback", exc)
