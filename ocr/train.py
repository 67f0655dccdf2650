"""``ocr-train``: Hydra entry point for training (``python -m ocr.train`` works too).

Examples::

    ocr-train experiment=synthetic_debug
    ocr-train preset=example data.dataset_dir=/data/receipts trainer.devices=4
    ocr-train experiment=synthetic_debug ckpt_path=outputs/.../checkpoints/last.ckpt   # resume
"""

from __future__ import annotations

import logging
from typing import Any

import hydra
import lightning as L
import msgspec
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf
from trainperf.present.console import widen_for_logs
from trainperf.records.run_info import write_run_info

from ocr.checkpoint_path import check_checkpoint_path
from ocr.cli_errors import expected_errors
from ocr.config_errors import composed, config_errors
from ocr.hparams import TensorBoardHparams, record_config_as_hparams
from ocr.run_folder import claim_run_folder, discard_unused_run_folder
from ocr.runtime import (
    apply_torch_threads,
    build_trainer,
    end_distributed,
    interruption_exit_codes,
    register_resolvers,
    summarize_metrics,
)
from ocr.test import EVAL_COMMAND

log = logging.getLogger(__name__)
register_resolvers()


def run_train(cfg: DictConfig) -> dict[str, float]:
    """Train (and optionally test) from a composed config; returns the final metrics."""
    ckpt_path = cfg.get("ckpt_path")
    check_checkpoint_path(ckpt_path, "ckpt_path")  # before anything is built or written
    L.seed_everything(cfg.seed, workers=True)
    apply_torch_threads(cfg.get("torch_threads"))
    datamodule: L.LightningDataModule = hydra.utils.instantiate(cfg.data)
    module: Any = hydra.utils.instantiate(cfg.model)
    module.ocr_config = OmegaConf.to_container(cfg.model, resolve=True)
    record_config_as_hparams(module, cfg)  # -> every logger and perf/run.json

    def claim(callbacks: list[L.Callback], loggers: list[Any] | bool) -> None:
        # Refuse a folder holding another run (resuming it continues its files): before any write.
        claim_run_folder(
            cfg.trainer.get("default_root_dir"), ckpt_path, callbacks=callbacks, loggers=loggers
        )

    trainer = build_trainer(cfg, extra_callbacks=[TensorBoardHparams()], check=claim)
    record_eval_command(trainer)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    if cfg.get("test_after_fit"):
        trainer.test(module, datamodule=datamodule, ckpt_path="best")
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1})
    if trainer.is_global_zero:
        summarize_metrics("training finished", metrics, trainer)
        ckpt_cb = trainer.checkpoint_callback
        if isinstance(ckpt_cb, ModelCheckpoint) and ckpt_cb.best_model_path:
            print(f"best checkpoint: {ckpt_cb.best_model_path}")
    return metrics


def record_eval_command(trainer: L.Trainer) -> None:
    """With the performance callbacks on, record in ``perf/run.json`` how ``trainperf try``
    evaluates this run's checkpoint (ocr-test and its H-mean line; rank zero)."""
    callbacks = getattr(trainer, "callbacks", [])  # set in Trainer.__init__, not declared
    recording = any(type(cb).__module__.startswith("trainperf.") for cb in callbacks)
    if recording and trainer.is_global_zero:
        eval_command = msgspec.to_builtins(EVAL_COMMAND)
        write_run_info(trainer.default_root_dir, {"eval": eval_command})


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    composed()  # errors from here on: Hydra's report, or ours below
    # bad input: one line on stderr and exit 2 (HYDRA_FULL_ERROR=1: the traceback)
    widen_for_logs()  # a log's tables and model summary keep their rows whole
    # a run folder this command made is removed when bad input stops it before training
    with (
        discard_unused_run_folder(cfg.trainer.get("default_root_dir")),
        expected_errors("ocr-train"),
        interruption_exit_codes(),  # SIGTERM: 143, SIGINT: 130
    ):
        run_train(cfg)
    end_distributed()  # after success only (see its docstring)


def main() -> None:
    """``ocr-train``: a mistyped key or config choice is one line and exit 2."""
    with config_errors("ocr-train", "train"):
        _hydra_main()


if __name__ == "__main__":
    main()
