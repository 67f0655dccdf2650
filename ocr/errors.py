"""Bad input, told apart from bugs by type: the toolkit's error types (:mod:`trainperf.errors`),
re-exported for the app's modules, which raise the same ones, and the app's own."""

from __future__ import annotations

from trainperf.errors import ConfigError, InputError, MissingPathError

__all__ = ["CheckpointError", "ConfigError", "InputError", "MissingPathError"]


class CheckpointError(InputError, ValueError):
    """A checkpoint file exists but cannot be read as a Lightning checkpoint."""
