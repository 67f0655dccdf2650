"""The original project's ``ocr.callbacks`` package (``003_…`` of ``../shared/seeds``:
``from ocr.callbacks.profiler import ProfilerCallback``, re-exported here as its
``callbacks/__init__.py`` does). The class is the toolkit's, :mod:`trainperf.lightning`."""

from ocr.callbacks.profiler import ProfilerCallback

__all__ = ["ProfilerCallback"]
