"""One run per run folder: a new training run never writes into another run's files.

The run folder is the Hydra output directory (``hydra.run.dir``), which is also
``trainer.default_root_dir``: ``perf/`` (the performance callbacks' JSON-lines, appended to),
``csv/metrics.csv``, ``tensorboard/``, ``checkpoints/``, ``profiler_traces/``, ``wandb/``. Two runs
in one folder would mix: one ``perf/epochs.jsonl`` ("2 epochs" for two 1-epoch runs), a CSV log
Lightning deletes, checkpoints piling up as ``best-epoch000-v1.ckpt``.

Decision: a folder that already holds a run's files is **refused** (:class:`RunFolderInUseError`,
naming the folder, what was found and what to do), unless the command resumes that run
(``ckpt_path`` inside the folder, or ``ckpt_path=last``): then the run continues its files, and
the CSV log keeps its earlier rows (Lightning's CSVLogger would delete them). A fresh folder next
to it is not made silently: the user asked for that folder, and commands that follow (``ocr-test
checkpoint_path=<run>/checkpoints/last.ckpt``) would read the old run.

Hydra itself has written ``.hydra/`` and the job log into the folder before any of this runs;
those are Hydra's, not a run's, and are not looked at.

A command that stops on bad input before training (exit 2: a missing dataset, a bad value) leaves
no run folder behind: :class:`RunFolderGuard` notes what the folder held (or that it and which of
its parents did not exist) before Hydra wrote into it, and :func:`discard_unused_run_folder`
removes what this command created when that holds nothing of value (only Hydra's ``.hydra/`` and
job log, ``perf/run.json``, empty files and TensorBoard files with only their header): the folder
it made, or in a folder that existed, only the new files. When anything new is of value (a
checkpoint, a record, a logged metric, a file we do not know), everything is kept.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import shutil
import struct
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from omegaconf import DictConfig

from ocr.checkpoint_path import hydra_writes_nothing
from ocr.cli_errors import EXIT_BAD_INPUT
from ocr.errors import InputError

__all__ = [
    "RUN_ENTRIES",
    "RunFolder",
    "RunFolderInUseError",
    "claim_run_folder",
    "discard_unused_run_folder",
    "note_new_run_folder",
]

#: Entries of a run folder that belong to a training run (written by Lightning, the loggers,
#: the checkpoint callbacks and the performance callbacks).
RUN_ENTRIES: tuple[str, ...] = (
    "perf",
    "csv",
    "tensorboard",
    "checkpoints",
    "profiler_traces",
    "wandb",
)

# ``ckpt_path`` values Lightning resolves to this run's own checkpoint folder.
_RESUME_HERE_KEYWORDS = frozenset({"last", "hpc"})


@dataclass(frozen=True)
class RunFolder:
    """The outcome of :func:`claim_run_folder`.

    Attributes:
        path: the run folder.
        resuming: the command resumes the run already in the folder (its files continue).
        previous: files of an earlier run found there (relative paths, a few per entry); empty
            for a fresh folder.
    """

    path: Path
    resuming: bool
    previous: tuple[str, ...]


class RunFolderInUseError(InputError, RuntimeError):
    """The run folder holds another run's files and this command does not resume it."""


def _holds_data(path: Path) -> bool:
    """A file a run wrote something into. Not: an empty file, or a TensorBoard event file with
    only its version header (Lightning opens it at setup, so a run that failed while loading its
    data leaves one behind; re-running the fixed command in that folder must work)."""
    try:
        size = path.stat().st_size
        if size == 0:
            return False
        if not path.name.startswith("events.out.tfevents."):
            return True
        # TFRecord: uint64 length, uint32 crc, data, uint32 crc. One record = the header only.
        with open(path, "rb") as fh:
            head = fh.read(8)
        return len(head) < 8 or size > 16 + struct.unpack("<Q", head)[0]
    except OSError:
        return True


def _first_file(folder: Path) -> Path | None:
    if folder.is_file():
        return folder if _holds_data(folder) else None
    if not folder.is_dir():
        return None
    return next((p for p in sorted(folder.rglob("*")) if p.is_file() and _holds_data(p)), None)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def _launching_rank_zero() -> bool:
    """True in the process the user started on the first node. Lightning's DDP re-runs the
    command for the other ranks with ``LOCAL_RANK`` / ``NODE_RANK`` set (torchrun and SLURM set
    ``RANK`` / ``SLURM_PROCID``): those must not judge a folder rank zero is already writing."""
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID"):
        value = os.environ.get(name, "0").strip() or "0"
        if value != "0":
            return False
    return True


