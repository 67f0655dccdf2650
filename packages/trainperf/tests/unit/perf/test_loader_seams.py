"""DataLoader worker timing decides from what this torch has, not from its version: each private
seam it relies on is taken away in turn (deleted, or its signature or behaviour changed as a
future torch might); the check names exactly that one, the performance callbacks' gate gives it
as the reason timing is off, and ``InstrumentedLoader`` leaves the loader untouched. With every
seam present (the installed torch) nothing is missing and the loader is instrumented.

The warning itself and a fit that stays without worker timing: ``tests/integration/
test_interpose_seams.py::test_seam_missing_torch_seam_turns_worker_timing_off_with_one_warning``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils.data._utils.fetch as torch_fetch
import torch.utils.data._utils.worker as torch_worker
import torch.utils.data.dataloader as torch_dataloader
from torch.utils.data import DataLoader, default_collate
from trainperf.lightning import interpose
from trainperf.probe import loader_seams
from trainperf.probe.worker import InstrumentedLoader, WorkerTiming


@pytest.fixture(autouse=True)
def fresh_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test checks afresh; the process's cached result comes back afterwards."""
    monkeypatch.setattr(loader_seams, "_FOUND", None)


def _no_base_iterator(mp: pytest.MonkeyPatch) -> None:
    mp.delattr(torch_dataloader, "_BaseDataLoaderIter")


def _no_reset(mp: pytest.MonkeyPatch) -> None:
    mp.delattr(torch_dataloader._BaseDataLoaderIter, "_reset")


