"""What the scans at an epoch's end record: attribute growth, recompiles.

What the scans at an epoch's end record: attribute growth (:class:`GrowthRecord`,
``perf/growth.jsonl``) and Dynamo recompiles (:class:`RecompilesRecord`,
``perf/recompiles.jsonl``)."""

# The records are msgspec Structs (through the imported Record base, which ruff cannot see):
# their mutable defaults are copied per instance.
# ruff: noqa: RUF012

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import msgspec

from trainperf.records.schema import Record

__all__ = ["GrowthNode", "GrowthRecord", "RecompileReason", "RecompilesRecord", "merge_reasons"]


class GrowthNode(msgspec.Struct, kw_only=True):
    """What one attribute path holds at an epoch's end (``trainperf.probe.growth``; the scan fills
    it in as it walks, so it is not frozen).

    Args:
        path: ``Owner.attr`` then ``[key]`` / ``[i]`` / ``.attr`` steps (``UserModule.losses``).
        kind: the container's type name (``list``, ``dict``, ``Tensor``, an object's class).
        bytes: the tensors' storages' bytes, each storage once per scan (``tensors`` and
            ``bytes`` extrapolated where ``sampled``). graph: one holds an autograd graph.
    """

    path: str
    kind: str
    length: int
    tensors: int = 0
    bytes: int = 0
    graph: bool = False
    devices: list[str] = []
    sampled: bool = False


class GrowthRecord(Record, tag="trainperf/growth", kw_only=True, frozen=True):
    """One ``perf/growth.jsonl`` line: the attribute scan at one training epoch's end
    (``EpochScanCallback``, ``trainperf.probe.growth.scan``).

    ``nodes`` are the paths holding tensors (most first); ``truncated``: the scan's item
    budget stopped it.
    """

    FILE: ClassVar[str] = "growth.jsonl"

    epoch: int
    nodes: list[GrowthNode] = []
    items: int = 0
    scan_ms: float = 0.0
    truncated: bool = False


class RecompileReason(msgspec.Struct, kw_only=True, frozen=True):
    """One kind of Dynamo recompile reason in an epoch (``trainperf.probe.recompiles``).

    Args:
        reason: the failed guard without its varying numbers
            (``tensor 'args[0]' size mismatch at index 2``).
        dimension: ``dimension 2 of args[0]`` for a size / stride guard; sizes: those seen on it.
    """

    reason: str
    count: int
    dimension: str | None = None
    sizes: list[int] = []
    example: str = ""


def merge_reasons(reasons: Iterable[RecompileReason]) -> list[RecompileReason]:
    """``reasons`` merged by ``reason``, most frequent first (sizes: the first 32 distinct,
    sorted; the first example)."""
    merged: dict[str, tuple[int, str | None, set[int], str]] = {}
    for r in reasons:
        n, dim, seen, first = merged.get(r.reason, (0, r.dimension, set(), r.example))
        merged[r.reason] = (n + r.count, dim, seen | set(r.sizes), first)
    out = [
        RecompileReason(reason=r, count=n, dimension=d, sizes=sorted(z)[:32], example=e)
        for r, (n, d, z, e) in merged.items()
    ]
    return sorted(out, key=lambda r: (-r.count, r.reason))


class RecompilesRecord(Record, tag="trainperf/recompiles", kw_only=True, frozen=True):
    """One ``perf/recompiles.jsonl`` line: what Dynamo compiled in one training epoch
    (``EpochScanCallback``, ``trainperf.probe.recompiles.CompileWatch``).

    Args:
        available: whether compiles could be counted (``note``: why not, or the untested torch
            version).
        compiles: frames compiled; recompiles: of them, recompiles. reasons: most frequent first.
        functions: compiles per compiled function (``co_name (file)``).
        limit_hit: the recompile limit was hit (the function then runs eagerly). failed: compiles
            that failed otherwise. lost: compiles beyond torch's bounded metrics list.
        batch_shapes: distinct batch shapes in the epoch (``None``: not counted);
            shape_examples: up to 8 of them.
    """

    FILE: ClassVar[str] = "recompiles.jsonl"

    epoch: int
    available: bool = True
    compiles: int = 0
    recompiles: int = 0
    reasons: list[RecompileReason] = []
    functions: dict[str, int] = {}
    compile_s: float = 0.0
    limit_hit: bool = False
    limit: int | None = None
    failed: int = 0
    lost: int = 0
    batch_shapes: int | None = None
    shape_examples: list[str] = []
    note: str = ""
