"""Memory creep named by attribute, judged: the paths that grew, and the verdict's finding.

A path counts when it grew in each of the last :data:`GROWTH_EPOCHS` epochs of the epoch scans
(``perf/growth.jsonl``, written by ``EpochScanCallback`` from
:func:`trainperf.probe.growth_scan.scan`)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding, risk_score
from trainperf.records.epoch_scans import GrowthRecord
from trainperf.records.files import epoch_runs, read_records

#: An attribute is growing when it grew in each of this many successive epochs (so the first
#: finding can come at the end of epoch ``GROWTH_EPOCHS``, the third epoch of a run with 2).
#: One epoch of growth is what every first epoch shows (a list filled once, a cache warming).
GROWTH_EPOCHS = 2


@dataclass
class Growth:
    """A path that grew in each of the last :data:`GROWTH_EPOCHS` epochs: ``epochs`` are the
    ``GROWTH_EPOCHS + 1`` compared, ``*_per_epoch`` the mean added per epoch over them,
    ``tensors`` / ``bytes`` what the last one held."""

    path: str
    epochs: list[int]
    tensors_per_epoch: float
    bytes_per_epoch: float
    length_per_epoch: float
    tensors: int
    bytes: int
    graph: bool
    devices: list[str]
    sampled: bool

    @property
    def message(self) -> str:
        """``UserModule.losses: +120 tensors / epoch (+3.1 MB / epoch), holding autograd graphs
        -- append loss.detach() or loss.item()``."""
        text = (
            f"{self.path}: +{self.tensors_per_epoch:.0f} tensors / epoch "
            f"(+{_size(self.bytes_per_epoch)} of tensor data / epoch; {self.tensors} tensors, "
            f"{_size(self.bytes)} now)"
        )
        if self.graph:
            text += ", holding autograd graphs (each keeps its step's activations alive)"
        return f"{text} -- {self.advice}"

    @property
    def advice(self) -> str:
        if self.graph:
            return (
                "append loss.detach() (or loss.item() for a number) instead of the tensor, and "
                "clear the list at the epoch's end"
            )
        where = " (on the GPU: .cpu() them)" if "cuda" in self.devices else ""
        return (
            "keep only what the epoch's end needs: reduce it to numbers as you go, or clear the "
            f"container in on_train_epoch_end{where}"
        )


def _size(n: float) -> str:
    """``40 B``, ``3.1 KB``, ``12.0 MB``, ``1.2 GB`` (decimal units)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def growing(scans: Sequence[GrowthRecord]) -> list[Growth]:
    """The paths that grew (length, tensor count or bytes) between each pair of the last
    :data:`GROWTH_EPOCHS` + 1 scans, in epoch order. A path that grows inside another growing
    one is named instead of it (``UserModule.outputs['train']``, not ``UserModule.outputs``)."""
    if len(scans) < GROWTH_EPOCHS + 1:
        return []
    window = sorted(scans, key=lambda s: s.epoch)[-(GROWTH_EPOCHS + 1) :]
    by_scan = [{n.path: n for n in s.nodes} for s in window]
    found: list[Growth] = []
    for path in sorted(by_scan[-1]):
        if not all(path in nodes for nodes in by_scan):
            continue
        points = [nodes[path] for nodes in by_scan]
        if not all(
            (b.length > a.length or b.tensors > a.tensors or b.bytes > a.bytes)
            and b.tensors >= a.tensors
            for a, b in itertools.pairwise(points)
        ):
            continue
        first, last = points[0], points[-1]
        found.append(
            Growth(
                path=path,
                epochs=[s.epoch for s in window],
                tensors_per_epoch=(last.tensors - first.tensors) / GROWTH_EPOCHS,
                bytes_per_epoch=(last.bytes - first.bytes) / GROWTH_EPOCHS,
                length_per_epoch=(last.length - first.length) / GROWTH_EPOCHS,
                tensors=last.tensors,
                bytes=last.bytes,
                graph=last.graph,
                devices=list(last.devices),
                sampled=any(n.sampled for n in points),
            )
        )
    paths = [g.path for g in found]
    return [
        g
        for g in found
        if not any(p != g.path and p.startswith((g.path + "[", g.path + ".")) for p in paths)
    ]


def growth_finding(found: Sequence[Growth]) -> Finding | None:
    """One finding naming every growing attribute (``None`` when nothing grows). Holding
    autograd graphs makes it a risk to the run (it dies or swaps); otherwise a warning."""
    if not found:
        return None
    worst = max(found, key=lambda g: (g.graph, g.bytes_per_epoch, g.tensors_per_epoch))
    graph = any(g.graph for g in found)
    title = f"memory creep: {worst.message}"
    if len(found) > 1:
        title += f" (and {len(found) - 1} more growing attribute(s))"
    return Finding(
        id=FindingId.MEMORY_CREEP,
        severity="critical" if graph else "warning",
        score=risk_score("critical" if graph else "warning"),
        title=title,
        evidence={
            "growing": [asdict(g) for g in found],
            "epochs_compared": worst.epochs,
        },
        threshold={"growth_epochs": float(GROWTH_EPOCHS)},
        suggestion="; ".join(dict.fromkeys(f"{g.path}: {g.advice}" for g in found)) + ".",
        stage="train",
        source="growth",
        confidence="measured",
    )


def growth_findings_of(scans: Sequence[GrowthRecord]) -> list[Finding]:
    """The verdict's memory-creep finding from the epoch scans of ``perf/growth.jsonl`` (in file
    order): what :func:`growing` found at any epoch end of each run recorded there (a new run
    starts again at epoch 0; a container cleared later still grew while it was growing), judged
    as the callback judged it live; the latest sighting per path."""
    found: dict[str, Growth] = {}
    for run in epoch_runs(scans):
        for end in range(GROWTH_EPOCHS + 1, len(run) + 1):
            for g in growing(run[end - GROWTH_EPOCHS - 1 : end]):
                found[g.path] = g
    finding = growth_finding(list(found.values()))
    return [finding] if finding is not None else []


def growth_findings(run_dir: str | os.PathLike[str]) -> list[Finding]:
    """:func:`growth_findings_of` a run directory's ``perf/growth.jsonl``."""
    return growth_findings_of(read_records(GrowthRecord.path(run_dir), GrowthRecord))
