"""Live host-device syncs named by the user's line that caused them.

Live host-device syncs named by their line: ``torch.cuda.set_sync_debug_mode("warn")`` over a
window of steps, each warning traced back to the innermost frame of the user's code.

In ``warn`` mode every synchronizing CUDA call (``.item()``, ``.cpu()``, ``.tolist()``, a blocking
copy, ``nonzero``, ``bool(tensor)`` ...) issues a ``UserWarning`` from the Python frame that made
it. :class:`SyncDetector` catches those warnings while it is on (``warnings.catch_warnings`` with an
``always`` filter for that message, and a ``showwarning`` that walks the stack at warning time), so
a call made inside torch (``print(tensor)`` -> ``torch/_tensor.py``) is charged to the user's line
that called it. Other warnings pass through unchanged. A CPU-only run has no syncs to find:
:meth:`SyncDetector.start` returns ``False`` and does nothing.

Cost: none while off; while on, a warning and a stack walk per sync call (opt-in, for a few steps).
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import warnings
from collections import Counter
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding, threshold

__all__ = ["SYNC_WARNING", "SyncDetector", "SyncLine", "sync_lines_finding"]

#: The text of torch's sync-debug warning (``c10/cuda/CUDAFunctions``).
SYNC_WARNING = "called a synchronizing CUDA operation"

_LIB_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
    if (p := sysconfig.get_paths().get(key))
)
_THIS = os.path.realpath(__file__)


def _is_user_file(path: str) -> bool:
    if not path or path.startswith("<"):
        return False
    real = os.path.realpath(path)
    return real != _THIS and not real.startswith(_LIB_DIRS)


@dataclass(frozen=True)
class SyncLine:
    """Sync calls made from one line of the user's code while the detector was on: ``file`` as
    Python names it (usually absolute), ``code`` that line's source text (stripped; ``""`` when
    unavailable), ``per_step`` ``calls`` per step of the window."""

    file: str
    line: int
    function: str
    code: str
    calls: int
    per_step: float

    @property
    def where(self) -> str:
        """``file:line function``."""
        return f"{self.file}:{self.line} {self.function}"


class SyncDetector:
    """Names the lines that synchronize CUDA while it is on (see the module doc).

    Use :meth:`start` at a step boundary, :meth:`stop` some steps later; both are safe to call in
    any state. Not thread-safe (``warnings`` state is process-wide): one detector at a time.
    """

    def __init__(self) -> None:
        self._catch: warnings.catch_warnings[Any] | None = None
        self._prev_mode: int | None = None
        self._counts: Counter[tuple[str, int, str]] = Counter()
        self._next_show: Any = None

    def start(self, force: bool = False) -> bool:
        """Turn sync warnings on and start counting; ``False`` (nothing done) without CUDA unless
        ``force`` (tests: catch the warnings without switching the CUDA mode)."""
        if self._catch is not None:
            return True
        has_cuda = torch.cuda.is_available()
        if not has_cuda and not force:
            return False
        self._counts.clear()
        catch = warnings.catch_warnings()
        catch.__enter__()
        self._catch = catch
        warnings.filterwarnings("always", message=".*" + SYNC_WARNING, category=UserWarning)
        self._next_show = warnings.showwarning
        warnings.showwarning = self._show
        if has_cuda:
            try:
                self._prev_mode = torch.cuda.get_sync_debug_mode()
                torch.cuda.set_sync_debug_mode("warn")
            except Exception:
                self._restore()
                raise
        return True

    def stop(self, steps: int) -> list[SyncLine]:
        """Turn sync warnings off (the previous mode back) and return the lines seen over
        ``steps`` steps, most calls first."""
        if self._catch is None:
            return []
        self._restore()
        per = max(steps, 1)
        out = [
            SyncLine(
                file=f,
                line=ln,
                function=fn,
                code=linecache.getline(f, ln).strip(),
                calls=n,
                per_step=n / per,
            )
            for (f, ln, fn), n in self._counts.items()
        ]
        self._counts.clear()
        return sorted(out, key=lambda s: (-s.calls, s.file, s.line))

    def _restore(self) -> None:
        if self._prev_mode is not None:
            try:
                torch.cuda.set_sync_debug_mode(self._prev_mode)
            finally:
                self._prev_mode = None
        catch, self._catch = self._catch, None
        if catch is not None:
            catch.__exit__(None, None, None)  # restores filters and showwarning

    def _show(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if SYNC_WARNING not in str(message):
            self._next_show(message, category, filename, lineno, file, line)
            return
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and not _is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            key = (filename, lineno, "?")
        else:
            key = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        self._counts[key] += 1


def sync_lines_finding(lines: list[SyncLine], steps: int, stage: str | None) -> Finding | None:
    """One finding naming the lines that synchronized, when they made at least
    ``sync_calls_per_step`` syncs per step together; ``None`` otherwise."""
    total = sum(s.per_step for s in lines)
    if not lines or total < threshold("sync_calls_per_step"):
        return None
    top = lines[0]
    return Finding(
        id=FindingId.HOST_SYNC_LINES,
        severity="warning",
        score=0.0,  # counted live, not timed: the trace's host_sync finding has the time share
        title=(
            f"{total:.1f} blocking calls per step; {top.per_step:.1f}/step from "
            f"{top.where}: {top.code}"
        ),
        evidence={
            # every blocking call torch's sync-debug mode saw, whether it waited or found the
            # GPU idle: the trace's sync_calls_per_step + sync_idle_calls_per_step
            "blocking_calls_per_step": round(total, 2),
            "steps": steps,
            "lines": [
                {
                    "file": s.file,
                    "line": s.line,
                    "function": s.function,
                    "code": s.code,
                    "per_step": round(s.per_step, 2),
                }
                for s in lines[:10]
            ],
        },
        threshold={"calls_per_step": threshold("sync_calls_per_step")},
        suggestion=(
            "Each named line waits for the GPU: keep values on the device (accumulate a tensor, "
            "read it once per N steps or at epoch end), replace data-dependent branches and "
            "nonzero/masked indexing by tensor ops, and copy with non_blocking=True from pinned "
            "memory."
        ),
        stage=stage,
        source="trace",
        confidence="measured",
    )
