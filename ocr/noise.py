"""A quiet, uniform console for the entry points (``ocr-train`` / ``ocr-test``).

Third-party libraries print a few lines on every run that tell our users nothing they can act on.
Each is suppressed here by its exact message (and category), never with a blanket filter, so every
other warning, ours and the users' own, still shows. Python logging itself (one short format, the
console and Hydra's ``<run>/<task>.log``) is configured by ``configs/hydra/job_logging/short.yaml``;
:func:`quiet_console` additionally routes ``warnings.warn`` through logging so warnings reach the
run's log file as well.

Suppressed:

* Lightning's advertising tips (``💡 Tip: ... litlogger`` / ``litmodels``), logged at INFO.
* Lightning's "Trainer already configured with model summary callbacks": our default callbacks
  choose ``RichModelSummary`` on purpose.
* Lightning's own use of ``torch.utils._pytree.LeafSpec`` (a ``FutureWarning`` from torch that
  only Lightning can fix).
* Lightning's "Precision bf16-mixed is not supported by the model summary ... Using 32 bits
  instead" (also ``16-mixed``): mixed precision keeps the parameters in 32 bits, so the size the
  summary prints is right (our ``experiment=synthetic_debug`` trains in bf16-mixed).
* Lightning's "You have overridden `on_after_batch_transfer` in `LightningModule` but have passed
  in a `LightningDataModule`": our module expands compact batches there on purpose
  (:mod:`ocr.data.compact`), and Lightning then uses the module's hook, as it says. The notice
  for the other batch hooks, and for a hook overridden in both, still shows.
* WandB's "The anonymous setting has no effect" (see :func:`ocr.runtime.make_wandb_logger`,
  which stops Lightning from passing the setting).
"""

from __future__ import annotations

import logging
import re
import warnings

# Lightning logs its rank-zero messages through these loggers.
_LIGHTNING_INFO_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)
NOISE_MESSAGES: tuple[str, ...] = (
    "💡 Tip:",
    "Trainer already configured with model summary callbacks",
)
_PYTREE_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
_MIXED_SUMMARY = r"Precision (bf16|16)-mixed is not supported by the model summary"
_MODULE_BATCH_HOOK = (
    r"You have overridden `on_after_batch_transfer` in `LightningModule` but have passed in a"
    r" `LightningDataModule`"
)


class _DropMessages(logging.Filter):
    """Drops records whose message starts with one of ``prefixes``."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


class _OneLine(logging.Filter):
    """``logging.captureWarnings`` logs ``warnings.formatwarning``'s text, which ends in a newline
    (a blank line in the log); strip it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = record.msg.rstrip()
        return True


_FILTER = _DropMessages(NOISE_MESSAGES)
_ONE_LINE = _OneLine()


def quiet_console() -> None:
    """Install the narrow filters above and send ``warnings`` to logging. Idempotent."""
    for name in _LIGHTNING_INFO_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    warnings.filterwarnings(
        "ignore",
        message=_PYTREE_DEPRECATION,
        category=FutureWarning,
        module=re.escape("lightning.pytorch.utilities._pytree"),
    )
    warnings.filterwarnings("ignore", message=_MIXED_SUMMARY, category=UserWarning)
    warnings.filterwarnings("ignore", message=_MODULE_BATCH_HOOK, category=UserWarning)
    # Warnings then reach the console and the run's log file in the one logging format.
    logging.captureWarnings(True)
    warnings_logger = logging.getLogger("py.warnings")
    if _ONE_LINE not in warnings_logger.filters:
        warnings_logger.addFilter(_ONE_LINE)