def _run_dirs(callbacks: Iterable[Any], loggers: Iterable[Any]) -> list[Path]:
    """Folders outside the run folder that these loggers / checkpoint callbacks write into."""
    dirs: list[Path] = []
    for logger in loggers:
        if isinstance(logger, CSVLogger | TensorBoardLogger):
            dirs.append(Path(logger.log_dir))
    for cb in callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.dirpath:
            dirs.append(Path(cb.dirpath))
    return dirs


def claim_run_folder(
    run_dir: str | os.PathLike[str] | None,
    ckpt_path: str | os.PathLike[str] | None,
    *,
    callbacks: Sequence[Any] = (),
    loggers: Sequence[Any] | bool = (),
) -> RunFolder:
    """Make sure this run writes only into its own files; call before training writes anything.

    Args:
        run_dir: the run folder (``trainer.default_root_dir``; ``None`` = the working directory,
            as Lightning does).
        ckpt_path: the ``ckpt_path`` the run resumes from, or ``None``.
        callbacks: the trainer's callbacks: checkpoint folders elsewhere are checked too.
        loggers: the trainer's loggers (or a bool, as ``Trainer(logger=...)`` takes): CSV /
            TensorBoard log folders elsewhere are checked too, and on resume the CSV log keeps
            its earlier rows.

    Returns:
        A :class:`RunFolder`. Other ranks of a multi-process run get ``previous=()`` without a
        check (rank zero decided before they started).

    Raises:
        RunFolderInUseError: the folder holds an earlier run's files and ``ckpt_path`` does not
            resume that run.
    """
    folder = Path(run_dir) if run_dir is not None else Path.cwd()
    loggers = [] if isinstance(loggers, bool) else loggers
    outside = [d for d in _run_dirs(callbacks, loggers) if not _inside(d, folder)]
    ckpt = str(ckpt_path) if ckpt_path else ""
    resuming = bool(ckpt) and (
        ckpt in _RESUME_HERE_KEYWORDS or any(_inside(Path(ckpt), d) for d in (folder, *outside))
    )
    if not _launching_rank_zero():
        return RunFolder(folder, resuming, ())
    found: list[str] = []
    for entry in (*(folder / name for name in RUN_ENTRIES), *outside):
        first = _first_file(entry)
        if first is not None:
            found.append(str(first.relative_to(folder)) if _inside(first, folder) else str(first))
    if found and not resuming:
        last = folder / "checkpoints" / "last.ckpt"
        resume_hint = f"; or continue that run: ckpt_path={last}" if last.is_file() else ""
        why = (
            f"resuming from {ckpt}, a checkpoint of another folder, would mix two runs"
            if ckpt
            else "a new run there would mix its files with it"
        )
        raise RunFolderInUseError(
            f"run folder {folder} already holds a run ({', '.join(found)}): {why}. "
            f"Choose another folder (hydra.run.dir=...), or delete this one{resume_hint}"
        )
    if resuming:
        _keep_csv_rows(loggers)
    return RunFolder(folder, resuming, tuple(found))


