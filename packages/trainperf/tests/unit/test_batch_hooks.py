"""BatchEndHooks: Lightning's three batch-end hooks reach one _batch_end with the stage."""

from __future__ import annotations

from typing import Any

import lightning as L
from trainperf.lightning import PerformanceProfilerCallback
from trainperf.lightning.batch_hooks import BatchEndHooks


class Seen(BatchEndHooks):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any, int, int]] = []

    def _batch_end(
        self, trainer: L.Trainer, stage: str, outputs: Any, batch: Any, batch_idx: int, loader: int
    ) -> None:
        self.calls.append((stage, outputs, batch, batch_idx, loader))


def test_each_hook_forwards_its_stage_and_dataloader_index() -> None:
    seen = Seen()
    trainer, module = object(), object()
    seen.on_train_batch_end(trainer, module, "out", "b0", 3)  # type: ignore[arg-type]
    seen.on_validation_batch_end(trainer, module, None, "b1", 4, 1)  # type: ignore[arg-type]
    seen.on_validation_batch_end(trainer, module, None, "b2", 5)  # type: ignore[arg-type]
    seen.on_test_batch_end(trainer, module, None, "b3", 6, 2)  # type: ignore[arg-type]
    assert seen.calls == [
        ("train", "out", "b0", 3, 0),
        ("val", None, "b1", 4, 1),
        ("val", None, "b2", 5, 0),
        ("test", None, "b3", 6, 2),
    ]


def test_a_subclass_overriding_batch_end_is_timed_like_any_callback_work() -> None:
    class Mine(PerformanceProfilerCallback):
        def _batch_end(self, *args: Any) -> None:
            super()._batch_end(*args)
            sum(range(100))

    assert PerformanceProfilerCallback()._untimed_hook("on_train_batch_end")
    assert not Mine()._untimed_hook("on_train_batch_end")
    assert not Mine()._untimed_hook("on_test_batch_end")
