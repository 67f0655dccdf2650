"""Shared helpers of the Hydra entry points: resolvers, callback/logger construction, summary."""

from __future__ import annotations

import difflib
import inspect
import os
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from rich.table import Table
from trainperf.present.console import make_console
from trainperf.records.run_info import cpu_bf16, write_run_info

import ocr.configs  # noqa: F401  (registers the trainer/lightning config node)
from ocr.errors import ConfigError, InputError
from ocr.noise import quiet_console


def cuda_bf16() -> bool:
    """Whether the first CUDA device computes bf16 natively (compute capability 8.0 or newer:
    A100, H100, H200...); False without CUDA. Initialises CUDA in this process."""
    try:
        major, _ = torch.cuda.get_device_capability(0)
    except (RuntimeError, AssertionError, ValueError):
        return False
    return major >= 8


def auto_precision(cpu: str = "") -> str:
    """``${ocr_auto_precision:}``: mixed precision on CUDA, bf16 where the device computes it
    natively (:func:`cuda_bf16`; measured on the H200, 640 px, batch 16: with channels-last and
    fused AdamW, 193 -> 225-241 samples/s in epoch 0, GPU work ~60 -> ~38 ms per batch), else
    16-mixed; full precision elsewhere (fp16 autocast is unsupported on CPU).
    ``${ocr_auto_precision:bf16}``: bf16 mixed precision on a CPU with native bf16 dot products
    too (``avx512_bf16`` / ``amx_bf16``; emulated bf16 would be slower than float32, so other
    CPUs keep 32-true)."""
    if cpu not in ("", "bf16"):
        raise ConfigError(f"ocr_auto_precision takes nothing or 'bf16', got {cpu!r}")
    if torch.cuda.is_available():
        return "bf16-mixed" if cuda_bf16() else "16-mixed"
    return "bf16-mixed" if cpu == "bf16" and cpu_bf16() else "32-true"


def auto_channels_last() -> bool:
    """``${ocr_auto_channels_last:}``: True on CUDA (tensor-core convolutions want NHWC; on the
    H200 the backward fell from 27-31 to 17-20 ms per batch), False elsewhere (a CPU default
    stays as measured there; ``experiment=synthetic_debug`` sets it true, measured 1.23-1.25x
    on 2 cores)."""
    return bool(torch.cuda.is_available())


def auto_fused() -> bool | None:
    """``${ocr_auto_fused:}``: the optimizer's ``fused`` argument: True on CUDA (one kernel for
    the whole AdamW step; on the H200 the optimizer step fell from 16 to 1.3-1.6 ms per batch),
    None elsewhere (torch's default implementation: the CPU default as measured)."""
    return True if torch.cuda.is_available() else None


