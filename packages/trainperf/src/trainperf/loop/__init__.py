"""The plain PyTorch loop adapter: :class:`Monitor`.

The plain PyTorch loop adapter: :class:`Monitor` (``trainperf.loop.plain_monitor``), three lines
added to a ``for batch in loader: forward, backward, step`` loop. Imports neither Lightning nor
``transformers``."""

from trainperf.loop.plain_monitor import Monitor

__all__ = ["Monitor"]