class RunFolderGuard(HydraCallback):
    """Hydra callback (``hydra.callbacks`` in ``train.yaml``): the same check as
    :func:`claim_run_folder`, made before Hydra writes into the run folder. Hydra saves
    ``.hydra/`` and opens ``<task>.log`` before the training code runs, so a second run into a
    folder holding another run would replace that run's config and append to its log before
    ``run_train`` refuses it. For such a folder this turns both off (``hydra.output_subdir`` to
    null, the log to the console only); ``run_train`` then refuses the run with the full message.
    Hydra swallows exceptions of callbacks, so this never raises."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra_cfg = config.get("hydra")
        if hydra_cfg is None:
            return
        note_new_run_folder(hydra_cfg.run.dir)  # before Hydra makes it
        try:
            claim_run_folder(hydra_cfg.run.dir, config.get("ckpt_path"))
        except RunFolderInUseError:
            hydra_writes_nothing(hydra_cfg)


def _keep_csv_rows(loggers: Iterable[Any]) -> None:
    """Lightning's CSV writer deletes an existing ``metrics.csv`` when it starts (it assumes a
    new run). On resume, put the earlier rows back and give the writer their header, so its
    first save appends (or rewrites with the union header) instead of starting over."""
    for logger in loggers:
        if not isinstance(logger, CSVLogger):
            continue
        path = Path(logger.log_dir) / "metrics.csv"
        if not path.is_file():
            continue
        saved = path.read_bytes()
        header = next(csv.reader(io.StringIO(saved.decode("utf-8"))), [])
        with warnings.catch_warnings():
            # "Previous log files in this directory will be deleted": they are put back below.
            warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
            writer = logger.experiment
        if not path.exists():
            path.write_bytes(saved)
        if hasattr(writer, "metrics_keys"):
            writer.metrics_keys = list(header)


# -- a command that stopped on bad input leaves no run folder -----------------------------------


@dataclass(frozen=True)
class _Before:
    """A run folder as this process saw it before Hydra wrote into it: ``top``, the topmost
    folder made for it (the run folder or a parent, e.g. ``outputs/`` on a first run; ``None``
    when the run folder existed); ``entries``, what an existing one held (relative paths)."""

    top: Path | None
    entries: frozenset[Path] = frozenset()


#: Run folders this process saw before Hydra wrote into them.
_seen_before: dict[Path, _Before] = {}

#: Files Hydra and the run's start write before training, worth nothing without a run.
_SCAFFOLD_FILES = frozenset({"perf/run.json"})


def note_new_run_folder(run_dir: str | os.PathLike[str]) -> None:
    """Note what ``run_dir`` holds before Hydra writes into it (call from ``on_run_start``):
    nothing yet, with the topmost of its parents that does not exist either, or its entries."""
    folder = Path(run_dir).resolve()
    if folder.is_dir():
        entries = frozenset(p.relative_to(folder) for p in folder.rglob("*"))
        _seen_before[folder] = _Before(None, entries)
        return
    if folder.exists():
        _seen_before.pop(folder, None)
        return
    top = folder
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    _seen_before[folder] = _Before(top)


def _of_value(path: Path, folder: Path) -> bool:
    """Whether ``path`` (a file in ``folder``) holds something a user may want back."""
    relative = path.relative_to(folder)
    if relative.parts[0] == ".hydra" or (len(relative.parts) == 1 and path.suffix == ".log"):
        return False  # Hydra's config and the job log of the command that failed
    if relative.as_posix() in _SCAFFOLD_FILES:
        return False
    return path.is_symlink() or _holds_data(path)


def _close_logs_in(folder: Path) -> None:
    """Close and detach the logging file handlers writing into ``folder`` (Hydra's job log)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        if not isinstance(logger, logging.Logger):
            continue
        for handler in list(logger.handlers):
            name = getattr(handler, "baseFilename", None)
            if isinstance(handler, logging.FileHandler) and name and _inside(Path(name), folder):
                logger.removeHandler(handler)
                handler.close()


def remove_unused_run_folder(run_dir: str | os.PathLike[str]) -> bool:
    """Remove what this command wrote into ``run_dir`` when it holds nothing of value: the
    folder itself with the parents made for it that are empty then, when this process saw it
    missing (:func:`note_new_run_folder`); in a folder that existed, only the files and folders
    that were not there before. Whether anything was removed. Only the launching process of
    rank zero, and only for a folder noted before."""
    folder = Path(run_dir).resolve()
    before = _seen_before.get(folder)
    if before is None or not folder.is_dir() or not _launching_rank_zero():
        return False
    new = sorted(
        (p for p in folder.rglob("*") if p.relative_to(folder) not in before.entries),
        key=lambda p: len(p.parts),
        reverse=True,  # deepest first: a folder after what is in it
    )
    if any(_of_value(p, folder) for p in new if p.is_file() or p.is_symlink()):
        return False
    _close_logs_in(folder)
    _seen_before.pop(folder, None)
    if before.top is None:  # an existing folder: only what is new in it
        for path in new:
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            else:
                path.unlink()
        return bool(new)
    shutil.rmtree(folder)
    parent = folder.parent
    while folder != before.top and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        folder, parent = parent, parent.parent
    return True


def _bad_input(exc: BaseException) -> bool:
    return isinstance(exc, InputError) or (
        isinstance(exc, SystemExit) and exc.code == EXIT_BAD_INPUT
    )


@contextmanager
def discard_unused_run_folder(run_dir: str | os.PathLike[str] | None) -> Iterator[None]:
    """Around a command's work: when it stops on bad input (an ``InputError``, or the exit 2
    that :func:`ocr.cli_errors.expected_errors` makes of one), remove the run folder it made if
    nothing of value is in it (:func:`remove_unused_run_folder`), and say so on stderr."""
    try:
        yield
    except BaseException as exc:
        if run_dir is not None and _bad_input(exc):
            try:
                removed = remove_unused_run_folder(run_dir)
            except OSError:
                removed = False  # the folder stays; the error that stopped the run matters
            if removed:
                print(
                    f"(removed what this command wrote into {run_dir}: the run stopped before "
                    "training, nothing was recorded)",
                    file=sys.stderr,
                    flush=True,
                )
        raise
