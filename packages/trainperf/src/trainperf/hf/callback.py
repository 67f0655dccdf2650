"""``trainperf.hf.PerfCallback``: the performance monitors for a Hugging Face ``Trainer``.

One callback passed to the Trainer::

    from trainperf.hf import PerfCallback
    trainer = Trainer(model=model, args=args, train_dataset=..., callbacks=[PerfCallback()])
    # or: trainer.add_callback(PerfCallback())

It records the run folder the other adapters write (``perf/run.json``, ``perf/epochs.jsonl``,
...) under ``args.output_dir`` (or the folder it is given) on a
:class:`~trainperf.recording.run_recorder.RunRecorder`: a ``train`` window per epoch, a ``val``
window per evaluation (inside training it pauses the train window). Phases (the clock's names),
summing to each window's wall time, from the ``TrainerCallback`` events in their order
(``FIELD_NOTES.md``, "Other training loops") and hooks on the ``model`` the events carry:

- ``data_wait``: from one step's end (or the epoch's begin) to the next ``on_step_begin``: the
  Trainer fetches the step's batches (all ``gradient_accumulation_steps`` of them) there; in an
  evaluation, from one ``on_prediction_step`` to the next forward;
- ``callbacks`` (logging: the loss brought to the host and every callback's ``on_log``),
  ``val`` windows (evaluation) and ``checkpoint`` (saving) are told apart within that gap by the
  ``TrainerControl`` flags set at ``on_step_end`` / ``on_epoch_end`` and their own events;
- ``transfer``: ``on_step_begin`` (or a substep's end) to the forward (the batch moved to the
  device);
- ``forward``: the model's ``register_forward_pre_hook`` / ``register_forward_hook`` (the
  module the events carry; the wrapper accelerate or DDP puts around it calls it);
- ``backward``: forward's end to the next event (``on_substep_end`` or
  ``on_pre_optimizer_step``): the loss's backward, with gradient clipping;
- ``optimizer``: ``on_pre_optimizer_step`` to ``on_step_end`` (the step, the learning-rate
  scheduler, ``zero_grad``);
- ``metric``: an evaluation's tail after its last batch (gathering, ``compute_metrics``);
- ``unattributed``: the rest.

A batch is a micro-batch (``on_substep_end`` / ``on_step_end``); ``global_step`` counts optimizer
steps (one per ``gradient_accumulation_steps`` batches), as ``TrainerState.global_step`` does.
Under ``torchrun`` / ``accelerate launch`` every process records its rank and rank zero writes
the gathered records (the exchange runs over ``torch.distributed``'s default group).
"""

from __future__ import annotations

import atexit
import functools
import os
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from trainperf.core.trial_window import TryWindow
from trainperf.errors import PerfCallbackWarning
from trainperf.hf.trial_arguments import KnobNotApplicable, apply_knobs, refuse
from trainperf.hf.versions import check_versions
from trainperf.recording.run_recorder import RunRecorder, batch_size_of
from trainperf.records.run_record import HfTrainerSetup

__all__ = ["PerfCallback"]

_WHO = "trainperf.hf.PerfCallback"
_version_said = False


def _say_version_once() -> None:
    global _version_said
    if _version_said:
        return
    _version_said = True
    reason = check_versions()
    if reason is not None:
        warnings.warn(f"{_WHO}: {reason}", PerfCallbackWarning, stacklevel=3)


E = TypeVar("E", bound=Callable[..., None])


def _guarded(event: E) -> E:
    """An event that never raises into the Trainer: an internal error turns recording off (one
    warning); only a trial's refused knob ends the run, on purpose."""

    @functools.wraps(event)
    def run(self: PerfCallback, *args: Any, **kwargs: Any) -> None:
        try:
            event(self, *args, **kwargs)
        except KnobNotApplicable:
            raise
        except Exception as exc:
            self._fail(exc)

    return run  # type: ignore[return-value]


def _precision(args: TrainingArguments) -> str:
    if getattr(args, "bf16", False):
        return "bf16-mixed"
    if getattr(args, "fp16", False):
        return "16-mixed"
    return "32-true"


def _setup(args: TrainingArguments) -> HfTrainerSetup:
    import transformers

    optim = getattr(args, "optim", None)
    return HfTrainerSetup(
        dataloader_num_workers=args.dataloader_num_workers,
        dataloader_pin_memory=args.dataloader_pin_memory,
        dataloader_persistent_workers=args.dataloader_persistent_workers,
        dataloader_prefetch_factor=args.dataloader_prefetch_factor,
        bf16=args.bf16,
        fp16=args.fp16,
        optim=str(getattr(optim, "value", optim)) if optim is not None else None,
        torch_compile=args.torch_compile,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        version=str(transformers.__version__),
    )


