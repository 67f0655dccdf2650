"""Lightning's three batch-end hooks as one method with the stage.

For callbacks that do the same thing at the end of a training, validation and test batch."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback


class BatchEndHooks(Callback):
    """Forwards ``on_{train,validation,test}_batch_end`` to :meth:`_batch_end`."""

    def _batch_end(
        self, trainer: L.Trainer, stage: str, outputs: Any, batch: Any, batch_idx: int, loader: int
    ) -> None:
        """``stage``: ``"train"``, ``"val"`` or ``"test"``; ``loader``: the dataloader index."""

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._batch_end(trainer, "train", outputs, batch, batch_idx, 0)

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end(trainer, "val", outputs, batch, batch_idx, dataloader_idx)

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end(trainer, "test", outputs, batch, batch_idx, dataloader_idx)
