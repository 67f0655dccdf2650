"""CPU contention: other processes hold the host's CPUs while this run does not.

A resource sample (``perf/resources.jsonl``) has the host's busy CPU (``system_cpu_percent``, %
of all cores) and this run's own (``process_cpu_percent`` + ``workers_cpu_percent``, % of one
core). Their difference is what other processes used. A sample is *contended* when the host is
busy (>= :data:`~trainperf.core.cpu_shares.SYSTEM_BUSY_PCT`) and other processes hold at least
:data:`~trainperf.core.cpu_shares.OTHERS_PCT` of all
cores: then a slower step is the neighbours' doing, not the run's, and a measurement taken there
compares the machine's load, not the code. The verdict's ``cpu_contention`` finding, the
``throughput_drop`` alert, ``trainperf check`` and ``trainperf try`` read this module.

Under DDP each rank samples its own process; the ranks' shares at one moment are added
(:func:`summarize`), so the ranks of one run are never each other's contention.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainperf.core.cpu_shares import CpuShares, cpu_shares
from trainperf.records.files import read_records, read_run_record
from trainperf.records.monitoring import ResourceSample
from trainperf.records.schema import RunDirError

__all__ = [
    "Contention",
    "contention_note",
    "run_contention",
    "summarize",
    "trials_contention_note",
]

#: The stages whose samples are judged.
RUNNING = ("train", "val", "test")


@dataclass(frozen=True)
class Contention:
    """The running samples of a run judged for contention: how many, how many contended, and
    the medians (% of all cores) of the others' and this run's CPU over the contended ones."""

    samples: int
    contended: int
    others_median_pct: float
    ours_median_pct: float
    system_median_pct: float

    @property
    def share(self) -> float:
        """Fraction of the running samples that were contended."""
        return self.contended / self.samples if self.samples else 0.0

    @property
    def present(self) -> bool:
        """At least a quarter of the running samples, and at least two, were contended."""
        return self.contended >= 2 and self.share >= 0.25

    def sentence(self) -> str:
        """``other processes held 71 % of the host's CPUs (median) while this run used 9 %,
        in 9 of 10 samples``."""
        return (
            f"other processes held {self.others_median_pct:.0f} % of the host's CPUs (median) "
            f"while this run used {self.ours_median_pct:.0f} %, in {self.contended} of "
            f"{self.samples} samples"
        )


def summarize(samples: Iterable[ResourceSample], cpu_count: int | None) -> Contention | None:
    """Judge the running samples (every rank's: at each sample the other ranks' latest own CPU
    is added to this run's part); ``None`` without a system CPU or a core count."""
    if not cpu_count:
        return None
    ordered = sorted(samples, key=lambda s: s.t)
    ranks = {s.rank for s in ordered}
    latest_own: dict[int, float] = {}
    judged: list[CpuShares] = []
    for sample in ordered:
        metrics = sample.metrics
        own = metrics.get("resources/process_cpu_percent")
        if own is None:
            continue  # whose the busy cores are is unknown
        latest_own[sample.rank] = own + metrics.get("resources/workers_cpu_percent", 0.0)
        if sample.phase not in RUNNING or len(latest_own) < len(ranks):
            continue  # idle, or not every rank's part known yet
        shares = cpu_shares(metrics, cpu_count)
        if shares is None:
            continue
        ours = sum(latest_own.values()) / cpu_count
        judged.append(CpuShares(shares.system_pct, ours))
    if not judged:
        return None
    hit = [s for s in judged if s.contended] or judged
    return Contention(
        samples=len(judged),
        contended=sum(s.contended for s in judged),
        others_median_pct=statistics.median(s.others_pct for s in hit),
        ours_median_pct=statistics.median(s.ours_pct for s in hit),
        system_median_pct=statistics.median(s.system_pct for s in hit),
    )


def run_contention(run_dir: str | os.PathLike[str]) -> Contention | None:
    """:func:`summarize` of a run folder's ``perf/resources.jsonl`` with the core count of its
    ``perf/run.json`` (``None`` when either is missing or unreadable)."""
    try:
        cpu_count = read_run_record(run_dir).cpu_count
        samples = read_records(ResourceSample.path(run_dir), ResourceSample)
    except (OSError, RunDirError):
        return None
    return summarize(samples, cpu_count)


def contention_note(what: str, run_dir: str | os.PathLike[str]) -> str | None:
    """One line for ``trainperf check`` / ``trainperf try`` when ``what`` (``the current run``,
    ``trial 3``) was measured under contention: its figures carry the neighbours' load."""
    found = run_contention(run_dir)
    if found is None or not found.present:
        return None
    return f"{what} was measured under CPU contention (cpu_contention): {found.sentence()}"


def trials_contention_note(trials_dir: str | os.PathLike[str]) -> str | None:
    """One line for ``trainperf try`` when its trials (the run folders under ``trials_dir``,
    judged together: one host, one session) were measured under contention."""
    root = Path(trials_dir)
    samples: list[ResourceSample] = []
    cpu_count: int | None = None
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        try:
            cpu_count = cpu_count or read_run_record(run_dir).cpu_count
            samples += read_records(ResourceSample.path(run_dir), ResourceSample)
        except (OSError, RunDirError):
            continue
    found = summarize(samples, cpu_count)
    if found is None or not found.present:
        return None
    return f"the trials were measured under CPU contention (cpu_contention): {found.sentence()}"
