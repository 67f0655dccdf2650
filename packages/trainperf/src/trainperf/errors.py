"""Bad input, told apart from bugs by type.

Every error the user can correct (a malformed annotation, a bad config value, a missing
checkpoint, a file that is not a trace, a run folder holding another run) is an
:class:`InputError`. The ``trainperf`` commands (and the app's) print such an error as
one line and exit 2 (:mod:`trainperf.cli.errors`); any other exception is a bug and keeps its
traceback, whatever module
raised it. Each subclass keeps the builtin base its callers catch (``ValueError``,
``FileNotFoundError``, ...), so ``except ValueError`` around a validation still works.

This module imports only the standard library: every module may raise these without an import cost
or a cycle.
"""

from __future__ import annotations

import warnings

__all__ = [
    "ConfigError",
    "InputError",
    "MissingPathError",
    "PerfCallbackWarning",
    "warn_off",
]


class InputError(Exception):
    """Bad input the user can correct; the message says what is wrong and where."""


class ConfigError(InputError, ValueError):
    """A config value, command-line option or constructor argument taken from a config is
    rejected; the message names the key (or the constructor) and the value."""


class MissingPathError(InputError, FileNotFoundError):
    """A file or folder the input names does not exist; the message names it and what it was
    for (``FileNotFoundError(message)`` without ``filename``)."""


class PerfCallbackWarning(UserWarning):
    """A performance callback hit an internal error (and turned itself off), or could not
    measure something it was asked to (and says what it measures instead)."""


def warn_off(name: str, exc: BaseException, category: type[Warning] = PerfCallbackWarning) -> None:
    """The one warning of the monitor ``name`` that failed with ``exc`` and is off for the run
    (attributed to the caller of the monitor's failure handler)."""
    warnings.warn(
        f"{name} failed and is off for the rest of this run ({type(exc).__name__}: {exc})",
        category,
        stacklevel=3,
    )
