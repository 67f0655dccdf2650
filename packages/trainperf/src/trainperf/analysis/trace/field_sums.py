"""Field-wise sum of per-window sum records (:class:`FieldSums`).

Field-wise sum of two records of per-window sums (:class:`FieldSums`), for the time windows
of one trace (:mod:`~trainperf.analysis.trace.windowed`): numbers, counters and lists add, mappings
of sets unite, and a field whose metadata names a ``merge`` function (``max``, "the later
window's") is merged by it."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Self

__all__ = ["FieldSums", "later"]


def later(a: Any, b: Any) -> Any:
    """The later window's value where it has one."""
    return b or a


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and not isinstance(a, Counter):  # a mapping of sets
        out = {k: set(v) for k, v in a.items()}
        for k, v in b.items():
            out.setdefault(k, set()).update(v)
        return out
    return a + b


class FieldSums:
    """Mixin for a dataclass of sums: ``a + b`` merges it field by field (see the module doc)."""

    def __add__(self, other: Self) -> Self:
        assert dataclasses.is_dataclass(self)
        merged = {
            f.name: f.metadata.get("merge", _merge)(getattr(self, f.name), getattr(other, f.name))
            for f in dataclasses.fields(self)
        }
        return type(self)(**merged)
