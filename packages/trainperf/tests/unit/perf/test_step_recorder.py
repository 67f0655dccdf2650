"""The neutral run recorder (``trainperf.recording.run_recorder.RunRecorder``) driven by hand, as
any loop may, and the plain loop's DataLoader rebuild for ``trainperf try``
(``trainperf.loop.trial_knobs``)."""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset
from trainperf import perf_phase
from trainperf.core.knobs import Knob
from trainperf.errors import PerfCallbackWarning
from trainperf.loop.trial_knobs import rebuild_loader
from trainperf.recording.run_recorder import INTERVAL_BATCHES, RunRecorder, batch_size_of
from trainperf.records.epochs import IntervalRecord
from trainperf.records.files import read_records


def _records(run: Path) -> list[dict[str, Any]]:
    lines = (run / "perf" / "epochs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_loop_driving_the_step_api_gets_epoch_records(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, track_memory=False)
    rec.open_epoch("train", 0)
    for _ in range(3):
        rec.switch("forward")
        time.sleep(0.005)
        with perf_phase("metric"):  # the active clock is the recorder's
            time.sleep(0.002)
        rec.switch("unattributed")
        rec.batch_end("train", samples=5)
        if rec.windows.states["train"].epoch.num_batches == 2:  # type: ignore[union-attr]
            rec.open_epoch("val", 0)  # validation inside training pauses it
            time.sleep(0.05)
            rec.batch_end("val", samples=2)
            rec.close_epoch("val")
    train = rec.close_epoch("train")
    rec.close()
    assert train is not None
    assert (train.num_batches, train.samples, train.batch_size) == (3, 15, 5)
    assert math.isclose(sum(train.phases_s.values()), train.wall_s, rel_tol=1e-9)
    assert train.phases_s["forward"] >= 0.015
    assert train.phases_s["metric"] >= 0.006
    assert train.wall_s < 0.05 + train.phases_s["forward"]  # the validation time is not in it
    records = _records(tmp_path)
    assert [(r["stage"], r["num_batches"]) for r in records] == [("val", 1), ("train", 3)]
    assert records[0]["wall_s"] >= 0.05
    run = json.loads((tmp_path / "perf" / "run.json").read_text())
    assert run["world_size"] == 1
    assert run["device"] == "cpu"
    life = [json.loads(x) for x in (tmp_path / "perf" / "lifecycle.jsonl").read_text().splitlines()]
    assert [(x["event"], x["status"]) for x in life] == [("start", None), ("end", "finished")]


def test_the_recorder_writes_a_progress_record_every_interval_of_training_batches(
    tmp_path: Path,
) -> None:
    """Every adapter gets the same cadence from the recorder; ``global_step`` is the loop's
    (optimizer steps) when it gives one, else one per training batch."""
    rec = RunRecorder(tmp_path, track_memory=False)
    rec.open_epoch("train", 0)
    for n in range(2 * INTERVAL_BATCHES + 1):
        rec.switch("forward")
        rec.batch_end("train", samples=2, global_step=n // 2)
    rec.close_epoch("train")
    rec.open_epoch("train", 1)
    for _ in range(INTERVAL_BATCHES):
        rec.batch_end("train", samples=2)
    rec.close("finished")
    rows = read_records(IntervalRecord.path(tmp_path), IntervalRecord)
    assert [(r.epoch, r.num_batches, r.step) for r in rows] == [
        (0, INTERVAL_BATCHES, (INTERVAL_BATCHES - 1) // 2),
        (0, 2 * INTERVAL_BATCHES, (2 * INTERVAL_BATCHES - 1) // 2),
        (1, INTERVAL_BATCHES, INTERVAL_BATCHES + INTERVAL_BATCHES),
    ]


def test_a_failing_worker_timing_is_one_warning_and_recording_goes_off(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, track_memory=False)
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
    assert rec.instrument(loader, "train")
    rec.windows.states["train"].add_timing = None  # type: ignore[assignment,method-assign]
    rec.open_epoch("train", 0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        batches = list(loader)  # the loop goes on
    assert len(batches) == 4
    said = [w for w in seen if issubclass(w.category, PerfCallbackWarning)]
    assert len(said) == 1
    assert "off for the rest of this run" in str(said[0].message)
    assert rec.finished
    assert rec.close_epoch("train") is None


def test_batch_size_of_batches_of_any_shape() -> None:
    assert batch_size_of(torch.zeros(7, 3)) == 7
    assert batch_size_of({"x": torch.zeros(4, 2), "y": [1, 2]}) == 4
    assert batch_size_of((["a", "b", "c"],)) == 3
    assert batch_size_of(object()) == 0


def _knob(text: str) -> Knob:
    return Knob.parse_setting(text)


def test_rebuild_keeps_the_loaders_arguments_and_changes_the_knobs() -> None:
    def collate(items: list[tuple[torch.Tensor]]) -> torch.Tensor:
        return torch.stack([i[0] for i in items])

    data = TensorDataset(torch.arange(12.0).unsqueeze(1))
    loader = DataLoader(data, batch_size=3, collate_fn=collate, drop_last=True)
    new, note = rebuild_loader(loader, [_knob("dataloader.num_workers=2")])
    assert (new.num_workers, new.batch_size, new.drop_last) == (2, 3, True)
    assert new.collate_fn is collate
    assert new.prefetch_factor == 2
    assert note == "training DataLoader: num_workers 0 -> 2"
    back, _ = rebuild_loader(new, [_knob("dataloader.num_workers=0")])
    assert back.prefetch_factor is None  # a loader without workers takes none
    assert [b.tolist() for b in back] == [b.tolist() for b in loader]


def test_rebuild_refuses_what_it_cannot_read_back() -> None:
    data = TensorDataset(torch.zeros(8, 1))

    class Mine(DataLoader):
        pass

    with pytest.raises(ValueError, match=r"is a Mine, not a torch\.utils\.data\.DataLoader"):
        rebuild_loader(Mine(data), [_knob("dataloader.num_workers=2")])

    class Pairs(BatchSampler):
        pass

    custom = DataLoader(data, batch_sampler=Pairs(SequentialSampler(data), 2, False))
    with pytest.raises(ValueError, match="made by Pairs, not batch_size"):
        rebuild_loader(custom, [_knob("dataloader.batch_size=4")])
    new, _ = rebuild_loader(custom, [_knob("dataloader.num_workers=1")])
    assert new.batch_sampler is custom.batch_sampler  # the user's own object


def test_the_epoch_exchange_runs_over_the_group_it_is_given(tmp_path: Path) -> None:
    import torch.distributed as dist
    from trainperf.recording.cross_rank import gather_ranks

    rec = RunRecorder(tmp_path, track_memory=False)
    rec.open_epoch("train", 0)
    rec.batch_end("train", samples=3)
    local = rec.windows.close_window(
        "train", timed=True, owner_groups={}, sync_wait_measured="gather", global_step=1
    )
    rec.close()
    assert local is not None
    store = dist.HashStore()
    dist.init_process_group("gloo", rank=0, world_size=1, store=store)
    try:
        group = dist.new_group([0])
        seen: list[object] = []
        real = dist.all_gather_object

        def spy(rows: list[object], mine: object, group: object = None) -> None:
            seen.append(group)
            real(rows, mine, group=group)

        dist.all_gather_object = spy  # type: ignore[assignment]
        try:
            merged, off = gather_ranks(local, 1, group)
        finally:
            dist.all_gather_object = real
    finally:
        dist.destroy_process_group()
    assert off is None
    assert merged is not None
    assert seen == [group]
    assert (merged.world_size, merged.global_samples) == (1, 3)


def test_a_validation_close_inside_training_charges_the_exchange_to_sync_wait(
    tmp_path: Path,
) -> None:
    """Under several ranks the exchange at validation's close waits for the others: the train
    window it pauses no longer shows that wait as ``unattributed``."""
    rec = RunRecorder(tmp_path, track_memory=False)
    rec.world_size = 2  # one process standing in for a rank of two

    class SlowExchange:
        sync_wait_measured = "gather"

        def gather(self, local: Any) -> tuple[Any, None]:
            time.sleep(0.03)
            return local, None

    rec.exchange = SlowExchange()  # type: ignore[assignment]
    rec.open_epoch("train", 0)
    rec.batch_end("train", samples=2)
    rec.open_epoch("val", 0)
    rec.batch_end("val", samples=2)
    rec.close_epoch("val")
    assert rec.clock.current == "unattributed"  # the phase the gather interrupted, back
    train = rec.close_epoch("train")
    rec.close()
    assert train is not None
    assert train.phases_s["sync_wait"] >= 0.025
    assert train.phases_s["unattributed"] < 0.025
