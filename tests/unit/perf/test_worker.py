"""InstrumentedLoader: same batches as an uninstrumented loader, timing measured where the work
happens (main process or worker) and carried back, data_wait charged, and everything undone.

Timing assertions compare sums against planted ``time.sleep`` calls with a generous tolerance:
against the time the sleeps really took (each sleep measures itself and reports it as a part, so
an overloaded machine that oversleeps does not fail them) and, as a floor, the nominal total.
Exact assertions use reported parts (fixed ns) or a fake clock.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate, get_worker_info
from trainperf.core.clock import PhaseClock
from trainperf.probe import worker as perf_worker
from trainperf.probe.worker import InstrumentedLoader, TimedBatch, WorkerTiming, report_part

from ocr.data.collate import DBCollateFN
from ocr.data.dataset import ReceiptDataset
from ocr.data.transforms import ReceiptTransform

# Without an accelerator torch warns and skips pinning; the loader must still work.
pytestmark = pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")

DECODE_NS = 1_000  # reported per item
TARGETS_NS = 7_000  # reported per batch by the collate below
ITEM_SLEEP_S = 0.02
COLLATE_SLEEP_S = 0.03


class ToyDataset(Dataset[Any]):
    """Items of kind ``dict`` / ``tuple`` / ``tensor``; optional sleep; reports ``decode``."""

    tag = -1  # set per worker by tag_worker_init

    def __init__(self, n: int, kind: str = "dict", sleep_s: float = 0.0) -> None:
        self.n = n
        self.kind = kind
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Any:
        if self.sleep_s:
            planted(self.sleep_s, "item_sleep")
        report_part("decode", DECODE_NS)
        x = torch.arange(3, dtype=torch.float32) + 10 * index
        if self.kind == "dict":
            return {"x": x, "index": index, "name": f"item{index}", "tag": self.tag}
        if self.kind == "tuple":
            return (x, index)
        return x


class GetitemsDataset(ToyDataset):
    """Defines ``__getitems__`` in terms of ``__getitem__`` (the nesting must not double count)."""

    def __getitems__(self, indices: list[int]) -> list[Any]:
        items = [self[i] for i in indices]
        for item in items:
            item["via_getitems"] = True
        return items


class CountingStream(IterableDataset[Any]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield torch.tensor([i])


def planted(seconds: float, part: str) -> None:
    """Sleep, and report how long the sleep really took as part ``part``."""
    start = time.perf_counter_ns()
    time.sleep(seconds)
    report_part(part, time.perf_counter_ns() - start)


def slept_s(timings: list[WorkerTiming], part: str) -> float:
    return sum(t.parts_ns.get(part, 0) for t in timings) / 1e9


def sleepy_collate(items: list[Any]) -> Any:
    planted(COLLATE_SLEEP_S, "collate_sleep")
    report_part("targets", TARGETS_NS)
    return default_collate(items)


def reporting_collate(items: list[Any]) -> Any:
    report_part("targets", TARGETS_NS)
    return default_collate(items)


def tag_worker_init(worker_id: int) -> None:
    info = get_worker_info()
    assert info is not None
    dataset = info.dataset
    assert isinstance(dataset, ToyDataset)
    dataset.tag = 100 + worker_id


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def collect(loader: DataLoader, epochs: int = 1) -> list[Any]:
    return [batch for _ in range(epochs) for batch in loader]


LOADER_CONFIGS = [(0, False), (1, False), (1, True), (2, False), (2, True)]


@pytest.mark.parametrize("kind", ["dict", "tuple", "tensor"])
@pytest.mark.parametrize("pin_memory", [False, True])
@pytest.mark.parametrize(("num_workers", "persistent"), LOADER_CONFIGS)
def test_batches_identical_and_one_timing_per_batch(
    num_workers: int, persistent: bool, pin_memory: bool, kind: str
) -> None:
    def make() -> DataLoader:
        return DataLoader(
            ToyDataset(7, kind),
            batch_size=3,
            num_workers=num_workers,
            persistent_workers=persistent,
            pin_memory=pin_memory,
            collate_fn=reporting_collate,
        )

    expected = collect(make(), epochs=2)
    loader = make()
    timings: list[WorkerTiming] = []
    handle = InstrumentedLoader(loader, timings.append)
    got = collect(loader, epochs=2)
    handle.restore()

    assert len(got) == len(expected) == 6
    assert all(same(g, e) for g, e in zip(got, expected, strict=True))
    assert not any(isinstance(g, TimedBatch) for g in got)
    assert [t.samples for t in timings] == [3, 3, 1] * 2
    assert [t.parts_ns for t in timings] == [
        {"decode": DECODE_NS * t.samples, "targets": TARGETS_NS} for t in timings
    ]
    assert all(t.fetch_timed and t.fetch_ns > 0 and t.collate_ns > 0 for t in timings)
    workers = {t.worker_id for t in timings}
    assert workers == ({-1} if num_workers == 0 else set(range(num_workers)))


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_planted_sleeps_show_in_fetch_and_collate(num_workers: int) -> None:
    loader = DataLoader(
        ToyDataset(8, sleep_s=ITEM_SLEEP_S),
        batch_size=4,
        num_workers=num_workers,
        collate_fn=sleepy_collate,
    )
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    assert len(collect(loader)) == 2
    fetch_s = sum(t.fetch_ns for t in timings) / 1e9
    collate_s = sum(t.collate_ns for t in timings) / 1e9
    assert slept_s(timings, "item_sleep") >= 8 * ITEM_SLEEP_S
    assert fetch_s == pytest.approx(slept_s(timings, "item_sleep"), rel=0.15)
    assert fetch_s >= 8 * ITEM_SLEEP_S
    assert slept_s(timings, "collate_sleep") >= 2 * COLLATE_SLEEP_S
    assert collate_s == pytest.approx(slept_s(timings, "collate_sleep"), rel=0.15)
    assert all(t.parts_ns["targets"] == TARGETS_NS for t in timings)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems_is_timed_once(num_workers: int) -> None:
    loader = DataLoader(
        GetitemsDataset(8, sleep_s=ITEM_SLEEP_S), batch_size=4, num_workers=num_workers
    )
    timings: list[WorkerTiming] = []
    handle = InstrumentedLoader(loader, timings.append)
    batches = collect(loader)
    assert all(batch["via_getitems"].all() for batch in batches)  # the fetcher used it
    fetch_s = sum(t.fetch_ns for t in timings) / 1e9
    assert fetch_s == pytest.approx(slept_s(timings, "item_sleep"), rel=0.15)  # not twice
    assert fetch_s >= 8 * ITEM_SLEEP_S
    assert [t.parts_ns["decode"] for t in timings] == [4 * DECODE_NS] * 2
    handle.restore()
    assert type(loader.dataset) is GetitemsDataset


def test_next_leaves_its_wait_to_the_caller() -> None:
    # The caller brackets next() (Lightning's *_dataloader_next action); only the iterator's
    # creation is charged here (below).
    ticks = [0]

    class TickingDataset(ToyDataset):
        def __getitem__(self, index: int) -> Any:
            ticks[0] += 5
            return super().__getitem__(index)

    loader = DataLoader(TickingDataset(6), batch_size=2)
    clock = PhaseClock(now=lambda: ticks[0])
    InstrumentedLoader(loader, lambda t: None, clock)
    clock.start("forward")
    for _ in loader:
        ticks[0] += 100
    totals = clock.stop()
    assert totals.phases_ns["data_wait"] == 0
    assert totals.phases_ns["forward"] == 6 * 5 + 3 * 100
    assert totals.wall_ns == 330


def test_iterator_creation_is_charged_to_data_wait() -> None:
    # Creating the iterator (worker start-up, persistent-worker reset) blocks the loop: it is
    # data_wait, not unattributed time.
    ticks = [0]

    class SlowStartLoader(DataLoader):
        def __iter__(self) -> Any:
            ticks[0] += 1_000
            return super().__iter__()

    loader = SlowStartLoader(ToyDataset(4), batch_size=2)
    clock = PhaseClock(now=lambda: ticks[0])
    InstrumentedLoader(loader, lambda t: None, clock)
    clock.start("unattributed")
    batches = list(loader)
    totals = clock.stop()
    assert len(batches) == 2
    assert totals.phases_ns["data_wait"] == 1_000
    assert totals.phases_ns["unattributed"] == 0


def test_a_stopped_clock_is_left_alone() -> None:
    loader = DataLoader(ToyDataset(4), batch_size=2)
    clock = PhaseClock()
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append, clock)
    assert len(collect(loader)) == 2
    assert len(timings) == 2
    assert not clock.running


@pytest.mark.parametrize(("num_workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_restore_undoes_everything(num_workers: int, persistent: bool) -> None:
    dataset = ToyDataset(6)
    loader = DataLoader(
        dataset,
        batch_size=2,
        num_workers=num_workers,
        persistent_workers=persistent,
        collate_fn=reporting_collate,
        worker_init_fn=tag_worker_init if num_workers else None,
    )
    plain = collect(loader)
    original_collate, original_init = loader.collate_fn, loader.worker_init_fn
    timings: list[WorkerTiming] = []
    handle = InstrumentedLoader(loader, timings.append)
    assert type(loader) is not DataLoader
    assert isinstance(loader, DataLoader)
    assert loader.collate_fn is not original_collate
    assert all(same(a, b) for a, b in zip(collect(loader), plain, strict=True))
    assert len(timings) == 3
    assert type(loader.dataset) is ToyDataset  # only workers' copies are ever swapped

    handle.restore()
    assert type(loader) is DataLoader
    assert loader.collate_fn is original_collate
    assert loader.worker_init_fn is original_init
    assert type(loader.dataset) is ToyDataset
    after = collect(loader, epochs=2)
    assert all(same(a, b) for a, b in zip(after, plain * 2, strict=True))
    assert len(timings) == 3  # nothing reported after restore
    handle.restore()  # idempotent
    assert type(loader) is DataLoader


def test_persistent_workers_started_before_instrumenting_are_replaced() -> None:
    loader = DataLoader(ToyDataset(4), batch_size=2, num_workers=1, persistent_workers=True)
    plain = collect(loader)  # workers now run with the plain collate
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    again = collect(loader)
    assert all(same(a, b) for a, b in zip(again, plain, strict=True))
    assert [t.worker_id for t in timings] == [0, 0]


def test_restore_mid_epoch_keeps_serving_plain_batches() -> None:
    loader = DataLoader(ToyDataset(8), batch_size=2, num_workers=2, persistent_workers=True)
    plain = collect(loader)
    timings: list[WorkerTiming] = []
    handle = InstrumentedLoader(loader, timings.append)
    iterator = iter(loader)
    first = next(iterator)
    handle.restore()
    rest = list(iterator)
    assert all(same(a, b) for a, b in zip([first, *rest], plain, strict=True))
    assert len(timings) == 1
    assert all(same(a, b) for a, b in zip(collect(loader), plain, strict=True))


def test_original_worker_init_fn_still_runs() -> None:
    loader = DataLoader(ToyDataset(6), batch_size=3, num_workers=2, worker_init_fn=tag_worker_init)
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    batches = collect(loader)
    assert sorted(int(t) for b in batches for t in b["tag"]) == [100] * 3 + [101] * 3
    assert all(t.fetch_timed for t in timings)


def test_spawned_workers_get_picklable_wrappers() -> None:
    loader = DataLoader(
        ToyDataset(4),
        batch_size=2,
        num_workers=1,
        multiprocessing_context="spawn",
        collate_fn=reporting_collate,
        worker_init_fn=tag_worker_init,
    )
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    batches = collect(loader)
    assert [int(t) for b in batches for t in b["tag"]] == [100] * 4
    assert [t.parts_ns for t in timings] == [{"decode": 2 * DECODE_NS, "targets": TARGETS_NS}] * 2
    assert all(t.fetch_timed and t.worker_id == 0 for t in timings)


def test_wrappers_pickle() -> None:
    loader = DataLoader(ToyDataset(2), batch_size=2, worker_init_fn=tag_worker_init)
    InstrumentedLoader(loader, lambda t: None)
    wrapped: Any = loader.collate_fn
    collate = pickle.loads(pickle.dumps(wrapped))
    init = pickle.loads(pickle.dumps(loader.worker_init_fn))
    assert collate.collate_fn is wrapped.collate_fn is default_collate
    assert init.worker_init_fn is tag_worker_init
    timing = WorkerTiming(1, 2, {"a": 3}, 4, 0)
    assert pickle.loads(pickle.dumps(TimedBatch({"x": 1}, timing))) == TimedBatch({"x": 1}, timing)


def test_a_list_dataset_works_with_fetch_untimed() -> None:
    data = [torch.tensor([float(i)]) for i in range(6)]
    loader: DataLoader = DataLoader(data, batch_size=2, num_workers=1)  # type: ignore[arg-type]
    plain = collect(DataLoader(data, batch_size=2))  # type: ignore[arg-type]
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    assert all(same(a, b) for a, b in zip(collect(loader), plain, strict=True))
    assert [(t.fetch_timed, t.fetch_ns, t.samples) for t in timings] == [(False, 0, 2)] * 3


def test_an_iterable_dataset_gets_collate_timing() -> None:
    loader = DataLoader(CountingStream(6), batch_size=3, num_workers=1)
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    batches = collect(loader)
    assert torch.equal(torch.cat(batches), torch.arange(6).reshape(6, 1))
    assert [(t.fetch_timed, t.samples) for t in timings] == [(False, 3)] * 2
    assert all(t.collate_ns > 0 for t in timings)


def test_without_automatic_batching_samples_is_one() -> None:
    loader = DataLoader(ToyDataset(3, "tensor"), batch_size=None)
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    batches = collect(loader)
    assert all(same(b, ToyDataset(3, "tensor")[i]) for i, b in enumerate(batches))
    assert [t.samples for t in timings] == [1, 1, 1]


def test_report_part_outside_instrumented_work_is_dropped() -> None:
    report_part("decode", 10**9)  # main process, no loader running: must not leak into a batch
    assert perf_worker._ACC.parts == {}
    loader = DataLoader(ToyDataset(2), batch_size=2)
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    report_part("decode", 10**9)
    collect(loader)
    assert timings[0].parts_ns == {"decode": 2 * DECODE_NS}
    # A direct call of the wrapped collate (outside next()) returns the plain batch.
    direct = loader.collate_fn([ToyDataset(1)[0]])
    assert not isinstance(direct, TimedBatch)
    assert same(direct, default_collate([ToyDataset(1)[0]]))


def test_on_batch_errors_go_to_on_error_or_propagate() -> None:
    def broken(timing: WorkerTiming) -> None:
        raise RuntimeError("callback bug")

    errors: list[BaseException] = []
    loader = DataLoader(ToyDataset(6), batch_size=2)
    InstrumentedLoader(loader, broken, on_error=errors.append)
    assert len(collect(loader)) == 3  # the loader keeps serving
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)

    loader2 = DataLoader(ToyDataset(6), batch_size=2)
    InstrumentedLoader(loader2, broken)
    with pytest.raises(RuntimeError, match="callback bug"):
        collect(loader2)


def test_bad_arguments() -> None:
    loader = DataLoader(ToyDataset(2))
    with pytest.raises(TypeError, match="DataLoader"):
        InstrumentedLoader([1, 2], lambda t: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        InstrumentedLoader(loader, None)  # type: ignore[arg-type]
    handle = InstrumentedLoader(loader, lambda t: None)
    with pytest.raises(ValueError, match="already instrumented"):
        InstrumentedLoader(loader, lambda t: None)
    handle.restore()
    InstrumentedLoader(loader, lambda t: None)  # again after restore: fine
    assert type(loader) is not DataLoader


@pytest.mark.parametrize("num_workers", [0, 1])
def test_receipt_pipeline_reports_its_parts(receipts_dir: Path, num_workers: int) -> None:
    dataset = ReceiptDataset(
        receipts_dir / "images", receipts_dir / "annotations.json", ReceiptTransform(128)
    )
    loader = DataLoader(dataset, batch_size=2, num_workers=num_workers, collate_fn=DBCollateFN())
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    (batch,) = collect(loader)
    assert batch["images"].shape == (2, 3, 128, 128)
    assert "prob_maps" in batch
    (timing,) = timings
    assert set(timing.parts_ns) == {"decode", "transform", "targets"}
    assert all(ns > 0 for ns in timing.parts_ns.values())
    # Parts are measured inside the intervals they belong to.
    assert timing.parts_ns["decode"] + timing.parts_ns["transform"] <= timing.fetch_ns
    assert timing.parts_ns["targets"] <= timing.collate_ns


class CountingDataset(Dataset[Any]):
    """Reports one ``fetched`` count per item, and ``odd`` for odd indices."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> torch.Tensor:
        perf_worker.report_count("fetched")
        if index % 2:
            perf_worker.report_count("odd", 10)
        return torch.tensor(index)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_report_count_travels_with_each_batch(num_workers: int) -> None:
    loader = DataLoader(CountingDataset(), batch_size=2, num_workers=num_workers)
    timings: list[WorkerTiming] = []
    InstrumentedLoader(loader, timings.append)
    collect(loader)
    assert [t.counts for t in timings] == [{"fetched": 2, "odd": 10}] * 3
    # Outside instrumented work a count is dropped, never carried into a later batch.
    perf_worker.report_count("fetched", 100)
    assert perf_worker._ACC.counts == {}
    # The counts survive pickling (worker -> main process).
    assert pickle.loads(pickle.dumps(timings[0])).counts == {"fetched": 2, "odd": 10}
