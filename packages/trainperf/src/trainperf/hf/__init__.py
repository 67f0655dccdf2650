"""The Hugging Face ``transformers.Trainer`` adapter.

:class:`PerfCallback` (``trainperf.hf.callback``), one callback passed to the Trainer. The only part
of trainperf that imports ``transformers``; install it with ``pip install trainperf[hf]``."""

from trainperf.hf.callback import PerfCallback
from trainperf.hf.versions import TESTED_VERSIONS, check_versions

__all__ = ["TESTED_VERSIONS", "PerfCallback", "check_versions"]
