"""The LightningModule: DBNet training, validation with postprocess + detection metric, and
test/predict that write predictions in the annotation JSON format (raw image frame)."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from trainperf.core.clock import perf_phase

from ocr.data.compact import expand_batch
from ocr.metrics.detection import DetectionMetric
from ocr.models.compile import compile_network, compile_settings
from ocr.models.dbnet import INPUT_MULTIPLE, DBNet
from ocr.models.loss import DBLoss
from ocr.models.postprocess import DBPostProcessor

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[..., Any]


def host_matrices(matrices: Any) -> np.ndarray:
    """A batch's ``inverse_matrices`` as float64 numpy ``(B, 3, 3)``: a compact batch keeps them
    on the host already (no device round trip); a float32 pipeline's tensor is read back."""
    if isinstance(matrices, torch.Tensor):
        return matrices.cpu().numpy()
    return np.asarray(matrices, dtype=np.float64)


def to_raw_frame(polygons: list[np.ndarray], inverse_matrix: np.ndarray) -> list[np.ndarray]:
    """Map canvas-pixel polygons back to the annotation (stored image) frame."""
    out = []
    for poly in polygons:
        pts = np.asarray(poly, dtype=np.float64)
        homo = np.concatenate([pts, np.ones((len(pts), 1))], axis=1) @ inverse_matrix.T
        out.append(homo[:, :2] / homo[:, 2:3])
    return out