def _no_cached_iterator(mp: pytest.MonkeyPatch) -> None:
    original = DataLoader.__init__

    def init(self: DataLoader, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        object.__delattr__(self, "_iterator")

    mp.setattr(DataLoader, "__init__", init)


def _collate_read_at_construction(mp: pytest.MonkeyPatch) -> None:
    """A torch whose iterators ignore a collate_fn set after the loader was built."""
    original = torch_dataloader._BaseDataLoaderIter.__init__

    def init(self: Any, loader: DataLoader) -> None:
        original(self, loader)
        self._collate_fn = default_collate

    mp.setattr(torch_dataloader._BaseDataLoaderIter, "__init__", init)


def _collate_frozen(mp: pytest.MonkeyPatch) -> None:
    """A torch that freezes collate_fn after construction, as it freezes batch_size."""
    original = DataLoader.__setattr__

    def setattr_(self: DataLoader, name: str, value: Any) -> None:
        if name == "collate_fn" and getattr(self, "_DataLoader__initialized", False):
            raise ValueError(
                "collate_fn attribute should not be set after DataLoader is initialized"
            )
        original(self, name, value)

    mp.setattr(DataLoader, "__setattr__", setattr_)


def _worker_loop_without_init_fn(mp: pytest.MonkeyPatch) -> None:
    def _worker_loop(dataset_kind, dataset, index_queue, data_queue, done_event, auto_collation,
                     collate_fn, drop_last, base_seed, worker_setup, worker_id, num_workers,
                     persistent_workers, shared_seed):  # fmt: skip  # type: ignore[no-untyped-def]
        raise AssertionError("never called")

    mp.setattr(torch_worker, "_worker_loop", _worker_loop)


def _fetcher_without_dataset(mp: pytest.MonkeyPatch) -> None:
    """A fetcher that works but no longer takes (and holds) the dataset object itself."""
    base = torch_fetch._MapDatasetFetcher

    class _MapDatasetFetcher(base):  # type: ignore[valid-type,misc]
        def __init__(self, source: Any, auto_collation: bool, collate_fn: Any, drop_last: bool):
            super().__init__(source, auto_collation, collate_fn, drop_last)

    mp.setattr(torch_fetch, "_MapDatasetFetcher", _MapDatasetFetcher)


def _no_fetcher(mp: pytest.MonkeyPatch) -> None:
    """Without it the in-process loader breaks too: the late-collate probe says so as well."""
    mp.delattr(torch_fetch, "_MapDatasetFetcher")


# (how the seam is taken away, the seam it must name, what the check must say was found)
BREAKS: list[tuple[Callable[[pytest.MonkeyPatch], None], str, str]] = [
    (_no_base_iterator, "torch.utils.data.dataloader._BaseDataLoaderIter", "missing"),
    (_no_reset, "torch.utils.data.dataloader._BaseDataLoaderIter", "no _reset"),
    (_no_cached_iterator, "torch.utils.data.DataLoader._iterator", "has no _iterator"),
    (_collate_read_at_construction, "DataLoader.collate_fn / worker_init_fn", "did not collate"),
    (_collate_frozen, "DataLoader.collate_fn / worker_init_fn", "refused: collate_fn attribute"),
    (_worker_loop_without_init_fn, "torch.utils.data._utils.worker._worker_loop", "init_fn"),
    (_fetcher_without_dataset, "torch.utils.data._utils.fetch._MapDatasetFetcher", "dataset"),
    (_no_fetcher, "torch.utils.data._utils.fetch._MapDatasetFetcher", "missing"),
]


def test_every_seam_is_present_in_the_installed_torch() -> None:
    assert loader_seams.missing() == ()
    assert interpose.worker_timing_off() is None
    timings: list[WorkerTiming] = []
    loader: DataLoader[Any] = DataLoader(torch.arange(8.0), batch_size=4)  # type: ignore[arg-type]
    handle = InstrumentedLoader(loader, timings.append)
    assert [b.tolist() for b in loader] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    handle.restore()
    assert [t.samples for t in timings] == [4, 4]


def test_the_check_runs_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    assert loader_seams.missing() == ()
    _no_base_iterator(monkeypatch)
    assert loader_seams.missing() == ()  # cached: the first answer holds
    assert len(loader_seams.recheck()) == 1


@pytest.mark.parametrize(
    ("take_away", "seam", "found"), BREAKS, ids=[b[0].__name__.strip("_") for b in BREAKS]
)
def test_a_missing_seam_is_named_and_turns_worker_timing_off(
    monkeypatch: pytest.MonkeyPatch,
    take_away: Callable[[pytest.MonkeyPatch], None],
    seam: str,
    found: str,
) -> None:
    take_away(monkeypatch)
    missing = loader_seams.missing()
    named = [m for m in missing if m.startswith(seam)]
    assert len(named) == 1, missing
    assert found in named[0].split(": ", 1)[1]
    others = [m for m in missing if m not in named]
    if take_away is _no_fetcher:
        assert others[0].startswith("DataLoader.collate_fn")
        assert "_MapDatasetFetcher" in others[0]
    else:
        assert others == []
    reason = interpose.worker_timing_off()
    assert reason is not None
    assert seam in reason
    assert f"torch {torch.__version__}" in reason
    assert reason.startswith("DataLoader worker timing (fetch, collate, parts) is off")
    # The probe itself refuses, and the loader is left as it was.
    loader: DataLoader[Any] = DataLoader([0, 1, 2, 3], batch_size=2)  # type: ignore[arg-type]
    collate, cls = loader.collate_fn, type(loader)
    with pytest.raises(RuntimeError, match="DataLoader worker timing"):
        InstrumentedLoader(loader, lambda timing: None)
    assert loader.collate_fn is collate
    assert type(loader) is cls


def test_the_dataset_argument_of_the_worker_loop_is_not_relied_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.15 hands the worker loop its dataset in a holder (``dataset_holder``): still
    measured, the seam is the loader's collate_fn and worker_init_fn reaching the worker."""

    def _worker_loop(dataset_kind, dataset_holder, index_queue, data_queue, done_event,
                     auto_collation, collate_fn, drop_last, base_seed, init_fn, worker_id,
                     num_workers, persistent_workers, shared_seed):  # fmt: skip  # type: ignore[no-untyped-def]
        raise AssertionError("never called")

    monkeypatch.setattr(torch_worker, "_worker_loop", _worker_loop)
    assert loader_seams.missing() == ()


def test_a_check_that_raises_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: DataLoader, *args: Any, **kwargs: Any) -> None:
        raise TypeError("DataLoader() needs a pipeline now")

    monkeypatch.setattr(DataLoader, "__init__", broken)
    missing = loader_seams.missing()
    assert missing[0] == (
        "torch.utils.data.DataLoader._iterator: TypeError: DataLoader() needs a pipeline now"
    )
