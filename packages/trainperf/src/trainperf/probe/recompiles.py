"""``torch.compile`` recompiles and shape churn, per epoch, with their reason. Lightning-free.

A compiled model fed inputs of changing sizes recompiles for each new shape until Dynamo's
recompile limit, then runs that function eagerly: slower than eager while every phase just reads
``forward``. This module counts, per epoch, what Dynamo compiled, why it recompiled (the guard
that failed: ``tensor 'x' size mismatch at index 2``), how long compiling took and whether the
limit was hit.

The one seam into torch (version-gated, tested in
``packages/trainperf/tests/unit/perf/test_recompiles.py``):
``torch._dynamo.utils.get_compilation_metrics()``, the bounded list (64 by default) of
``CompilationMetrics`` Dynamo appends one entry to per frame compile (the recompile limit shows as
``fail_type`` ``Unsupported`` with "recompile limit exceeded"), and
``torch._dynamo.utils.counters["frames"]["total"]``, which counts compiles past that bound
(reported as ``lost``). :class:`CompileWatch` reads the new entries at an epoch's end: nothing
runs per step, and nothing is enabled in torch (no log level, no hook). A torch without that
surface records ``available: false`` with the reason.

Without compile the number of distinct batch shapes per epoch still matters (cuDNN autotuning
runs once per shape; a later compile would recompile for each): :class:`ShapeCounter`.
``EpochScanCallback`` writes one record per training epoch to ``perf/recompiles.jsonl``; the
verdict turns them into a finding (:func:`recompile_findings`).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from itertools import islice
from typing import Any

from trainperf.records.epoch_scans import RecompileReason, RecompilesRecord, merge_reasons

#: torch versions (major, minor) whose compilation-metrics surface this module was checked on.
TESTED_TORCH = ((2, 13),)
#: Distinct shapes a :class:`ShapeCounter` keeps per epoch (beyond: counted as "more").
MAX_SHAPES = 1024

_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?:\s*")
_SIZE = re.compile(
    r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<dim>\d+)\."
    r"\s*expected (?P<expected>-?\d+), actual (?P<actual>-?\d+)"
)
_NUMBERS = re.compile(r"(expected|actual|==|!=|<=|>=|<|>)\s*-?\d+")


def normalize_reason(text: str) -> tuple[str, str | None, list[int]]:
    """``(reason, dimension, sizes)`` of one Dynamo recompile reason: the compile id prefix
    (``0/3: ``) and the varying numbers dropped, the dimension named for size / stride guards."""
    text = _COMPILE_ID.sub("", text.strip().splitlines()[0] if text.strip() else "")
    m = _SIZE.search(text)
    if m is not None:
        reason = f"tensor '{m['name']}' {m['what']} mismatch at index {m['dim']}"
        what = "dimension" if m["what"] == "size" else "stride of dimension"
        return reason, f"{what} {m['dim']} of {m['name']}", [int(m["expected"]), int(m["actual"])]
    return _NUMBERS.sub(r"\1 N", text), None, []


def _surface() -> tuple[Any, str]:
    """``torch._dynamo.utils``, or ``None`` and why not."""
    import torch

    try:
        from torch._dynamo import utils as dynamo_utils
    except Exception as exc:  # a torch built without Dynamo
        return None, f"torch._dynamo cannot be imported ({type(exc).__name__}: {exc})"
    if not callable(getattr(dynamo_utils, "get_compilation_metrics", None)):
        return None, f"torch {torch.__version__} has no torch._dynamo.utils.get_compilation_metrics"
    if not hasattr(dynamo_utils, "counters"):
        return None, f"torch {torch.__version__} has no torch._dynamo.utils.counters"
    return dynamo_utils, ""


def torch_tested() -> bool:
    """Whether this torch's (major, minor) is in :data:`TESTED_TORCH`."""
    import torch

    parts = str(torch.__version__).split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) in TESTED_TORCH
    except (IndexError, ValueError):
        return False


def _entry_key(entry: Any) -> tuple[Any, ...]:
    return (getattr(entry, "compile_id", None), getattr(entry, "start_time_us", None))


