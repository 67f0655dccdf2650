"""Which errors are the user's to fix, and how every ``trainperf`` command reports them.

An *expected* error is bad input the user can correct (a missing run folder, a file that is not
a trace, a bad option value): the command prints one line ``<prog>: error: <message>`` on stderr
and exits with :data:`EXIT_BAD_INPUT`, without a traceback. Anything else is a bug and keeps its
traceback. ``TRAINPERF_FULL_ERROR=1`` (or Hydra's ``HYDRA_FULL_ERROR=1``, which an app built on
Hydra already sets) re-raises expected errors too.

Expected are, by type only (never by where they were raised):

* :class:`trainperf.errors.InputError` and its subclasses;
* ``OSError`` subclasses about paths (``FileNotFoundError``, ``NotADirectoryError``,
  ``IsADirectoryError``, ``FileExistsError``, ``PermissionError``) that name the path: the OS
  refused it;
* what an application registers (:func:`register_expected`): its own error types, and wrapper
  types whose wrapped error (``__cause__``) decides (Hydra's ``InstantiationException`` in an
  app built on Hydra).

A plain ``ValueError`` (or any other exception) is a bug wherever it was raised and keeps its
traceback and a non-2 exit status.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from trainperf.errors import InputError

__all__ = [
    "EXIT_BAD_INPUT",
    "expected_errors",
    "full_error_requested",
    "is_expected",
    "message_of",
    "register_expected",
    "report_error",
]

EXIT_BAD_INPUT = 2

_PATH_ERRORS: tuple[type[OSError], ...] = (
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    PermissionError,
)
# torch re-raises an error from a DataLoader worker with the worker's traceback in the message
_WORKER_TRACEBACK = "Original Traceback (most recent call last):"


#: Error types an application declared expected, and wrapper types whose ``__cause__`` decides.
_EXTRA_EXPECTED: list[type[BaseException]] = []
_WRAPPERS: list[type[BaseException]] = []


def register_expected(
    expected: tuple[type[BaseException], ...] = (), wrappers: tuple[type[BaseException], ...] = ()
) -> None:
    """Declare more error types bad input (``expected``), and exception types that wrap the error
    that decides (``wrappers``: expected when their ``__cause__`` is, reported by it)."""
    _EXTRA_EXPECTED.extend(t for t in expected if t not in _EXTRA_EXPECTED)
    _WRAPPERS.extend(t for t in wrappers if t not in _WRAPPERS)


def is_expected(exc: BaseException) -> bool:
    """Whether ``exc`` is bad input the user can fix (see the module docstring)."""
    if _WRAPPERS and isinstance(exc, tuple(_WRAPPERS)):
        return exc.__cause__ is not None and is_expected(exc.__cause__)
    if isinstance(exc, (InputError, *_EXTRA_EXPECTED)):
        return True
    # the OS refused a named path (mkdir, open, rename...): the message says which
    return isinstance(exc, _PATH_ERRORS) and exc.filename is not None


def message_of(exc: BaseException) -> str:
    """The one-line (or few-line) message for ``exc``: the wrapped error of a registered wrapper,
    without a DataLoader worker's traceback text."""
    if _WRAPPERS and isinstance(exc, tuple(_WRAPPERS)) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"  # not "[Errno 2] No such file...: 'x'"
    if _WORKER_TRACEBACK in text:
        # "Caught X in DataLoader worker process 0.\nOriginal Traceback ...\nX: message"
        text = text.rsplit("\n", 1)[-1].split(": ", 1)[-1]
    return text or type(exc).__name__


#: True while an application has set ``HYDRA_FULL_ERROR`` itself (so that Hydra raises its
#: composition errors): the user did not ask for tracebacks.
full_error_set_by_us = False


def full_error_requested() -> bool:
    """``TRAINPERF_FULL_ERROR=1`` or ``HYDRA_FULL_ERROR=1`` (any value but empty / ``0``) set by
    the user: show tracebacks."""
    if os.environ.get("TRAINPERF_FULL_ERROR", "") not in ("", "0"):
        return True
    if full_error_set_by_us:
        return False
    return os.environ.get("HYDRA_FULL_ERROR", "") not in ("", "0")


def report_error(prog: str, exc: BaseException | str) -> None:
    """Print ``<prog>: error: <message>`` on stderr (flushing stdout first so the order holds)."""
    sys.stdout.flush()
    text = exc if isinstance(exc, str) else message_of(exc)
    print(f"{prog}: error: {text}", file=sys.stderr, flush=True)


@contextmanager
def expected_errors(prog: str) -> Iterator[None]:
    """Turn an expected error raised in the block into one message and ``SystemExit(2)``.

    ``SystemExit`` is a ``BaseException``: Hydra's ``run_and_report`` (which catches
    ``Exception`` and prints a stripped traceback) lets it through.
    """
    try:
        yield
    except Exception as exc:
        if full_error_requested() or not is_expected(exc):
            raise
        report_error(prog, exc)
        raise SystemExit(EXIT_BAD_INPUT) from None
