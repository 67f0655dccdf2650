"""What crosses ranks: the epoch-close exchange and the all-reduce timer.

Over any ``torch.distributed`` process group. At each stage epoch's close every rank sends one
:class:`RankEpoch` in one ``torch.distributed.all_gather_object``, which pads every rank's bytes
itself: the same collectives with the same shapes on every rank whatever its callbacks, hooks or
phases (a callback built on one rank only is a name in that rank's row). :func:`hook_ddp` times the
gradient all-reduce, so the recorder can charge the wait for the other ranks to ``sync_wait``.
:class:`RankExchange` is the recorder's side of both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
import torch

from trainperf.core.clock import PHASES, PhaseClock
from trainperf.core.ranks import Straggler, find_straggler, rank_spread
from trainperf.recording.subscribers import per_second
from trainperf.records.epochs import EpochRecord

# Figures whose spread over ranks is reported. Durations first: their largest value names a
# slowest rank.
DURATION_FIGURES: tuple[str, ...] = (
    "epoch_time",
    *(f"{phase}_time" for phase in PHASES),
    "worker_fetch_time",
    "worker_collate_time",
    "batch_mean",
)
_OTHER_FIGURES: tuple[str, ...] = (
    "samples",
    "batches",
    "samples_per_sec",
    "batches_per_sec",
    "peak_rss_gb",
    "peak_gpu_memory_gb",
)


@dataclass(frozen=True)
class RankEpoch:
    """One rank's part of a stage epoch's exchange.

    Args:
        ok: the rank's recording is healthy; ``False`` turns recording off on every rank.
        stage: ``"train"``, ``"val"`` or ``"test"`` (every rank must close the same one).
        figures: figure name (``epoch_time``, ``{phase}_time``, ``samples``...) -> value; nan
            when the rank has none.
        callbacks_s: seconds per callback (display name) on this rank.
        module_hooks_s: seconds per LightningModule / DataModule hook (``Class.hook``).
    """

    ok: bool
    stage: str = ""
    epoch: int | None = -1
    figures: dict[str, float] = field(default_factory=dict)
    callbacks_s: dict[str, float] = field(default_factory=dict)
    module_hooks_s: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, report: EpochRecord) -> RankEpoch:
        """This rank's part, from its own (one-process) report."""
        worker = report.worker_s
        figures = {
            "epoch_time": report.wall_s,
            **{f"{phase}_time": report.phases_s.get(phase, 0.0) for phase in PHASES},
            "worker_fetch_time": worker.get("fetch", math.nan),
            "worker_collate_time": worker.get("collate", math.nan),
            "batch_mean": report.batch_stats.get("mean", math.nan),
            "samples": float(report.samples),
            "batches": float(report.num_batches),
            "samples_per_sec": per_second(report.samples, report.wall_s),
            "batches_per_sec": per_second(report.num_batches, report.wall_s),
            "peak_rss_gb": report.peak_rss_gb,
            "peak_gpu_memory_gb": report.peak_gpu_memory_gb,
        }
        return cls(
            ok=True,
            stage=report.stage,
            epoch=report.epoch,
            figures={k: math.nan if v is None else float(v) for k, v in figures.items()},
            callbacks_s=dict(report.callbacks_s),
            module_hooks_s=dict(report.module_hooks_s),
        )


def merge_ranks(report: EpochRecord, rows: Sequence[RankEpoch]) -> EpochRecord:
    """``report`` (this rank's) with the cross-rank figures of ``rows`` (every rank's, healthy
    and of the same stage epoch): spreads, global samples / batches / wall time, the straggler
    and each rank's callbacks."""
    per_rank = {
        name: [row.figures.get(name, math.nan) for row in rows]
        for name in DURATION_FIGURES + _OTHER_FIGURES
    }
    spreads = {name: rank_spread(values) for name, values in per_rank.items()}
    for name in _OTHER_FIGURES:
        spreads[name].pop("slowest_rank")  # the largest rate or count is not the slowest
    phases = [{p: row.figures.get(f"{p}_time", 0.0) for p in PHASES} for row in rows]
    named = [{"callbacks": row.callbacks_s, "module_hooks": row.module_hooks_s} for row in rows]
    return msgspec.structs.replace(
        report,
        world_size=len(rows),
        spreads=spreads,
        global_samples=int(sum(_finite(per_rank["samples"]))),
        global_batches=int(sum(_finite(per_rank["batches"]))),
        global_wall_s=max(_finite(per_rank["epoch_time"]), default=report.wall_s),
        straggler=find_straggler(per_rank["epoch_time"], phases, named),
        callbacks_s_by_rank=tuple(dict(row.callbacks_s) for row in rows),
    )