class PerfCallback(TrainerCallback):
    """Records a ``Trainer``'s training and evaluation into a run folder (module docstring).

    Args:
        run_dir: the run folder (``perf/`` goes inside); default ``args.output_dir``. In a
            ``trainperf try`` trial the trial's own folder instead.
        track_memory: memory peaks per window; default True.
        sync_cuda: synchronize the device at every phase switch (opt-in); default False.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        *,
        track_memory: bool = True,
        sync_cuda: bool = False,
    ) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.track_memory = track_memory
        self.sync_cuda = sync_cuda
        self.window = TryWindow.from_env()
        self.recorder: RunRecorder | None = None
        self._knobs_applied = False
        self._model: torch.nn.Module | None = None
        self._handles: list[Any] = []
        self._stage = ""  # "train" or "val" while its window is open
        self._train_epochs = 0
        self._evals = 0
        self._eval_batches = 0
        self._samples: int | None = None  # the current batch's, seen at its first forward
        self._before_forward = ""
        self._last_logged = -1
        self._trial_batches = 0
        self._args: TrainingArguments | None = None
        self._eval_only = False  # the open evaluation runs outside training
        self._outer = ""  # the stage an evaluation paused

    # -- set-up ----------------------------------------------------------------------------

    @_guarded
    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        _say_version_once()
        self._args = args
        model = kw.get("model")
        if isinstance(model, torch.nn.Module):
            self._hook(model)
        window = self.window
        if window is None or self._knobs_applied:
            return
        self._knobs_applied = True
        rank0 = int(os.environ.get("RANK", "0")) == 0
        if rank0 and not window.opened_by_ocr_perf_try():
            warnings.warn(window.announcement(), UserWarning, stacklevel=2)
        apply_knobs(window.perf_dir, window.knobs, args, write=rank0)

    def _folder(self, args: TrainingArguments) -> Path:
        if self.window is not None:
            return self.window.perf_dir
        if self.run_dir is not None:
            return self.run_dir
        return Path(args.output_dir or "trainer_output")

    def _open(self, args: TrainingArguments, model: Any, run: str) -> RunRecorder | None:
        """The recorder, started now for ``run`` (``fit`` / ``validate``) when none runs."""
        if self.recorder is not None:
            return self.recorder
        _say_version_once()
        if self.window is not None and self.window.knobs and not self._knobs_applied:
            rank0 = int(os.environ.get("RANK", "0")) == 0
            raise refuse(
                self.window.perf_dir,
                self.window.knobs,
                "PerfCallback was added after the Trainer was built (trainer.add_callback), so it "
                "could not set the TrainingArguments before the DataLoader was made: pass it as "
                "Trainer(callbacks=[PerfCallback()])",
                rank0,
            )
        device = getattr(args, "device", None)
        rec = RunRecorder(
            self._folder(args),
            device=device,
            track_memory=self.track_memory,
            sync_cuda=self.sync_cuda,
            run=run,
            who=_WHO,
        )
        self.recorder = rec
        info: dict[str, Any] = {
            "framework": "hf",
            "hf_trainer": msgspec.to_builtins(_setup(args)),
            "precision": _precision(args),
        }
        rec.run_info(info)
        if isinstance(model, torch.nn.Module):
            self._hook(model)
        ref = weakref.ref(self)
        atexit.register(_close_at_exit, ref)
        return rec

    def _hook(self, model: torch.nn.Module) -> None:
        if self._model is model:
            return
        self._unhook()
        self._model = model
        self._handles.append(
            model.register_forward_pre_hook(self._forward_pre, prepend=True, with_kwargs=True)
        )
        self._handles.append(model.register_forward_hook(self._forward_post))

    def _unhook(self) -> None:
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()
        self._model = None

    # -- the model's hooks -----------------------------------------------------------------

    def _forward_pre(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        rec = self.recorder
        try:
            if rec is None:
                # an evaluation outside training (trainer.evaluate()): its window opens here
                if module.training or torch.is_grad_enabled() or self._args is None:
                    return
                rec = self._open(self._args, module, "validate")
                if rec is None:
                    return
                self._eval_only = True
                self._open_eval()
            if not rec.measuring:
                return
            if self._samples is None:
                self._samples = batch_size_of(kwargs) or batch_size_of(args)
            self._before_forward = rec.switch("forward")
        except Exception as exc:
            self._fail(exc)

    def _forward_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        rec = self.recorder
        if rec is None or not rec.measuring:
            return
        try:
            if self._stage == "train" and module.training and torch.is_grad_enabled():
                rec.switch("backward")
            else:
                rec.switch(self._before_forward or "unattributed")
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._unhook()
        self._args = None  # no later evaluation opens a recording either
        if self.recorder is not None:
            self.recorder._fail(exc)
        else:
            warnings.warn(
                f"{_WHO}: performance recording failed and is off for the rest of this run "
                f"({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=3,
            )

    # -- training --------------------------------------------------------------------------

    @_guarded
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._args = args
        rec = self._open(args, kw.get("model"), "fit")
        if rec is None:
            return
        loader = kw.get("train_dataloader")
        base = getattr(loader, "base_dataloader", loader)  # accelerate's DataLoaderShard wraps it
        rec.instrument(base, "train")

    @_guarded
    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        rec = self.recorder
        if rec is None:
            return
        self._close_stage("val")
        self._close_stage("train")
        rec.open_epoch("train", self._train_epochs)
        self._train_epochs += 1
        self._stage = "train"
        rec.switch("data_wait")

    @_guarded
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is not None:
            self.recorder.switch("transfer")

    @_guarded
    def on_substep_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is not None:
            self._train_batch(state, control)
            self.recorder.switch("transfer")  # the next batch of the step, fetched already

    @_guarded
    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is not None:
            self.recorder.switch("optimizer")

    @_guarded
    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is None:
            return
        self._train_batch(state, control)
        self._trial_control(control)
        self._next(state, control)

    def _train_batch(self, state: TrainerState, control: TrainerControl) -> None:
        rec = self.recorder
        assert rec is not None
        samples, self._samples = self._samples, None
        rec.batch_end("train", samples, int(state.global_step))  # optimizer steps, not batches
        window = self.window
        if window is not None:
            self._trial_batches += 1
            if self._trial_batches >= window.total_batches:
                control.should_training_stop = True

    def _trial_control(self, control: TrainerControl) -> None:
        """In a trial: no checkpoints, no evaluation and no logging unless the window keeps
        them."""
        window = self.window
        if window is None:
            return
        if "checkpoint" not in window.keep:
            control.should_save = False
        if "val" not in window.keep:
            control.should_evaluate = False
        if "loggers" not in window.keep:
            control.should_log = False

    def _next(self, state: TrainerState, control: TrainerControl) -> None:
        """What the Trainer does next between two steps, from the control flags: log, evaluate,
        save, else fetch the next batches."""
        rec = self.recorder
        if rec is None or self._stage == "val":
            return
        if control.should_log and state.global_step > self._last_logged:
            rec.switch("callbacks")
        elif control.should_evaluate:
            self._open_eval()
        elif control.should_save:
            rec.switch("checkpoint")
        else:
            rec.switch("data_wait")

    @_guarded
    def on_log(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is None:
            return
        if self._stage == "val":
            self.recorder.switch("metric")  # the evaluation's metrics logged, then on_evaluate
            return
        self._last_logged = int(state.global_step)
        self._next(state, control)

    @_guarded
    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is not None:
            self._next(state, control)

    @_guarded
    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.recorder is not None:
            self._trial_control(control)
            self._next(state, control)

    @_guarded
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._finish("finished")

    # -- evaluation ------------------------------------------------------------------------

    def _open_eval(self) -> None:
        rec = self.recorder
        if rec is None:
            return
        rec.open_epoch("val", self._evals)
        self._evals += 1
        self._eval_batches = 0
        self._outer = self._stage
        self._stage = "val"
        rec.switch("data_wait")  # the evaluation's set-up and first batch

    @_guarded
    def on_prediction_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        rec = self.recorder
        if rec is None or self._stage != "val":
            return
        samples, self._samples = self._samples, None
        rec.batch_end("val", samples)
        self._eval_batches += 1
        loader = kw.get("eval_dataloader")
        try:
            last = loader is not None and self._eval_batches >= len(loader)
        except TypeError:  # an iterable without a length
            last = False
        rec.switch("metric" if last else "data_wait")

    @_guarded
    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._end_eval(state, control)

    @_guarded
    def on_predict(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: Any = None,
        **kw: Any,
    ) -> None:
        self._end_eval(state, control)

    def _end_eval(self, state: TrainerState, control: TrainerControl) -> None:
        if self.recorder is None or self._stage != "val":
            return
        self._close_stage("val")
        if self._eval_only:
            self._eval_only = False
            self._finish("finished")
            return
        self._next(state, control)

    def _close_stage(self, stage: str) -> None:
        rec = self.recorder
        if rec is None or rec.windows.states[stage].epoch is None:
            return
        rec.close_epoch(stage)
        if stage == "val":
            self._stage = self._outer if self._outer == "train" else ""
            self._outer = ""
        else:
            self._stage = ""

    # -- the end ---------------------------------------------------------------------------

    def _finish(self, status: str, in_step: bool = True) -> None:
        """End the recording; its open windows are closed (and exchanged across ranks) only
        when the ranks are ``in_step`` or there is one."""
        rec = self.recorder
        if rec is None:
            return
        if in_step or rec.world_size <= 1:
            self._close_stage("val")
            self._close_stage("train")
        self.recorder = None
        rec.close(status)


def _close_at_exit(ref: weakref.ref[PerfCallback]) -> None:
    """A training that raised never reaches ``on_train_end``: its recording ends as failed. An
    evaluation-only recording still open (a forward in eval mode outside ``Trainer.evaluate``
    opened it) ends as finished. Under several ranks no exchange at exit: the ranks may be out
    of step (one raised, or only one ran that forward), and the gather would never return."""
    callback = ref()
    if callback is not None and callback.recorder is not None:
        callback._finish("finished" if callback._eval_only else "failed", in_step=False)
