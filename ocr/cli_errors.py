"""Which errors are the user's to fix, and how every ``ocr-*`` command reports them: the
toolkit's rules (:mod:`trainperf.cli.errors`: :class:`~trainperf.errors.InputError` and path
errors that name the path are bad input, one line and exit 2; anything else keeps its traceback)
with Hydra's and OmegaConf's added, registered when this module is imported:

* OmegaConf's missing-value / interpolation errors (a ``???`` left unset, a bad ``${...}``);
* Hydra's ``InstantiationException`` when the error it wraps is expected (a constructor's
  validation).

``HYDRA_FULL_ERROR=1`` (Hydra's convention, honoured by every command here) re-raises expected
errors too.
"""

from __future__ import annotations

from hydra.errors import InstantiationException
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue
from trainperf.cli.errors import (
    EXIT_BAD_INPUT,
    expected_errors,
    full_error_requested,
    is_expected,
    message_of,
    register_expected,
    report_error,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "expected_errors",
    "full_error_requested",
    "is_expected",
    "message_of",
    "report_error",
]

register_expected(
    expected=(MissingMandatoryValue, InterpolationResolutionError),
    wrappers=(InstantiationException,),
)
