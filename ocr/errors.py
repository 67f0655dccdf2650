"""Bad input, told apart from bugs by type.

Every error the user can correct (a malformed annotation, a bad config value, a missing
checkpoint, a file that is not a trace, a run folder holding another run) is an
:class:`InputError`. The ``ocr-*`` commands print such an error as one line and exit 2
(:mod:`ocr.cli_errors`); any other exception is a bug and keeps its traceback, whatever module
raised it. Each subclass keeps the builtin base its callers catch (``ValueError``,
``FileNotFoundError``, ...), so ``except ValueError`` around a validation still works.

This module imports nothing: every module may raise these without an import cost or a cycle.
"""

from __future__ import annotations

__all__ = ["CheckpointError", "ConfigError", "InputError", "MissingPathError"]


class InputError(Exception):
    """Bad input the user can correct; the message says what is wrong and where."""


class ConfigError(InputError, ValueError):
    """A config value, command-line option or constructor argument taken from a config is
    rejected; the message names the key (or the constructor) and the value."""


class MissingPathError(InputError, FileNotFoundError):
    """A file or folder the input names does not exist; the message names it and what it was
    for (``FileNotFoundError(message)`` without ``filename``)."""


class CheckpointError(InputError, ValueError):
    """A checkpoint file exists but cannot be read as a Lightning checkpoint."""
