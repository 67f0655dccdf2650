"""The resolved run configuration as the run's hyperparameters, in every logger.

The LightningModule's ``hparams`` become the resolved Hydra config (``save_hyperparameters``),
so Lightning itself logs it at fit start to every logger (TensorBoard and CSV ``hparams.yaml``,
the W&B run config) and the performance callbacks copy it into ``perf/run.json``.

TensorBoard's HPARAMS tab needs more than ``hparams.yaml``: an hparams session summary in the
event file, which Lightning writes only together with a metric value (``default_hp_metric``,
off in our logger config because a fake ``hp_metric`` of -1 would be plotted).
:class:`TensorBoardHparams` writes the session at fit start (after the data is prepared, so a
refused dataset leaves the run folder untouched) with the monitored metrics as its columns;
TensorBoard fills them from the scalars the run logs under those tags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

__all__ = [
    "TensorBoardHparams",
    "flatten_hparams",
    "log_tensorboard_hparams",
    "record_config_as_hparams",
]


def record_config_as_hparams(module: L.LightningModule, cfg: DictConfig) -> dict[str, Any]:
    """Make the resolved ``cfg`` the module's hyperparameters and return it as a plain dict.

    Hyperparameters the module saved itself (``save_hyperparameters()`` in its ``__init__``) are
    kept beside the config's top-level keys, so its ``load_from_checkpoint`` still works.
    """
    config = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(config, dict)
    resolved: dict[str, Any] = {str(k): v for k, v in config.items()}
    module.save_hyperparameters({**dict(module.hparams), **resolved})
    return resolved


def flatten_hparams(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{"data/batch_size": 8, ...}`` with values TensorBoard's hparams
    accept (int, float, str, bool); anything else (lists, None) becomes its ``str``."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_hparams(value, prefix=f"{name}/"))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


class TensorBoardHparams(L.Callback):
    """At fit start, write the module's hparams as an hparams session to every TensorBoardLogger,
    with the metrics the callbacks monitor (ModelCheckpoint, EarlyStopping) as its columns.
    Rank zero only (other ranks' experiments are Lightning's dummies)."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        tags = [getattr(cb, "monitor", None) for cb in trainer.callbacks]  # type: ignore[attr-defined]
        monitored = [t for t in tags if isinstance(t, str) and t]
        log_tensorboard_hparams(trainer.loggers, dict(pl_module.hparams), monitored)


def log_tensorboard_hparams(
    loggers: Iterable[Any], hparams: Mapping[str, Any], metric_tags: Iterable[str]
) -> None:
    """Write an hparams session (config + metric columns ``metric_tags``) to each
    TensorBoardLogger's event file. Rank zero only (the loggers' experiments are no-ops
    elsewhere)."""
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    tb_loggers = [lg for lg in loggers if isinstance(lg, TensorBoardLogger)]
    if not tb_loggers:
        return
    # Only the metric names matter: TensorBoard reads their values from the logged scalars.
    metrics = dict.fromkeys(dict.fromkeys(metric_tags), 0.0)
    exp, ssi, sei = hparams_summary(flatten_hparams(hparams), metrics)
    for logger in tb_loggers:
        writer: Any = getattr(logger.experiment, "file_writer", None)
        if not hasattr(writer, "add_summary"):  # rank > 0: Lightning's dummy experiment
            continue
        for summary in (exp, ssi, sei):
            writer.add_summary(summary)
