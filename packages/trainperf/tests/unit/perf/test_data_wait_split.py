"""The consumer's data wait split into its causes (issue 32): waiting for a worker to finish the
batch vs the hand-over after it (the worker's send, the main process's receive and pin), and
main-process loading with ``num_workers=0``; plus the bytes and tensors each batch reports.

Delays are planted: a slow ``__getitem__`` (the worker is late) or a slow unpickling in the main
process (the receive is slow). Assertions compare shares of the measured wait with wide margins,
never a wall time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info
from trainperf.core.stage import Stage
from trainperf.probe.worker import InstrumentedLoader, WorkerTiming, tensor_bytes
from trainperf.recording.stage_state import StageState
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records

pytestmark = pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")

RECEIVE_SLEEP_S = 0.1
ITEM_SLEEP_S = 0.1


def _slow_to_unpickle(payload: torch.Tensor) -> torch.Tensor:
    """Rebuilds the payload; in the main process (not a worker) after a planted sleep."""
    if get_worker_info() is None:
        time.sleep(RECEIVE_SLEEP_S)
    return payload


class SlowReceive:
    """A batch element whose unpickling in the main process takes ``RECEIVE_SLEEP_S``."""

    def __init__(self, payload: torch.Tensor) -> None:
        self.payload = payload

    def __reduce__(self) -> tuple[Any, ...]:
        return (_slow_to_unpickle, (self.payload,))


class Items(Dataset[Any]):
    """``n`` items of a 1 KiB float32 tensor; ``sleep_s`` per item in ``__getitem__``."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n = n
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.full((256,), float(index))


def _slow_receive_collate(items: list[torch.Tensor]) -> dict[str, Any]:
    return {"x": torch.stack(items), "slow": SlowReceive(torch.zeros(1))}


def _timings(loader: DataLoader) -> list[WorkerTiming]:
    out: list[WorkerTiming] = []
    handle = InstrumentedLoader(loader, out.append)
    try:
        for _ in loader:
            pass
    finally:
        handle.restore()
    return out


def test_a_late_worker_is_waiting_for_the_worker() -> None:
    loader = DataLoader(Items(8, sleep_s=ITEM_SLEEP_S), batch_size=2, num_workers=1)
    timings = _timings(loader)
    assert len(timings) == 4
    wait = sum(t.wait_ns for t in timings)
    assert sum(t.worker_wait_ns for t in timings) >= 0.6 * wait
    assert all(0 <= t.worker_wait_ns <= t.wait_ns for t in timings)
    assert all(t.done_ns > 0 and t.worker_id == 0 for t in timings)


def test_a_slow_receive_is_the_hand_over_not_the_worker() -> None:
    loader = DataLoader(Items(8), batch_size=2, num_workers=2, collate_fn=_slow_receive_collate)
    timings = _timings(loader)
    assert len(timings) == 4
    wait = sum(t.wait_ns for t in timings)
    handover = wait - sum(t.worker_wait_ns for t in timings)
    assert wait >= 4 * RECEIVE_SLEEP_S * 1e9 * 0.9  # every batch waited for its unpickling
    assert handover >= 0.6 * wait


def test_in_process_loading_is_main_loading() -> None:
    loader = DataLoader(Items(6, sleep_s=0.01), batch_size=3, num_workers=0)
    timings = _timings(loader)
    assert [t.worker_wait_ns for t in timings] == [0, 0]
    assert all(t.wait_ns >= 3 * 0.01 * 1e9 * 0.9 for t in timings)
    state = StageState()
    for t in timings:
        state.add_timing(t)
    causes, mean_bytes, tensors = state.take_input_figures()
    assert set(causes) == {"main_loading"}
    assert causes["main_loading"] == pytest.approx(sum(t.wait_ns for t in timings) / 1e9)
    assert (mean_bytes, tensors) == (3 * 256 * 4, 1)
    assert state.take_input_figures() == ({}, None, None)  # taken: reset


@pytest.mark.parametrize("num_workers", [0, 1])
def test_batches_report_their_bytes_and_tensors(num_workers: int) -> None:
    loader = DataLoader(Items(4), batch_size=2, num_workers=num_workers)
    timings = _timings(loader)
    assert [(t.batch_bytes, t.batch_tensors) for t in timings] == [(2 * 256 * 4, 1)] * 2


def test_tensor_bytes_walks_mappings_and_sequences_only() -> None:
    batch = {
        "a": torch.zeros(4, dtype=torch.uint8),
        "b": [torch.zeros(2, dtype=torch.float64), (torch.zeros(3, dtype=torch.int32),)],
        "c": "text",
        "d": [[[[torch.zeros(100)]]]],  # deeper than three levels: not counted
    }
    assert tensor_bytes(batch) == (4 + 16 + 12, 3)
    assert tensor_bytes(torch.zeros(5)) == (20, 1)
    assert tensor_bytes(None) == (0, 0)


def test_stage_state_splits_worker_and_handover() -> None:
    state = StageState()
    timing = WorkerTiming(1, 2, {}, 4, 0, done_ns=50, batch_bytes=1000, batch_tensors=2)
    timing.wait_ns, timing.worker_wait_ns = 30_000_000, 10_000_000
    state.add_timing(timing)
    state.add_timing(timing)
    causes, mean_bytes, tensors = state.take_input_figures()
    assert causes == {"worker": 0.02, "receive": 0.04}
    assert (mean_bytes, tensors) == (1000.0, 2)


def test_epoch_records_without_the_new_fields_still_load(tmp_path: Path) -> None:
    """Folders written before issue 32 have no data_wait_causes_s / batch_bytes / tensors."""
    record = EpochRecord(stage=Stage.TRAIN, wall_s=1.0, batch_bytes=10.0, batch_tensors=2)
    line = json.loads(msgspec.json.encode(record))
    assert line["batch_bytes"] == 10.0
    for key in ("data_wait_causes_s", "batch_bytes", "batch_tensors"):
        line.pop(key, None)
    path = tmp_path / EpochRecord.FILE
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    (old,) = read_records(path, EpochRecord)
    assert (old.data_wait_causes_s, old.batch_bytes, old.batch_tensors) == ({}, None, None)
