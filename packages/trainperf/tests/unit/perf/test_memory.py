"""memory_snapshot / peak_sample / reset_peak_memory: keys, types, the cached process handle, fake
CUDA."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import pytest
import torch
from trainperf.probe import device_memory as memory
from trainperf.probe.device_memory import GB, memory_snapshot, peak_sample, reset_peak_memory

CUDA_KEYS = {"cuda_allocated_gb", "cuda_reserved_gb", "cuda_max_allocated_gb"}


def test_host_keys_and_values() -> None:
    snap = memory_snapshot()
    cuda_live = torch.cuda.is_available() and torch.cuda.is_initialized()
    expected = {"process_rss_gb", "system_memory_percent"} | (CUDA_KEYS if cuda_live else set())
    assert set(snap) == expected
    assert all(type(v) is float for v in snap.values())
    assert 0.001 < snap["process_rss_gb"] < 1024  # this interpreter holds torch: > 1 MB
    assert 0.0 <= snap["system_memory_percent"] <= 100.0


def test_process_handle_is_cached() -> None:
    memory_snapshot()
    first = memory._process
    memory_snapshot()
    assert first is not None
    assert first.pid == os.getpid()
    assert memory._process is first


def _child_pid_matches(queue: Any) -> None:
    memory_snapshot()
    handle = memory._process
    queue.put(handle is not None and handle.pid == os.getpid())


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
def test_forked_child_gets_its_own_handle() -> None:
    memory_snapshot()  # the parent's handle is inherited by the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_pid_matches, args=(queue,))
    child.start()
    result = queue.get(timeout=30)
    child.join(timeout=30)
    assert result is True


def test_without_initialised_cuda_no_cuda_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert not CUDA_KEYS & set(memory_snapshot())


def test_fake_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)

    def reader(name: str, value: int):  # type: ignore[no-untyped-def]
        def read(device: int) -> int:
            calls.append((name, device))
            return value

        return read

    monkeypatch.setattr(torch.cuda, "memory_allocated", reader("allocated", int(1.5 * GB)))
    monkeypatch.setattr(torch.cuda, "memory_reserved", reader("reserved", 2 * int(GB)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", reader("max", 3 * int(GB)))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reader("reset", 0))

    assert peak_sample()["cuda_max_allocated_gb"] == 3.0
    calls.clear()
    snap = memory_snapshot()
    assert snap["cuda_allocated_gb"] == 1.5
    assert snap["cuda_reserved_gb"] == 2.0
    assert snap["cuda_max_allocated_gb"] == 3.0
    assert all(type(snap[k]) is float for k in CUDA_KEYS)
    reset_peak_memory()
    assert calls == [("allocated", 1), ("reserved", 1), ("max", 1), ("reset", 1)]


def test_reset_peak_memory_without_cuda_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def forbidden(*args: object) -> None:
        raise AssertionError("must not touch CUDA")

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", forbidden)
    reset_peak_memory()
    assert not CUDA_KEYS & set(memory_snapshot())


def test_peak_sample_reads_what_the_peaks_need() -> None:
    """The in-epoch sample: this process's RSS (the snapshot's reading) without the host-wide
    figures; the CUDA peak only with initialised CUDA."""
    cuda_live = torch.cuda.is_available() and torch.cuda.is_initialized()
    sample = peak_sample()
    assert set(sample) == {"process_rss_gb"} | ({"cuda_max_allocated_gb"} if cuda_live else set())
    assert type(sample["process_rss_gb"]) is float
    assert sample["process_rss_gb"] == pytest.approx(memory_snapshot()["process_rss_gb"], rel=0.1)
