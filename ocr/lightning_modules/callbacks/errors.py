"""The warning category of the performance callbacks (importable from
``ocr.lightning_modules.callbacks``, so users can filter it)."""

from __future__ import annotations

__all__ = ["PerfCallbackWarning"]


class PerfCallbackWarning(UserWarning):
    """A performance callback hit an internal error (and turned itself off), or could not
    measure something it was asked to (and says what it measures instead)."""