class CompileWatch:
    """Counts what Dynamo compiles between two :meth:`take` calls (see the module doc). Create it
    at the start of a run: compiles before it are not counted."""

    def __init__(self) -> None:
        self._utils, self.note = _surface()
        self._last: tuple[Any, ...] | None = None
        self._frames = 0
        if self._utils is not None:
            entries = self._utils.get_compilation_metrics()
            self._last = _entry_key(entries[-1]) if entries else None
            self._frames = self._frames_total()

    def _frames_total(self) -> int:
        frames = self._utils.counters.get("frames")
        return int(frames.get("total", 0)) if frames else 0

    def take(self, epoch: int) -> RecompilesRecord:
        """The compiles since the previous call (or since construction)."""
        if self._utils is None:
            return RecompilesRecord(epoch=epoch, available=False, note=self.note)
        failed = dynamo_entries = 0
        compile_s = 0.0
        limit_hit = False
        tallies: list[RecompileReason] = []
        functions: Counter[str] = Counter()
        entries = list(self._utils.get_compilation_metrics())
        keys = [_entry_key(e) for e in entries]
        start = keys.index(self._last) + 1 if self._last in keys else 0
        if entries:
            self._last = keys[-1]
        for entry in entries[start:]:
            if getattr(entry, "is_forward", None) is False:
                continue  # a backward graph compiled by AOT autograd, not a Dynamo frame
            dynamo_entries += 1
            compile_s += float(getattr(entry, "entire_frame_compile_time_s", None) or 0.0)
            if getattr(entry, "fail_type", None) is not None:
                text = str(getattr(entry, "fail_reason", "") or "")
                if "recompile limit" in text.lower() or "cache_size_limit" in text:
                    limit_hit = True
                else:
                    failed += 1
                continue
            name = getattr(entry, "co_name", None) or "?"
            filename = os.path.basename(getattr(entry, "co_filename", None) or "?")
            functions[f"{name} ({filename})"] += 1
            raw = getattr(entry, "recompile_reason", None)
            if raw is not None:
                key, dimension, sizes = normalize_reason(str(raw))
                example = str(raw)[:300]
                tallies.append(
                    RecompileReason(
                        reason=key, count=1, dimension=dimension, sizes=sizes, example=example
                    )
                )
        frames = self._frames_total()
        lost = max(0, frames - self._frames - dynamo_entries)
        self._frames = frames
        note = ""
        if not torch_tested():
            import torch

            tested = ", ".join(f"{a}.{b}" for a, b in TESTED_TORCH)
            note = f"counted with torch {torch.__version__}; checked on {tested}"
        return RecompilesRecord(
            epoch=epoch,
            compiles=sum(functions.values()),
            recompiles=len(tallies),
            reasons=merge_reasons(tallies),
            functions=dict(functions.most_common()),
            compile_s=round(compile_s, 4),
            limit_hit=limit_hit,
            limit=_recompile_limit(),
            failed=failed,
            lost=lost,
            note=note,
        )


def _recompile_limit() -> int | None:
    import torch

    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    value = getattr(config, "recompile_limit", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ShapeCounter:
    """The distinct shapes of the batches :meth:`note` is shown, per epoch: the shape of the
    batch's first tensor (the batch itself, or the first of the first 4 items of a list / tuple /
    dict); one set insertion per batch (the callback shows it batches only when asked to, since
    that is per-step work). A batch without a tensor there is not counted."""

    def __init__(self) -> None:
        import torch

        self._tensor = torch.Tensor
        self._shapes: set[tuple[int, ...]] = set()
        self._more = False

    def note(self, batch: Any) -> None:
        t = batch
        if not isinstance(t, self._tensor):
            items = batch.values() if isinstance(batch, dict) else batch
            if not isinstance(items, list | tuple) and not isinstance(batch, dict):
                return
            t = next((x for x in islice(items, 4) if isinstance(x, self._tensor)), None)
            if t is None:
                return
        if len(self._shapes) < MAX_SHAPES:
            self._shapes.add(tuple(t.shape))
        else:
            self._more = True

    def take(self) -> tuple[int, list[str]]:
        """``(distinct shapes, up to 8 of them as text)`` since the previous call; resets."""
        shapes, self._shapes = sorted(self._shapes), set()
        more, self._more = self._more, False
        count = len(shapes) + (1 if more else 0)
        return count, ["x".join(str(d) for d in s) or "scalar" for s in shapes[:8]]
