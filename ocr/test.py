"""``ocr-test``: evaluate a checkpoint and write predictions (``python -m ocr.test``).

The architecture is rebuilt from the config stored in the checkpoint (so the weights always fit);
data, trainer and loggers come from the composed config, like ``ocr-train``::

    ocr-test experiment=synthetic_debug checkpoint_path=outputs/.../checkpoints/last.ckpt
    ocr-test experiment=synthetic_debug checkpoint_path=... split=val   # reproduce val H-mean

Predictions go to ``predictions_path`` (default ``<run dir>/predictions.json``) in the
annotation JSON format, in the coordinates of the stored images.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from rich.table import Table
from trainperf.present.console import print_renderable, widen_for_logs
from trainperf.records.run_record import EvalCommand

from ocr.cli_errors import expected_errors
from ocr.config_errors import composed, config_errors
from ocr.errors import CheckpointError, ConfigError, MissingPathError
from ocr.runtime import (
    apply_torch_threads,
    build_trainer,
    end_distributed,
    interruption_exit_codes,
    register_resolvers,
)

log = logging.getLogger(__name__)
register_resolvers()

#: The line with the split's H-mean that ocr-test prints (and ``trainperf try`` reads back).
HMEAN_LINE = "H-mean on split '{split}': {hmean:.4f}"

#: How ``trainperf try`` checks an eval-time change (postprocess limits) on a training run's
#: checkpoint: ocr-test on the validation split with the run's overrides (its training-only
#: keys left out) and a throughput callback recording the test stage's speed; the quality
#: figure is the H-mean line. ``ocr-train`` records it in ``perf/run.json`` (``"eval"``).
EVAL_COMMAND = EvalCommand(
    name="ocr-test",
    launcher=["-m", "ocr.test"],
    overrides=[
        "checkpoint_path={checkpoint}",
        "split=val",
        "+callbacks.try_throughput={_target_:'trainperf.lightning.ThroughputMonitorCallback',"
        "flops:false,peak_memory:false}",
    ],
    drop_keys=["callbacks", "ckpt_path", "test_after_fit"],
    quality=r"H-mean on split '[^']*': ([0-9.]+)",
    quality_name="H-mean",
)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a Lightning checkpoint with a clear error when it is missing or not a checkpoint."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise MissingPathError(f"checkpoint_path: no such file: {p}")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises several unrelated types for a bad file
        raise CheckpointError(f"checkpoint_path: {p} is not a readable checkpoint ({exc})") from exc
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(
            f"checkpoint_path: {p} has no 'state_dict' (not a Lightning checkpoint)"
        )
    return ckpt


def run_test(cfg: DictConfig) -> dict[str, float]:
    """Evaluate ``cfg.checkpoint_path`` on the test split; returns the logged metrics."""
    if not cfg.get("checkpoint_path"):
        raise ConfigError("checkpoint_path is required, e.g. ocr-test checkpoint_path=last.ckpt")
    L.seed_everything(cfg.seed, workers=True)
    apply_torch_threads(cfg.get("torch_threads"))
    ckpt = load_checkpoint(cfg.checkpoint_path)
    model_cfg = cfg.model
    if "ocr_config" in ckpt:
        stored = OmegaConf.create(ckpt["ocr_config"])
        # Architecture from the checkpoint; evaluation knobs (postprocess, IoU) from the CLI.
        model_cfg = OmegaConf.merge(cfg.model, {"net": stored.net})
    module: Any = hydra.utils.instantiate(model_cfg)
    module.load_state_dict(ckpt["state_dict"])
    module.predictions_path = cfg.get("predictions_path")
    datamodule: Any = hydra.utils.instantiate(cfg.data)
    # `split=val` evaluates another split with the same (target-free) test loop; the metrics are
    # named after that split ("val/hmean"), in the loggers and in the printout.
    split = cfg.get("split") or datamodule.splits["test"]
    datamodule.splits["test"] = split
    module.test_metric_prefix = split
    trainer = build_trainer(cfg)
    # verbose=False: Lightning's own results table would print the metrics a second time
    results = trainer.test(module, datamodule=datamodule, verbose=False)
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    if trainer.is_global_zero:
        _print_results(split, metrics, trainer)
        if module.predictions_path:
            print(f"predictions: {module.predictions_path}")
    return metrics


def _print_results(split: str, metrics: dict[str, float], trainer: L.Trainer) -> None:
    """One table of the split's metrics, the H-mean line and the run directory (rank zero)."""
    table = Table(title=f"ocr-test on split '{split}'")
    table.add_column("metric")
    table.add_column("value", justify="right")
    scores = sorted(k for k in metrics if k.startswith(f"{split}/"))  # not performance/...
    for key in scores:
        table.add_row(key, f"{metrics[key]:.4f}")
    if scores:
        print_renderable(table)
    if f"{split}/hmean" in metrics:
        print(HMEAN_LINE.format(split=split, hmean=metrics[f"{split}/hmean"]))
    else:
        print(f"split '{split}' has no ground-truth words: predictions only, no metric")
    # Not trainer.log_dir: under DDP it is a broadcast, and this runs on rank zero only.
    print(f"run directory: {trainer.default_root_dir}")


@hydra.main(version_base="1.3", config_path="configs", config_name="test")
def _hydra_main(cfg: DictConfig) -> None:
    composed()  # errors from here on: Hydra's report, or ours below
    # bad input: one line on stderr and exit 2 (HYDRA_FULL_ERROR=1: the traceback)
    widen_for_logs()  # a log's tables and model summary keep their rows whole
    with expected_errors("ocr-test"), interruption_exit_codes():  # SIGTERM: 143, SIGINT: 130
        run_test(cfg)
    end_distributed()  # after success only (see its docstring)


def main() -> None:
    """``ocr-test``: a mistyped key or config choice is one line and exit 2."""
    with config_errors("ocr-test", "test"):
        _hydra_main()


if __name__ == "__main__":
    main()