def apply_torch_threads(value: Any) -> None:
    """``torch_threads`` of the config: ``torch.set_num_threads(value)``; ``None`` leaves torch's
    default. Anything but a positive integer is a ``ValueError`` naming the key."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"torch_threads must be a positive integer or null, got {value!r}")
    torch.set_num_threads(value)


def register_resolvers() -> None:
    """``${ocr_auto_precision:}`` for trainer configs, ``${ocr_auto_channels_last:}`` and
    ``${ocr_auto_fused:}`` for the model's; idempotent. (Importing this module has
    already registered the ``trainer/lightning`` node, see :mod:`ocr.configs`.)"""
    for name, resolver in (
        ("ocr_auto_precision", auto_precision),
        ("ocr_auto_channels_last", auto_channels_last),
        ("ocr_auto_fused", auto_fused),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def _instantiate_group(group: Any, group_name: str) -> list[Any]:
    """Build every entry of ``cfg.<group_name>``. ``null`` entries (``callbacks.x=null``) and
    entries with ``enabled: false`` are skipped: a disabled callback or logger is never built, so
    it costs nothing (unless it carries an enabled nested entry: :func:`_carries_enabled_entry`).
    Any other entry must have a ``_target_``: a leftover such as
    ``+callbacks.profiler.enabled=true`` without the profiler's config is an error naming the key,
    not a silent no-op."""
    if not group:
        return []
    out = []
    for name, node in group.items():
        if node is None:
            continue  # an entry switched off with `callbacks.x=null`
        key = f"{group_name}.{name}"
        if not isinstance(node, Mapping | DictConfig) or "_target_" not in node:
            shown = OmegaConf.to_yaml(node).strip() if isinstance(node, DictConfig) else repr(node)
            raise ConfigError(
                f"{key} has no _target_ (got: {shown}), so it would build nothing. It is not an "
                f"entry of the chosen {group_name} config: check the key's spelling, choose a "
                f"{group_name} config that defines it (ocr-train --cfg job shows the composed "
                f"config), or remove it."
            )
        if node.get("enabled", True) is False and not _carries_enabled_entry(node):
            continue
        try:
            out.append(hydra.utils.instantiate(node))
        except Exception as exc:
            problem = _config_problem(exc, node)
            if problem is None:
                raise  # a bug inside the constructor: it keeps its traceback
            raise ConfigError(f"could not build {key} ({node.get('_target_')}): {problem}") from exc
    return out


def _carries_enabled_entry(node: Mapping[str, Any] | DictConfig) -> bool:
    """Whether ``node`` holds an entry of its own with a ``_target_`` and ``enabled`` that is
    not false (the ``epoch_scan`` nested in ``callbacks=monitoring``'s
    ``performance_profiler``): a disabled callback carrying one is still built, so the nested
    one runs. A nested settings object (the profiler's ``schedule`` and ``trace``) has no
    ``enabled`` and carries nothing."""
    raw = OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else node
    if not isinstance(raw, Mapping):
        return False
    nested = [entry for entry in raw.values() if isinstance(entry, Mapping) and "_target_" in entry]
    return any("enabled" in entry and entry["enabled"] is not False for entry in nested)


def _config_problem(exc: Exception, node: Mapping[str, Any] | DictConfig) -> str | None:
    """What is wrong with the config entry ``node`` whose instantiation raised ``exc``, or
    ``None`` when the config is not at fault (a bug inside the constructor). The config is at
    fault when the constructor rejected a value (an :class:`~ocr.errors.InputError`), when its
    arguments do not fit the target's signature (a misspelt or missing argument), or when the
    ``_target_`` names no module or attribute."""
    from hydra.errors import InstantiationException

    cause = exc.__cause__ if isinstance(exc, InstantiationException) else exc
    if isinstance(cause, InputError):
        return str(cause)
    target = str(node.get("_target_"))
    if isinstance(cause, ImportError):  # Hydra's, from the ModuleNotFoundError of a bad path
        inner = cause.__cause__ if isinstance(cause.__cause__, ImportError) else cause
        missing = inner.name if isinstance(inner, ModuleNotFoundError) else None
        if missing and (target == missing or target.startswith(f"{missing}.")):
            return f"_target_ {target} names nothing importable (no module {missing})"
        return None  # a module that exists failed to import: a bug, with its traceback
    if isinstance(cause, TypeError):
        try:
            callee = hydra.utils.get_object(target)
            arguments = {str(k): v for k, v in node.items() if not str(k).startswith("_")}
            inspect.signature(callee).bind(*(node.get("_args_") or ()), **arguments)
        except TypeError as mismatch:
            return str(mismatch)
        except (ImportError, AttributeError, ValueError):
            return None
    return None


def build_callbacks(cfg: DictConfig) -> list[L.Callback]:
    """Instantiate ``cfg.callbacks``; ``trainer.enable_progress_bar=false`` drops progress bars and
    ``trainer.enable_model_summary=false`` model summaries (the Trainer flags mean "none")."""
    from lightning.pytorch.callbacks import ModelSummary, ProgressBar
    from trainperf.lightning.progress_choice import plain_progress_when_not_a_terminal

    callbacks = _instantiate_group(cfg.get("callbacks"), "callbacks")
    callbacks = plain_progress_when_not_a_terminal(callbacks)  # log lines when not a terminal
    trainer_cfg = cfg.get("trainer") or {}
    if trainer_cfg.get("enable_progress_bar") is False:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    if trainer_cfg.get("enable_model_summary") is False:
        callbacks = [c for c in callbacks if not isinstance(c, ModelSummary)]
    return callbacks


def build_loggers(cfg: DictConfig) -> list[Any] | bool:
    """Instantiate ``cfg.logger`` (``False``: no loggers). Writes nothing: the run folder is
    checked after this (see :func:`build_trainer`)."""
    loggers = _instantiate_group(cfg.get("logger"), "logger")
    return loggers if loggers else False


def _check_trainer_keys(trainer_cfg: DictConfig) -> None:
    """A key that is no Trainer argument (added with ``+trainer.x=...``) fails here, by name."""
    from ocr.configs import trainer_arguments

    known = trainer_arguments()
    for raw in trainer_cfg:
        key = str(raw)
        if key.startswith("_") or key in known:
            continue
        close = difflib.get_close_matches(key, list(known), n=1)
        hint = f"; did you mean trainer.{close[0]}?" if close else ""
        raise ConfigError(f"trainer.{key} is not an argument of lightning.Trainer{hint}")


def build_trainer(
    cfg: DictConfig,
    *,
    extra_callbacks: Sequence[L.Callback] = (),
    check: Callable[[list[L.Callback], list[Any] | bool], None] | None = None,
) -> L.Trainer:
    """The run's Trainer from ``cfg.trainer`` with the callbacks and loggers of their groups
    (plus ``extra_callbacks``); with ``experiment_tag`` set, every logger records it as a
    hyperparameter.

    ``check(callbacks, loggers)`` runs before the Trainer is made and before anything is written
    (``ocr-train`` refuses a folder holding another run there). Also quiets known third-party
    console noise (:func:`ocr.noise.quiet_console`), and with ``experiment_tag`` set records it in
    ``<run dir>/perf/run.json`` (rank zero)."""
    quiet_console()
    trainer_cfg = cfg.trainer
    _check_trainer_keys(trainer_cfg)
    if trainer_cfg.get("callbacks") is not None:
        raise ConfigError(
            "trainer.callbacks: callbacks come from the callbacks group "
            "(callbacks=monitoring, callbacks.<name>=null, ...); leave trainer.callbacks null"
        )
    logger_arg = trainer_cfg.get("logger")
    if logger_arg not in (None, False):
        raise ConfigError(
            f"trainer.logger={logger_arg!r}: loggers come from the logger group (logger=wandb, "
            "logger.<name>=null, wandb=true); trainer.logger=false turns every logger off"
        )
    loggers = False if logger_arg is False else build_loggers(cfg)
    callbacks = [*build_callbacks(cfg), *extra_callbacks]
    if check is not None:
        check(callbacks, loggers)  # before anything is written into the run folder
    tag = cfg.get("experiment_tag")
    if tag is not None and isinstance(loggers, list):
        for logger in loggers:  # every logger records the tag as a hyperparameter
            logger.log_hyperparams({"experiment_tag": str(tag)})
    overrides = {"callbacks": callbacks, "logger": loggers}
    trainer: L.Trainer = hydra.utils.instantiate(trainer_cfg, **overrides)
    if tag is not None and trainer.is_global_zero:
        write_run_info(
            trainer.default_root_dir,
            {"experiment_tag": str(tag), "task_name": cfg.get("task_name")},
        )
    return trainer


def wandb_offline_default() -> bool:
    """WandB runs offline unless the user configured online mode and an API key exists."""
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        return True
    if os.environ.get("WANDB_API_KEY"):
        return False
    netrc = Path("~/.netrc").expanduser()
    return not (netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace"))


def make_wandb_logger(
    offline: bool | None = None,
    enabled: bool = True,
    experiment_tag: str | None = None,
    **kwargs: Any,
) -> Any:
    """``WandbLogger`` that is offline when there is no network/API key (``offline=None``).

    ``enabled`` is the config's switch (``wandb=true``); a disabled entry is never built (see
    :func:`build_loggers`), so it must be true here. ``experiment_tag`` is appended to the run
    name (``<name>-<tag>``) and added to the run's tags. Other keyword arguments go to
    ``WandbLogger``."""
    from lightning.pytorch.loggers import WandbLogger

    if not enabled:
        raise ValueError("make_wandb_logger: called with enabled=false")
    if experiment_tag is not None:
        name = kwargs.get("name")
        kwargs["name"] = f"{name}-{experiment_tag}" if name else str(experiment_tag)
        kwargs["tags"] = [*(kwargs.get("tags") or []), str(experiment_tag)]
    logger = WandbLogger(offline=wandb_offline_default() if offline is None else offline, **kwargs)
    # Lightning always passes wandb.init(anonymous=None) and wandb 0.19+ warns "The anonymous
    # setting has no effect" for any value; an unset key is what wandb expects.
    if logger._wandb_init.get("anonymous") is None:
        logger._wandb_init.pop("anonymous", None)
    return logger


def summarize_metrics(title: str, metrics: Mapping[str, float], trainer: L.Trainer) -> None:
    """Print the key metrics as a table. Rank zero only (callers check), so nothing here may
    touch a collective."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in sorted(metrics):
        if key.startswith(("val/", "test/")):
            table.add_row(key, f"{metrics[key]:.4f}")
    make_console().print(table)
    if "val/hmean" in metrics:
        print(f"VAL H-mean: {metrics['val/hmean']:.4f}")
    # Not trainer.log_dir: under DDP it is a broadcast, and this runs on rank zero only.
    print(f"run directory: {trainer.default_root_dir}")


@contextmanager
def interruption_exit_codes() -> Iterator[None]:
    """Exit 128 + signal when a signal stopped the run, also without the callbacks that set it
    (``callbacks=none``): Lightning's ``SIGTERMException`` leaves the process with code 0 and
    its answer to a ``KeyboardInterrupt`` is ``sys.exit(1)``; a scheduler must see neither as a
    success or an ordinary failure. Other exits and exceptions pass unchanged."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        yield
    except SIGTERMException as exc:
        if exc.code in (None, 0):
            exc.code = 128 + signal.SIGTERM
        raise
    except SystemExit as exc:
        if exc.code == 1 and isinstance(exc.__context__, KeyboardInterrupt):
            raise SystemExit(128 + signal.SIGINT) from None
        raise


def end_distributed() -> None:
    """Destroy the default process group after a run that finished, as PyTorch documents for
    the end of a training script (once per process). Lightning leaves it up; Gloo's worker
    threads then meet the interpreter's shutdown and can abort the process ("terminate called
    without an active exception", exit -6) after a run that succeeded. Not called after a
    failure: other ranks may still be inside a collective."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