class OCRLightningModule(L.LightningModule):
    """DBNet text detection.

    Args:
        net: the detector (``DBNet``); Hydra passes an instantiated module.
        loss: ``DBLoss``; default ``DBLoss()``.
        postprocess: ``DBPostProcessor`` turning probability maps into boxes; default settings
            when ``None``.
        optimizer: factory ``params -> Optimizer`` (Hydra ``_partial_: true``); default AdamW
            with lr 1e-3.
        scheduler: optional factory ``optimizer -> LRScheduler``; when it takes ``total_steps``
            (OneCycleLR) or ``total_iters`` (PolynomialLR) and they are not given, the trainer's
            estimated number of optimizer steps is filled in. Stepped every optimizer step.
            On resume with another length (``trainer.max_epochs`` / ``max_steps``), a filled-in
            schedule is re-planned for the new total and continues at the checkpoint's step:
            the learning rate is the one a run planned for the new length has at that step
            (resuming with the same length continues exactly). A total you set yourself is kept.
        iou_threshold: IoU at which a prediction matches a ground-truth word. Default 0.5.
        predictions_path: where ``test`` writes its predictions JSON; ``None`` = not written.
        channels_last: run the network in the channels-last memory format (NHWC; its weights
            at ``setup``, its input images per step). The same numbers up to rounding, often
            faster convolutions on CPU (oneDNN) and on tensor-core GPUs. Default ``False``.
        compile: ``torch.compile`` the network (:mod:`ocr.models.compile`): ``False`` (eager,
            the default), ``True`` (the inductor backend) or a backend name (``"eager"``,
            ``"aot_eager"``, ...); checked here, applied at ``setup`` (after ``channels_last``).
        compile_mode: inductor's mode (``"reduce-overhead"``, ``"max-autotune"``, ...);
            ``None`` = torch's default.
    """

    def __init__(
        self,
        net: DBNet,
        loss: DBLoss | None = None,
        postprocess: DBPostProcessor | None = None,
        optimizer: OptimizerFactory | None = None,
        scheduler: SchedulerFactory | None = None,
        iou_threshold: float = 0.5,
        predictions_path: str | None = None,
        channels_last: bool = False,
        compile: bool | str | None = False,
        compile_mode: str | None = None,
    ) -> None:
        super().__init__()
        self.net = net
        self.loss_fn = loss if loss is not None else DBLoss()
        self.postprocess = postprocess if postprocess is not None else DBPostProcessor()
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.val_metric = DetectionMetric(iou_threshold=iou_threshold)
        self.test_metric = DetectionMetric(iou_threshold=iou_threshold)
        self.predictions_path = predictions_path
        self.channels_last = bool(channels_last)
        self.compile_settings = compile_settings(compile, compile_mode)
        # Metric key prefix of the test loop: ocr-test sets the split it evaluates ("val/hmean"
        # for split=val), so logs and printouts name the data that was actually scored.
        self.test_metric_prefix = "test"
        # Resolved Hydra config of this module, stored in checkpoints so ``ocr-test`` can rebuild
        # the exact architecture from the checkpoint alone.
        self.ocr_config: dict[str, Any] | None = None
        self._test_predictions: dict[str, dict[str, np.ndarray]] = {}
        self._test_has_gt = False
        # (scheduler, the totals configure_optimizers filled in) for the re-plan on resume.
        self._planned_schedule: tuple[Any, dict[str, int]] | None = None

    @property
    def example_input_array(self) -> Any:
        """One zero image of the configured canvas size, ``(1, 3, S, S)``: what Lightning's
        model summary runs to show real FLOPs, and what the throughput monitor counts FLOPs
        per sample on. ``S`` is the attached datamodule's ``canvas_size`` (rounded up to a
        multiple of 32, as batches are padded); ``None`` (no FLOPs, no error) when the module
        is not attached to a trainer whose datamodule has one, unless set explicitly."""
        if self._example_input_array is not None:
            return self._example_input_array
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer else None
        size = getattr(datamodule, "canvas_size", None)
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            return None
        side = -(-size // INPUT_MULTIPLE) * INPUT_MULTIPLE
        return torch.zeros(1, 3, side, side)

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        self._example_input_array = example

    def setup(self, stage: str) -> None:
        if self.channels_last:
            self.net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if compile_network(self.net, self.compile_settings):
            rank_zero_info(f"model.compile: the network runs {self.compile_settings.describe()}")

    def _run_net(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        result: dict[str, torch.Tensor] = self.net(images)
        return result

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """A compact batch (uint8 images, packed maps: :mod:`ocr.data.compact`) expanded on the
        device into the float32 batch the network and loss read, bit-equal to the float32
        pipeline's; any other batch as it is. Every loop (fit, validate, test, predict) passes
        its batches through here."""
        return expand_batch(batch, channels_last=self.channels_last)

    # -- steps -------------------------------------------------------------------------------
    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        return self._run_net(images)

    def training_step(self, batch: Mapping[str, Any], batch_idx: int) -> torch.Tensor:
        pred = self._run_net(batch["images"])
        loss, parts = self.loss_fn(pred, batch)
        bs = batch["images"].shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=bs)
        self.log_dict({f"train/{k}": v for k, v in parts.items()}, batch_size=bs)
        return loss

    def _detect(
        self, pred: Mapping[str, torch.Tensor]
    ) -> list[tuple[list[np.ndarray], list[float]]]:
        return self.postprocess(pred["prob_map"])

    def validation_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        pred = self._run_net(batch["images"])
        bs = batch["images"].shape[0]
        if "prob_maps" in batch:
            if "binary_map" not in pred:
                pred = dict(
                    pred, binary_map=self.net.binarize(pred["prob_map"], pred["thresh_map"])
                )
            loss, parts = self.loss_fn(pred, batch)
            self.log("val/loss", loss, prog_bar=True, batch_size=bs, sync_dist=True)
            self.log_dict({f"val/{k}": v for k, v in parts.items()}, batch_size=bs, sync_dist=True)
        with perf_phase("postprocess"):
            detections = self._detect(pred)
        with perf_phase("metric"):
            self.val_metric.update([boxes for boxes, _ in detections], batch["polygons"])

    def on_validation_epoch_end(self) -> None:
        with perf_phase("metric"):
            scores = self.val_metric.compute()
        # compute() already summed every rank's counters, so the scores are equal on all ranks:
        # syncing their max changes nothing (exact for any number of ranks) and spares DDP runs
        # Lightning's epoch-level "use sync_dist=True" warning.
        self.log_dict(
            {f"val/{k}": v for k, v in scores.items()},
            prog_bar=True,
            sync_dist=True,
            reduce_fx="max",
        )
        self.val_metric.reset()

    def test_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        pred = self._run_net(batch["images"])
        with perf_phase("postprocess"):
            detections = self._detect(pred)
        gts = batch["polygons"]
        self._test_has_gt = self._test_has_gt or any(len(g) > 0 for g in gts)
        with perf_phase("metric"):
            self.test_metric.update([boxes for boxes, _ in detections], gts)
        inverse = host_matrices(batch["inverse_matrices"])
        for i, (boxes, _scores) in enumerate(detections):
            raw = to_raw_frame(boxes, inverse[i])
            self._test_predictions[batch["filenames"][i]] = {
                f"{k + 1:04d}": p for k, p in enumerate(raw)
            }

    def on_test_epoch_start(self) -> None:
        self._test_predictions = {}
        self._test_has_gt = False

    def on_test_epoch_end(self) -> None:
        has_gt = torch.tensor(float(self._test_has_gt), device=self.device)
        if self.trainer.world_size > 1:
            has_gt = self.trainer.strategy.reduce(has_gt, reduce_op="max")
        if has_gt.item() > 0:
            with perf_phase("metric"):
                scores = self.test_metric.compute()
            self.log_dict(  # equal on all ranks, as in on_validation_epoch_end
                {f"{self.test_metric_prefix}/{k}": v for k, v in scores.items()},
                sync_dist=True,
                reduce_fx="max",
            )
        else:
            warnings.warn(
                "the test split has no ground-truth words: no metric, predictions only",
                stacklevel=1,
            )
        self.test_metric.reset()
        predictions = self._gather_predictions()
        if self.predictions_path and self.trainer.is_global_zero:
            from ocr.data.annotations import write_annotations

            write_annotations(Path(self.predictions_path), predictions)

    def _gather_predictions(self) -> dict[str, dict[str, np.ndarray]]:
        if self.trainer.world_size <= 1 or not torch.distributed.is_initialized():
            return self._test_predictions
        # One object gather at epoch end; keyed by file name, so the padding duplicates of a
        # DistributedSampler collapse.
        shards: list[Any] = [None] * self.trainer.world_size
        torch.distributed.all_gather_object(shards, self._test_predictions)
        merged: dict[str, dict[str, np.ndarray]] = {}
        for shard in shards:
            merged.update(shard)
        return merged

    def predict_step(self, batch: Mapping[str, Any], batch_idx: int) -> list[dict[str, Any]]:
        pred = self._run_net(batch["images"])
        inverse = host_matrices(batch["inverse_matrices"])
        out = []
        for i, (boxes, scores) in enumerate(self._detect(pred)):
            out.append(
                {
                    "filename": batch["filenames"][i],
                    "polygons": to_raw_frame(boxes, inverse[i]),
                    "scores": scores,
                }
            )
        return out

    # -- optimisation ------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        if self.optimizer_factory is None:
            optimizer: torch.optim.Optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
        else:
            optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        kwargs: dict[str, Any] = {}
        params = _accepted_params(self.scheduler_factory)
        total = int(self.trainer.estimated_stepping_batches)
        for name in ("total_steps", "total_iters"):
            if name in params and not _bound(self.scheduler_factory, name):
                kwargs[name] = total
        scheduler = self.scheduler_factory(optimizer, **kwargs)
        self._planned_schedule = (scheduler, kwargs) if kwargs else None
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    def on_train_start(self) -> None:
        # Lightning restores a checkpoint's scheduler state after configure_optimizers (and after
        # on_fit_start): that state carries the total it was planned for, so a resumed run that
        # is longer would decay to 0 at the old end and train every added step at lr 0.
        if self._planned_schedule is None:
            return
        scheduler, totals = self._planned_schedule
        assert self.scheduler_factory is not None
        old = replan_scheduler(scheduler, self.scheduler_factory, totals)
        if old is not None:
            lrs = ", ".join(f"{lr:.3g}" for lr in scheduler.get_last_lr())
            rank_zero_info(
                f"resumed at optimizer step {scheduler.last_epoch}: the learning-rate schedule "
                f"({type(scheduler).__name__}) was planned for {_steps(old)} steps, re-planned "
                f"for {_steps(totals)} (lr now {lrs})"
            )

    # -- checkpoints -------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.ocr_config is not None:
            checkpoint["ocr_config"] = self.ocr_config


def replan_scheduler(
    scheduler: Any, factory: SchedulerFactory, totals: Mapping[str, int]
) -> dict[str, Any] | None:
    """Re-plan ``scheduler`` (restored from a checkpoint) for new ``totals``, keeping its step.

    A fresh scheduler from ``factory`` with the new totals is stepped as many times as the
    restored one was (so chainable schedules such as PolynomialLR, which multiply the previous
    learning rate, and closed-form ones such as OneCycleLR both land on the new plan's value; about
    8 µs per step), and its state is loaded into ``scheduler`` through the public
    ``load_state_dict``. The optimizer's learning rates are set by the fresh scheduler's steps.

    Args:
        scheduler: the scheduler Lightning steps (its state restored from the checkpoint).
        factory: builds a scheduler for ``scheduler.optimizer`` from keyword totals.
        totals: e.g. ``{"total_iters": 600}``: the totals for the run as it is now configured.

    Returns:
        The totals the restored state was planned for, or ``None`` when they already match.
    """
    old = {name: getattr(scheduler, name, None) for name in totals}
    if old == dict(totals):
        return None
    steps = int(scheduler.last_epoch)
    # As at the start of the run: chainable schedules start from the group's current lr, which
    # the checkpoint left at the old plan's end (0 for a polynomial decay).
    for group, base_lr in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, strict=True):
        group["lr"] = base_lr
    fresh = factory(scheduler.optimizer, **totals)
    limit = min(int(v) for v in totals.values())  # OneCycleLR refuses to step past its total
    with warnings.catch_warnings():
        # "lr_scheduler.step() before optimizer.step()": these steps only replay the plan.
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(min(steps, limit)):
            fresh.step()
    scheduler.load_state_dict(fresh.state_dict())
    return old


def _steps(totals: Mapping[str, Any]) -> str:
    return "/".join(str(v) for v in dict.fromkeys(totals.values()))


def _accepted_params(factory: Callable[..., Any]) -> set[str]:
    func = getattr(factory, "func", factory)
    try:
        return set(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return set()


def _bound(factory: Callable[..., Any], name: str) -> bool:
    return name in getattr(factory, "keywords", {})
