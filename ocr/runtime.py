"""Shared helpers of the Hydra entry points: resolvers, callback/logger construction, summary."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table


def auto_precision() -> str:
    """Mixed precision on CUDA, full precision elsewhere (fp16 autocast is unsupported on CPU)."""
    return "16-mixed" if torch.cuda.is_available() else "32-true"


def register_resolvers() -> None:
    """``${ocr_auto_precision:}`` for trainer configs; idempotent."""
    if not OmegaConf.has_resolver("ocr_auto_precision"):
        OmegaConf.register_new_resolver("ocr_auto_precision", auto_precision)


def _instantiate_group(group: Any) -> list[Any]:
    if not group:
        return []
    out = []
    for name, node in group.items():
        if node is None or (isinstance(node, Mapping | DictConfig) and "_target_" not in node):
            continue  # an entry switched off with `callbacks.x=null`
        try:
            out.append(hydra.utils.instantiate(node))
        except Exception as exc:
            raise ValueError(f"could not build '{name}' ({node.get('_target_')}): {exc}") from exc
    return out


def build_callbacks(cfg: DictConfig) -> list[L.Callback]:
    """Instantiate ``cfg.callbacks``; ``trainer.enable_progress_bar=false`` drops progress bars
    (Lightning refuses the combination otherwise)."""
    from lightning.pytorch.callbacks import ProgressBar

    from ocr.console import plain_progress_when_not_a_terminal

    callbacks = _instantiate_group(cfg.get("callbacks"))
    callbacks = plain_progress_when_not_a_terminal(callbacks)  # log lines when not a terminal
    if cfg.get("trainer", {}).get("enable_progress_bar") is False:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    return callbacks


def build_loggers(cfg: DictConfig) -> list[Any] | bool:
    loggers = _instantiate_group(cfg.get("logger"))
    return loggers if loggers else False


def wandb_offline_default() -> bool:
    """WandB runs offline unless the user configured online mode and an API key exists."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        return True
    if os.environ.get("WANDB_API_KEY"):
        return False
    netrc = Path("~/.netrc").expanduser()
    return not (netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace"))


def make_wandb_logger(offline: bool | None = None, **kwargs: Any) -> Any:
    """``WandbLogger`` that is offline when there is no network/API key (``offline=None``)."""
    from lightning.pytorch.loggers import WandbLogger

    return WandbLogger(offline=wandb_offline_default() if offline is None else offline, **kwargs)


def summarize_metrics(title: str, metrics: Mapping[str, float], trainer: L.Trainer) -> None:
    """Print the key metrics as a table. Rank zero only (callers check), so nothing here may
    touch a collective."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in sorted(metrics):
        if key.startswith(("val/", "test/")):
            table.add_row(key, f"{metrics[key]:.4f}")
    Console().print(table)
    if "val/hmean" in metrics:
        print(f"VAL H-mean: {metrics['val/hmean']:.4f}")
    # Not trainer.log_dir: under DDP it is a broadcast, and this runs on rank zero only.
    print(f"run directory: {trainer.default_root_dir}")
