"""ocr.hparams: the resolved config as the module's hyperparameters (issue 15, point 4)."""

from __future__ import annotations

import lightning as L
from omegaconf import OmegaConf

from ocr.hparams import flatten_hparams, record_config_as_hparams


class _Module(L.LightningModule):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()


def test_config_becomes_hparams_resolved_and_the_modules_own_are_kept() -> None:
    cfg = OmegaConf.create({"data": {"batch_size": 8, "eval": "${data.batch_size}"}, "seed": 1})
    module = _Module(width=7)
    resolved = record_config_as_hparams(module, cfg)
    assert resolved == {"data": {"batch_size": 8, "eval": 8}, "seed": 1}
    assert dict(module.hparams) == {"width": 7, **resolved}
    assert module.hparams_initial["data"]["eval"] == 8  # what Lightning logs at fit start


def test_flatten_for_tensorboard() -> None:
    flat = flatten_hparams(
        {"data": {"batch_size": 8, "splits": None, "augment": {"scale": [0.8, 1.1]}}, "x": {}}
    )
    assert flat == {
        "data/batch_size": 8,
        "data/splits": "None",
        "data/augment/scale": "[0.8, 1.1]",
        "x": "{}",
    }
