"""The cross-rank exchange of the performance callbacks without a Trainer: merging every rank's
figures (ranks with different callbacks), and the exchange itself on a one-process gloo group."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from trainperf.core.clock import PHASES
from trainperf.core.stage import Stage
from trainperf.recording.cross_rank import RankEpoch, gather_ranks, merge_ranks
from trainperf.records.epochs import EpochRecord


def report(
    samples: int = 32, wall_s: float = 2.0, callbacks: dict[str, float] | None = None
) -> EpochRecord:
    callbacks = callbacks or {}
    phases = dict.fromkeys(PHASES, 0.0)
    phases["callbacks"] = sum(callbacks.values())
    phases["forward"] = wall_s - phases["callbacks"]
    return EpochRecord(
        stage=Stage.TRAIN,
        epoch=3,
        wall_s=wall_s,
        phases_s=phases,
        gpu_phases_s={},
        worker_s={"fetch": 0.1, "collate": 0.05},
        batch_stats={"mean": wall_s / 8},
        num_batches=8,
        samples=samples,
        memory={},
        peak_rss_gb=1.0,
        peak_gpu_memory_gb=math.nan,
        global_samples=samples,
        global_batches=8,
        global_wall_s=wall_s,
        callbacks_s=callbacks,
    )


def test_ranks_with_different_callbacks_merge_and_the_extra_one_is_named_for_its_rank() -> None:
    mine = report(callbacks={"ThroughputMonitorCallback": 0.001})
    rank1 = report(
        samples=30, wall_s=2.5, callbacks={"ThroughputMonitorCallback": 0.001, "ImageLogger": 0.499}
    )
    rows = [RankEpoch.of(mine), RankEpoch.of(rank1)]
    merged = merge_ranks(mine, rows)
    assert merged.world_size == 2
    assert merged.callbacks_s_by_rank == (
        {"ThroughputMonitorCallback": 0.001},
        {"ThroughputMonitorCallback": 0.001, "ImageLogger": 0.499},
    )
    assert merged.global_samples == 62
    assert merged.global_batches == 16
    assert merged.global_wall_s == 2.5
    assert merged.samples == 32  # this rank's own figures stay
    assert merged.spreads["epoch_time"]["slowest_rank"] == 1
    assert "slowest_rank" not in merged.spreads["samples_per_sec"]
    assert merged.straggler is not None
    assert merged.straggler.rank == 1
    assert merged.straggler.cause == "callbacks: ImageLogger"


@pytest.fixture
def one_rank_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank_group")
def test_the_exchange_round_trips_through_the_collective() -> None:
    merged, off = gather_ranks(report(), 1)
    assert off is None
    assert merged is not None
    assert merged.callbacks_s_by_rank == ({},)
    assert merged.global_samples == 32


@pytest.mark.usefixtures("one_rank_group")
def test_a_rank_that_fails_still_joins_the_collective_with_its_flag_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[RankEpoch] = []
    real = dist.all_gather_object

    def counting(rows: list[object], mine: RankEpoch) -> None:
        calls.append(mine)
        real(rows, mine)

    def broken(cls: type[RankEpoch], local: EpochRecord) -> RankEpoch:
        raise RuntimeError("planted")

    monkeypatch.setattr(dist, "all_gather_object", counting)
    monkeypatch.setattr(RankEpoch, "of", classmethod(broken))
    merged, off = gather_ranks(report(), 1)
    assert merged is None
    assert off == "it failed on rank(s) [0] (RuntimeError: planted)"
    merged, off = gather_ranks(None, 1)  # recording already off here
    assert merged is None
    assert off == "it failed on rank(s) [0]"
    assert [row.ok for row in calls] == [False, False]  # both times in the collective


def test_without_a_process_group_every_rank_turns_off_alike() -> None:
    assert not dist.is_initialized()
    merged, off = gather_ranks(report(), 2)
    assert merged is None
    assert off is not None
    assert "no torch.distributed process group" in off


@pytest.mark.usefixtures("one_rank_group")
def test_the_timing_hook_holds_no_default_group_and_still_all_reduces() -> None:
    """A reference to the default group in the hook's state kept the Gloo group alive past
    destroy_process_group(): finished 2-rank runs then aborted at exit (3 in 12, 0 in 12
    without the reference). The hook looks the group up when it runs instead."""
    from torch.nn.parallel import DistributedDataParallel
    from trainperf.recording.cross_rank import hook_ddp

    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    timer = hook_ddp(model)
    assert timer is not None
    assert timer.process_group is None
    model(torch.randn(8, 4)).sum().backward()
    assert timer.ready_ns > 0
    assert model.module.weight.grad is not None
