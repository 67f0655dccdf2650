"""Each phase's host time split into its own work and waiting for the GPU.

Waiting time goes to what it waits for: each phase's host time split, from the live clock's CUDA
events (``gpu_phases_s`` of ``perf/epochs.jsonl``), into its own work and waiting for the GPU.

At every phase switch the clock records a CUDA event on the stream, so a phase has two spans: the
host's (``phases_s``) and the GPU stream's between its two events (``gpu_phases_s``: from the
moment the GPU reached the phase's first event, i.e. finished all work queued before, to the
moment it finished the phase's own work, idle gaps included). Where the host spends longer in a
phase than the stream does, the GPU's backlog shrank by the difference during the phase: the host
spent that time while the GPU was still running earlier phases' work. Where the phase holds a
sync (GradScaler's ``found_inf.item()`` in ``optimizer_step``, a progress bar reading a logged
tensor), that is the blocked wait.

What two events per phase can and cannot tell: the difference is an **upper bound** of the time
the host was blocked there (a host that runs its own Python while the backlog drains shows the
same figure; only a trace separates them), and the rest (``own_s``) mixes the phase's host work
with the GPU's idle gaps. The split is per epoch (each epoch clipped at zero), summed per stage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trainperf.core.findings import threshold
from trainperf.core.stage import STAGE_ORDER, Stage
from trainperf.records.epochs import EpochRecord

__all__ = ["PhaseWait", "StageWait", "gpu_waits"]


@dataclass(frozen=True)
class PhaseWait:
    """One phase over a stage's epochs with CUDA events (seconds).

    Args:
        host_s: the host's time in the phase.
        gpu_s: the stream's span between the phase's events (its work and idle gaps).
        waiting_s: host time beyond that span (per epoch, clipped at 0): at most this much the
            host was blocked waiting for the GPU's backlog in this phase.
        own_s: ``host_s - waiting_s``: the phase's own host work (the GPU may idle meanwhile).
    """

    phase: str
    host_s: float
    gpu_s: float
    waiting_s: float

    @property
    def own_s(self) -> float:
        return max(self.host_s - self.waiting_s, 0.0)


@dataclass(frozen=True)
class StageWait:
    """A stage's phases split into own work and waiting (epochs with CUDA events only).

    ``wall_s`` and ``num_batches`` are those epochs' (the per-batch figures divide by them)."""

    stage: Stage
    epochs: int
    wall_s: float
    num_batches: int
    phases: dict[str, PhaseWait] = field(default_factory=dict)

    @property
    def waiting_s(self) -> float:
        """All of the stage's waiting, seconds."""
        return sum(p.waiting_s for p in self.phases.values())

    def top(self) -> PhaseWait | None:
        """The phase with the most waiting (``None`` when nothing waited)."""
        best = max(self.phases.values(), key=lambda p: p.waiting_s, default=None)
        return best if best is not None and best.waiting_s > 0 else None

    def pct(self, seconds: float) -> float:
        """``seconds`` in % of these epochs' wall time."""
        return 100.0 * seconds / self.wall_s if self.wall_s > 0 else 0.0

    def ms_per_batch(self, seconds: float) -> float:
        return 1000.0 * seconds / max(self.num_batches, 1)

    def note(self, phase: str) -> str:
        """``<= 26 % waiting for the GPU`` for a phase whose waiting reaches
        ``gpu_wait_warn_pct`` of the stage (what the phase tables add to its share), else ""."""
        p = self.phases.get(phase)
        pct = self.pct(p.waiting_s) if p is not None else 0.0
        return (
            f"<= {pct:.0f} % waiting for the GPU" if pct >= threshold("gpu_wait_warn_pct") else ""
        )


def _events(record: EpochRecord) -> dict[str, float] | None:
    """The epoch's finite CUDA-event spans per phase, or ``None`` when it recorded none."""
    spans = {p: float(v) for p, v in record.gpu_phases_s.items() if v is not None and v == v}
    return spans if record.device == "cuda" and any(spans.values()) else None


def gpu_waits(epochs: Iterable[EpochRecord]) -> dict[Stage, StageWait]:
    """Stage -> :class:`StageWait` over the epochs that recorded CUDA events (stages without
    any are left out), in train / val / test order."""
    acc: dict[Stage, dict[str, list[float]]] = {}
    totals: dict[Stage, list[float]] = {}
    for record in epochs:
        spans = _events(record)
        if spans is None:
            continue
        phases = acc.setdefault(record.stage, {})
        total = totals.setdefault(record.stage, [0.0, 0.0, 0.0])
        total[0] += 1
        total[1] += record.wall_s
        total[2] += record.num_batches
        for phase, host in record.phases_s.items():
            gpu = spans.get(phase, 0.0)
            row = phases.setdefault(phase, [0.0, 0.0, 0.0])
            row[0] += host
            row[1] += gpu
            row[2] += max(host - gpu, 0.0)
    return {
        stage: StageWait(
            stage=stage,
            epochs=int(totals[stage][0]),
            wall_s=totals[stage][1],
            num_batches=int(totals[stage][2]),
            phases={p: PhaseWait(p, *row) for p, row in acc[stage].items()},
        )
        for stage in STAGE_ORDER
        if stage in acc
    }