def gather_ranks(
    local: EpochRecord | None,
    world_size: int,
    group: torch.distributed.ProcessGroup | None = None,
) -> tuple[EpochRecord | None, str | None]:
    """This rank's ``local`` report (None: its recording failed) with every rank's figures
    merged in, and None; or None and why recording must go off, the same on every rank (a rank
    failed, the ranks closed different epochs, or there is no process group to exchange
    through). Every rank of ``group`` (default: the default process group, whoever set it up:
    Lightning, ``torchrun``, ``accelerate``) calls it at the same epoch closes."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return (
            None,
            f"{world_size} ranks but no torch.distributed process group to exchange through",
        )
    mine, error = RankEpoch(ok=False), ""
    try:
        if local is not None:
            mine = RankEpoch.of(local)
    except Exception as exc:  # the other ranks wait in the collective: join it, flag down
        error = f" ({type(exc).__name__}: {exc})"
    gathered: list[RankEpoch | None] = [None] * world_size
    if group is None:
        torch.distributed.all_gather_object(gathered, mine)
    else:
        torch.distributed.all_gather_object(gathered, mine, group=group)
    rows = [row if isinstance(row, RankEpoch) else RankEpoch(ok=False) for row in gathered]
    failed = [r for r, row in enumerate(rows) if not row.ok]
    if failed:
        return None, f"it failed on rank(s) {failed}{error}"
    if local is None or len({(row.stage, row.epoch) for row in rows}) > 1:
        closed = ", ".join(f"rank {r}: {row.stage} {row.epoch}" for r, row in enumerate(rows))
        return None, f"the ranks closed different epochs ({closed})"
    return merge_ranks(local, rows), None


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


# -- the gradient all-reduce timer ---------------------------------------------------------------


@dataclass(eq=False)
class CommTimer:
    """State of the DDP communication hook :func:`_timed_allreduce`: the process group, and when
    the last gradient bucket was handed over (local backward compute is done then; what follows
    until backward returns is the wait for the other ranks). Outlives the recorder, harmlessly."""

    process_group: torch.distributed.ProcessGroup | None
    ready_ns: int = 0

    def charge_wait(self, clock: PhaseClock, since_ns: int) -> None:
        """Backward (started at ``since_ns``) has returned: what followed the last gradient
        bucket's hand-over was the wait for the other ranks, charged to ``sync_wait``."""
        if self.ready_ns > since_ns:
            clock.switch_since("sync_wait", self.ready_ns)


def _default_group() -> torch.distributed.ProcessGroup:
    """The default process group, looked up when used (never held)."""
    group = torch.distributed.group.WORLD
    if group is None:
        raise RuntimeError("no default process group")
    return group


def _timed_allreduce(
    state: CommTimer, bucket: torch.distributed.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (the same arithmetic as the built-in hook), stamping the time.
    The annotations are required: DDP checks them at registration."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    group = state.process_group if state.process_group is not None else _default_group()
    future = allreduce_hook(group, bucket)
    state.ready_ns = time.perf_counter_ns()
    return future


if torch.distributed.is_available():
    # DDP compares the annotation objects themselves; this module's annotations are strings.
    _timed_allreduce.__annotations__ = {
        "state": CommTimer,
        "bucket": torch.distributed.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }


def hook_ddp(model: torch.nn.Module) -> CommTimer | None:
    """Register the timing communication hook on a ``DistributedDataParallel`` model (public
    torch API); None for any other model, or one that already has a hook (the user's: not ours
    to replace)."""
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        return None
    # The default group is not held here (None means it to the all-reduce): a reference in the
    # hook's state kept the Gloo group alive past destroy_process_group(), and its teardown at
    # interpreter exit aborted finished runs ("terminate called without an active exception").
    group = model.process_group
    timer = CommTimer(None if group is torch.distributed.group.WORLD else group)
    try:
        model.register_comm_hook(state=timer, hook=_timed_allreduce)
    except (RuntimeError, ValueError):
        return None
    return timer


# -- the recorder's side -------------------------------------------------------------------------


class RankExchange:
    """The recorder's cross-rank job: the epoch-close exchange and the gradient all-reduce
    timer, and what they tell (the last straggler; how ``sync_wait`` is measured).

    Args:
        world_size: ranks of the run; on one process :meth:`gather` is the identity.
        group: the ``torch.distributed`` process group the ranks exchange through (None: the
            default group).
    """

    def __init__(
        self, world_size: int, group: torch.distributed.ProcessGroup | None = None
    ) -> None:
        self.world_size = world_size
        self.group = group
        self.comm: CommTimer | None = None
        #: How this rank's ``sync_wait`` is measured: ``none`` (one process), ``gather`` (our
        #: epoch exchange only) or ``ddp_comm_hook`` (the gradient all-reduce too).
        self.sync_wait_measured = "none" if world_size <= 1 else "gather"
        #: The straggler of the last gathered epoch (a live progress line names it).
        self.straggler: Straggler | None = None

    def hook(self, model: torch.nn.Module | None) -> CommTimer | None:
        """Register the timing communication hook on a DDP ``model`` (once per run; see
        :func:`hook_ddp`); the timer, or None (one process, another model, the user's hook)."""
        if self.world_size <= 1 or self.comm is not None or model is None:
            return self.comm
        self.comm = hook_ddp(model)
        if self.comm is not None:
            self.sync_wait_measured = "ddp_comm_hook"
        return self.comm

    def gather(self, local: EpochRecord | None) -> tuple[EpochRecord | None, str | None]:
        """The epoch's report across ranks from this rank's ``local`` one (None: its recording
        is off) and None; or None and why recording must go off on every rank (see
        :func:`gather_ranks`). On one process: ``local`` itself."""
        if self.world_size <= 1:
            return local, None
        report, off = gather_ranks(local, self.world_size, self.group)
        if report is not None:
            self.straggler = report.straggler
        return report, off
