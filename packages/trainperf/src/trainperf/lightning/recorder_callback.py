"""Base of the performance callbacks: subscribe to the trainer's shared ``StageRecorder``.

Each callback turns the recorder's reports into logs.

The hooks are thin on purpose: Lightning's action stream drives the recorder, not these hooks.
They only join and leave it, and hand batch sizes over when the batch did not come from an
instrumented DataLoader.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import lightning as L
import msgspec

from trainperf.errors import warn_off
from trainperf.lightning.batch_hooks import BatchEndHooks
from trainperf.lightning.interruption import announce, interruption_of, set_exit_code
from trainperf.lightning.live_line import PipedPhaseLine
from trainperf.lightning.recorder import StageRecorder
from trainperf.lightning.trial_fit import TrialWindow, open_trial_window
from trainperf.probe.model_layers import model_layers
from trainperf.recording.setting_checks import int_at_least, normalize_stages
from trainperf.recording.subscribers import IntervalProgress
from trainperf.records.epochs import EpochRecord
from trainperf.records.run_info import to_jsonable
from trainperf.records.schema import JsonValue


def _json_safe_hparams(pl_module: L.LightningModule) -> JsonValue:
    """The module's hparams as JSON (mappings and sequences walked, so an OmegaConf config's
    values come out resolved, as reading them resolves them); ``{}`` when they cannot be read."""
    hparams = getattr(pl_module, "hparams", None) or {}
    try:
        return to_jsonable({str(key): value for key, value in dict(hparams).items()})
    except Exception:
        return {}


_NOTE_BATCH_HOOKS = frozenset(
    {"on_train_batch_end", "on_validation_batch_end", "on_test_batch_end"}
)


class RecorderCallback(BatchEndHooks):
    """Base of the performance callbacks: subclasses override :meth:`_on_report` and
    :meth:`_interval_metrics`."""

    def __init__(
        self,
        *,
        enabled: bool,
        log_interval: int,
        stages: Iterable[str],
        sync_cuda: bool,
        track_memory: bool,
        write_run_files: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.enabled = bool(enabled)
        self.log_interval = int_at_least(name, "log_interval", log_interval)
        self.stages = normalize_stages(stages, name)
        self.sync_cuda = bool(sync_cuda)
        self.track_memory = bool(track_memory)
        self.write_run_files = bool(write_run_files)
        self._recorder: StageRecorder | None = None
        self._enabled_run = False  # enabled and not failed, for the current run
        self._warned = False
        self._trial: TrialWindow | None = None  # a `trainperf try` window on this run
        # the phase split as a plain line every 30 s when stdout is not a terminal (monitors
        # that show the split set it at setup: trainperf.lightning.progress_choice)
        self._piped: PipedPhaseLine | None = None

    def _on_report(self, trainer: L.Trainer, report: EpochRecord) -> None:
        """Present a finished stage epoch (log, print)."""

    def _interval_metrics(self, progress: IntervalProgress) -> Mapping[str, float] | None:
        """In-epoch progress metrics (every ``log_interval`` batches), logged by the recorder at
        ``progress.step`` in one call together with the other subscribers'."""
        return None

    def _receive_report(self, report: EpochRecord) -> None:
        if not self._enabled_run or report.stage not in self.stages:
            return
        try:
            self._on_report(self._trainer, report)
        except Exception as exc:
            self._fail(exc)

    def _receive_interval(self, progress: IntervalProgress) -> Mapping[str, float] | None:
        interval = self.log_interval
        if not interval or progress.num_batches % interval or not self._enabled_run:
            return None
        if progress.stage not in self.stages:
            return None
        try:
            return self._interval_metrics(progress)
        except Exception as exc:
            self._fail(exc)
            return None

    def _recorder_off(self) -> None:
        """The shared recorder stopped (a failure, here or on another rank)."""
        self._enabled_run = False
        self._recorder = None

    @property
    def _trainer(self) -> L.Trainer:
        recorder = self._recorder
        trainer = recorder._trainer_ref() if recorder is not None else None
        if trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a trainer")
        return trainer

    def _fail(self, exc: BaseException) -> None:
        """This callback's own error: one warning, then it is off for the run."""
        self._enabled_run = False
        self._piped = None
        if not self._warned:
            self._warned = True
            warn_off(type(self).__name__, exc)
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.fail_subscriber(self)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.enabled or not self.stages:
            return
        self._warned = False  # one warning per run
        # A `trainperf try` trial (TRAINPERF_TRY_WINDOW set): a short fit, before the recorder
        # opens its files (they go to the trial's folder). Bad input there must fail the trial.
        self._trial = open_trial_window(trainer, self)
        try:
            self._enabled_run = True
            self._recorder = recorder = StageRecorder.attach(trainer, self)
            if recorder.files is not None and self.write_run_files:
                recorder.files.run_info(
                    {
                        "lightning_module": type(pl_module).__qualname__,
                        "hparams": _json_safe_hparams(pl_module),
                        # convolutions or not: whether channels_last advice fits the model
                        "model": msgspec.to_builtins(model_layers(pl_module)),
                    }
                )
        except Exception as exc:
            self._fail(exc)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        recorder, self._recorder = self._recorder, None
        self._enabled_run = False
        self._trial = None
        self._piped = None
        if recorder is not None:
            try:
                recorder.detach(self)
            except Exception as exc:
                self._fail(exc)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        recorder, self._recorder = self._recorder, None
        self._enabled_run = False
        self._piped = None
        # SIGTERM / SIGINT: an interruption (from what happened, not from an entry point), with
        # the exit code 128 + signal also for a plain script that has only these callbacks
        interruption = interruption_of(trainer, exception)
        if interruption is not None:
            set_exit_code(exception, interruption)
            announce(trainer, exception, interruption)  # one line: what happened, where
        if recorder is not None:
            try:
                # no gather: the ranks may be out of step
                # the ended epoch's record (it closes when the next one opens); one process
                # only: the gather must not meet ranks that are out of step
                ended = interruption is not None and interruption.between_epochs
                if ended and recorder.world_size == 1:
                    recorder.close_epoch("train")
                status = "failed" if interruption is None else "interrupted"
                recorder.shutdown(status, interruption)
            except Exception as exc:
                self._fail(exc)

    # -- batch sizes for batches that no instrumented DataLoader counted -------------------

    def _untimed_hook(self, hook: str) -> bool:
        """Whether ``hook`` is only our own batch-size bookkeeping (a batch-end hook no subclass
        overrides): timing it would cost more than it takes, so it stays in the enclosing phase."""
        cls = type(self)
        return (
            hook in _NOTE_BATCH_HOOKS
            and getattr(cls, hook) is getattr(RecorderCallback, hook)
            and cls._batch_end is RecorderCallback._batch_end
        )

    def _batch_end(
        self, trainer: L.Trainer, stage: str, outputs: Any, batch: Any, batch_idx: int, loader: int
    ) -> None:
        recorder = self._recorder
        if recorder is not None:
            recorder.note_batch(stage, batch)
        window = self._trial
        if window is not None and stage == "train":
            window.batch_done(trainer, self)
        piped = self._piped
        if piped is not None:
            piped.tick(trainer, stage, batch_idx)
