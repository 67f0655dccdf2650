"""The warning category of the performance callbacks (importable from
``ocr.lightning_modules.callbacks``, so users can filter it)."""

from __future__ import annotations

import warnings


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
