"""The checkpoint a command reads (``ocr-train ckpt_path=...``, ``ocr-test checkpoint_path=...``),
checked before anything is written.

A missing or unreadable checkpoint is bad input: one line and exit 2 (:mod:`ocr.cli_errors`),
and the run folder is left as it was. Hydra makes the run folder, saves ``.hydra/`` and opens
the job log before the task function runs, so the check is made twice: by
:class:`CheckpointGuard`, a Hydra callback (``hydra.callbacks`` in ``train.yaml`` /
``test.yaml``) that runs before Hydra's job starts and stops the command there, and by the task
function itself (:func:`check_checkpoint_path`), for callers that do not go through Hydra's
``main`` and for ``HYDRA_FULL_ERROR=1``, which shows the error's traceback from the task function
(the guard then only keeps Hydra from writing its config and log).

"Readable" means: the file exists, can be opened, and starts like a file ``torch.save`` writes
(a zip archive, or a pickle for the legacy format). The whole checkpoint is not loaded here: it
may hold gigabytes, and Lightning loads it once anyway. Lightning's own ``ckpt_path`` words
(``last``, ``hpc``, ``best``, ``registry...``) and remote URLs (``s3://...``) are left to
Lightning; a directory (a sharded checkpoint) only has to be readable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from ocr.cli_errors import EXIT_BAD_INPUT, full_error_requested, report_error
from ocr.errors import CheckpointError, InputError, MissingPathError

__all__ = ["CheckpointGuard", "check_checkpoint_path", "hydra_writes_nothing"]

# ckpt_path values Lightning resolves itself (its fit / validate / test / predict accept these)
_LIGHTNING_WORDS = frozenset({"last", "hpc", "best"})
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since torch 1.6
_PICKLE_PROTO = 0x80  # the legacy format: a pickle (protocol >= 2)


def check_checkpoint_path(value: str | os.PathLike[str] | None, key: str) -> Path | None:
    """The checkpoint file ``value`` names (``key``: the config key, for the message), or
    ``None`` when there is nothing to check (unset, one of Lightning's words, a URL).

    Raises:
        MissingPathError: nothing exists at that path.
        CheckpointError: it cannot be opened, or is not a file ``torch.save`` writes.
    """
    if value is None or str(value) == "":
        return None
    text = str(value)
    if text in _LIGHTNING_WORDS or text.startswith("registry") or "://" in text:
        return None
    path = Path(text).expanduser()
    if not path.exists():
        raise MissingPathError(f"{key}: no such file: {path}")
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise CheckpointError(f"{key}: {path} is a folder that cannot be read")
        return path
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_ZIP_MAGIC))
    except OSError as exc:
        raise CheckpointError(f"{key}: {path} cannot be read ({exc.strerror or exc})") from exc
    if not (head.startswith(_ZIP_MAGIC) or (head and head[0] == _PICKLE_PROTO)):
        what = "an empty file" if not head else "neither a zip archive nor a pickle"
        raise CheckpointError(f"{key}: {path} is not a checkpoint ({what})")
    return path


def hydra_writes_nothing(hydra_cfg: DictConfig) -> None:
    """Keep Hydra from saving ``.hydra/`` and from opening its job log file in the run folder
    (``hydra.output_subdir`` to null, the log to the console only). Call from ``on_run_start``."""
    with read_write(hydra_cfg), open_dict(hydra_cfg):
        hydra_cfg.output_subdir = None
        logging_cfg = hydra_cfg.get("job_logging")
        if not logging_cfg:
            return
        root = logging_cfg.get("root")
        if root is not None and "handlers" in root:
            root.handlers = [h for h in root.handlers if h != "file"]
        handlers = logging_cfg.get("handlers")
        if handlers is not None and "file" in handlers:
            del handlers["file"]  # dictConfig opens every handler it defines, used or not


class CheckpointGuard(HydraCallback):
    """Hydra callback: refuse a missing or unreadable checkpoint before Hydra's job starts.

    Args:
        key: the config key naming the checkpoint (``ckpt_path``, ``checkpoint_path``).
        prog: the command's name for the message (``ocr-train``).

    The error is one line ``<prog>: error: ...`` and exit 2, before Hydra makes the run folder
    or writes into it. With ``HYDRA_FULL_ERROR=1`` Hydra is only kept from writing its config
    and log, and the task function raises the error with its traceback. A value that cannot be
    resolved yet (an interpolation of Hydra's runtime) is left to the task function.
    """

    def __init__(self, key: str, prog: str) -> None:
        self.key = key
        self.prog = prog

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            value = OmegaConf.select(config, self.key, default=None, throw_on_missing=False)
        except Exception:
            return
        try:
            check_checkpoint_path(value, self.key)
        except InputError as exc:
            if not full_error_requested():
                report_error(self.prog, exc)
                raise SystemExit(EXIT_BAD_INPUT) from None  # Hydra passes SystemExit through
            hydra_cfg = config.get("hydra")
            if hydra_cfg is not None:
                hydra_writes_nothing(hydra_cfg)
