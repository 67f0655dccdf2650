"""Process-wide request for an on-demand profiler window.

Whoever notices something worth profiling (an alert rule seeing a throughput drop, user code)
calls :func:`request_profile`; ``ProfilerCallback`` in on-demand mode polls
:func:`take_profile_request` at its step boundary (one attribute read when nothing is pending)
and profiles the next steps. Decoupled this way, neither side imports the other.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_pending: str | None = None


def request_profile(reason: str) -> None:
    """Ask for a profiler window at the next step; ``reason`` is recorded with the trace and
    replaces a pending request's (one window serves both). Thread-safe."""
    global _pending
    with _lock:
        _pending = str(reason) or "requested"


def take_profile_request() -> str | None:
    """Take the pending request (its reason), or ``None``; cheap when none is pending."""
    global _pending
    if _pending is None:
        return None
    with _lock:
        reason, _pending = _pending, None
    return reason
