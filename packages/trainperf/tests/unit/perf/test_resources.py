"""ResourceSampler (with a fake NVML module that has pynvml's real function names) and the
ResourceMonitor's thread, training signals, logging intervals and summary."""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from trainperf.alerts import AlertEngine, build_rules
from trainperf.probe import resources
from trainperf.probe.resources import (
    ResourceMonitor,
    ResourceMonitorWarning,
    ResourceSampler,
    StepSignals,
)
from trainperf.probe.resources.host import memory_limit
from trainperf.probe.resources.monitor import THREAD_NAME
from trainperf.probe.resources.nvml import normalize_uuid
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import ResourceSample, ResourceSummary

from trainperf_testing.fake_nvml import (
    MEMORY_V2,
    Mem2,
    NVMLError_FunctionNotFound,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    device,
    fake_nvml,
)
from trainperf_testing.run_lines import read_dicts

# -- a fake NVML ---------------------------------------------------------------------------------


def test_real_pynvml_names_exist() -> None:
    """The fake mirrors functions that the installed nvidia-ml-py really has."""
    pynvml = pytest.importorskip("pynvml")
    fake = fake_nvml([])
    for name in dir(fake):
        if name.startswith(("nvml", "NVML")):
            assert hasattr(pynvml, name), name


def test_gpu_metrics_for_the_process_devices_matched_by_uuid() -> None:
    nvml = fake_nvml(
        [
            device("GPU-aaaa-1111", util=5),
            device("GPU-BBBB-2222", util=93, reasons=0x20 | 0x4, power_mw=250_000),
        ]
    )
    # torch spells UUIDs without "GPU-"; NVML index 1 becomes this process's gpu0.
    sampler = ResourceSampler(device_uuids=["bbbb-2222"], nvml=nvml)
    assert sampler.status["gpu"].startswith("ok (1 device")
    out = sampler.sample()
    assert out["resources/gpu0_util_percent"] == 93.0
    assert out["resources/gpu0_memory_util_percent"] == 40.0
    assert out["resources/gpu0_memory_used_gb"] == pytest.approx(30.0)
    assert out["resources/gpu0_memory_total_gb"] == pytest.approx(80.0)
    assert out["resources/gpu0_power_w"] == pytest.approx(250.0)
    assert out["resources/gpu0_power_limit_w"] == pytest.approx(700.0)
    assert out["resources/gpu0_temperature_c"] == 71.0
    assert out["resources/gpu0_sm_clock_mhz"] == 1980.0
    assert out["resources/gpu0_throttle_reasons"] == float(0x24)
    assert out["resources/gpu0_throttle_thermal"] == 1.0
    assert out["resources/gpu0_throttle_power"] == 1.0
    assert not any(k.startswith("resources/gpu1_") for k in out)
    sampler.close()
    assert nvml.calls == ["nvmlInit", "nvmlShutdown"]  # type: ignore[attr-defined]


def test_memory_used_from_the_v2_call_without_the_drivers_reserved_memory() -> None:
    """v1 counts the driver's reserved memory as used (0.6 GB above nvidia-smi on an H200);
    the v2 call reports it apart, and its ``used`` is what the sampler records."""
    nvml = fake_nvml([device("GPU-a", used=5 * (1 << 30), reserved=(1 << 30) // 2)])
    sampler = ResourceSampler(nvml=nvml)
    assert sampler.status["gpu"] == "ok (1 device(s) via NVML, memory info v2)"
    out = sampler.sample()
    assert out["resources/gpu0_memory_used_gb"] == 5.0
    assert out["resources/gpu0_memory_total_gb"] == 80.0
    assert nvml.memory_calls == ["v2", "v2"]  # type: ignore[attr-defined]  # probe, sample


@pytest.mark.parametrize(
    ("nvml", "why"),
    [
        (
            fake_nvml([device("GPU-a", v2=NVMLError_FunctionNotFound("Function Not Found"))]),
            "a driver without nvmlDeviceGetMemoryInfo_v2",
        ),
        (fake_nvml([device("GPU-a")], memory_v2=False), "an nvidia-ml-py without nvmlMemory_v2"),
    ],
)
def test_memory_used_falls_back_to_the_v1_call(nvml: types.ModuleType, why: str) -> None:
    sampler = ResourceSampler(nvml=nvml)
    assert sampler.status["gpu"] == "ok (1 device(s) via NVML, memory info v1)", why
    out = sampler.sample()
    assert out["resources/gpu0_memory_used_gb"] == 30.5, why  # used + the driver's reserved
    assert nvml.memory_calls[-1] == "v1", why  # type: ignore[attr-defined]
    assert nvml.memory_calls.count("v2") <= 1, why  # type: ignore[attr-defined]  # the probe


def test_the_real_v2_memory_call_takes_a_version() -> None:
    """The installed nvidia-ml-py serves v2 as the fake does: ``version=nvmlMemory_v2`` selects
    ``nvmlDeviceGetMemoryInfo_v2`` and a struct with ``reserved``."""
    import inspect

    pynvml = pytest.importorskip("pynvml")
    assert pynvml.nvmlMemory_v2 == MEMORY_V2
    assert "version" in inspect.signature(pynvml.nvmlDeviceGetMemoryInfo).parameters
    assert "nvmlDeviceGetMemoryInfo_v2" in inspect.getsource(pynvml.nvmlDeviceGetMemoryInfo)
    fields = [name for name, _ in pynvml.c_nvmlMemory_v2_t._fields_]
    assert fields == list(Mem2._fields)


def test_all_devices_without_a_selection_and_the_older_throttle_name() -> None:
    nvml = fake_nvml([device("GPU-a"), device("GPU-b", reasons=0x40)], use_event_reasons=False)
    out = ResourceSampler(nvml=nvml).sample()
    assert out["resources/gpu0_throttle_thermal"] == 0.0
    assert out["resources/gpu1_throttle_thermal"] == 1.0


def test_unsupported_queries_are_left_out_without_a_warning() -> None:
    nvml = fake_nvml(
        [device("GPU-a", power_mw=NVMLError_NotSupported(), temp=NVMLError_NotSupported())]
    )
    sampler = ResourceSampler(nvml=nvml)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = sampler.sample()
    assert "resources/gpu0_power_w" not in out
    assert "resources/gpu0_temperature_c" not in out
    assert out["resources/gpu0_util_percent"] == 87.0


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {
                "nvml": fake_nvml(
                    [], init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")
                )
            },
            "unavailable (NVMLError_LibraryNotFound: NVML Shared Library Not Found)",
        ),
        (
            {"nvml": fake_nvml([device("GPU-a")]), "device_uuids": ["GPU-zzz"]},
            "unavailable (LookupError: NVML sees no device with UUID zzz",
        ),
        (
            {"nvml": fake_nvml([device("GPU-a")]), "device_uuids": []},
            "unavailable (this process uses no CUDA device)",
        ),
    ],
)
def test_gpu_unavailable_is_a_status_with_the_reason(kwargs: dict[str, Any], expected: str) -> None:
    sampler = ResourceSampler(**kwargs)
    assert sampler.status["gpu"].startswith(expected)
    out = sampler.sample()
    assert not any(k.startswith("resources/gpu") for k in out)
    assert "resources/process_rss_gb" in out  # the rest goes on


def test_real_nvml_on_this_machine_reports_a_status() -> None:
    status = ResourceSampler().status["gpu"]
    assert status.startswith(("ok (", "unavailable ("))


def test_a_failing_gpu_source_warns_once_and_turns_off() -> None:
    nvml = fake_nvml([device("GPU-a", util=RuntimeError("GPU fell off the bus"))])
    sampler = ResourceSampler(nvml=nvml)
    with pytest.warns(ResourceMonitorWarning, match=r"gpu sampling failed.*fell off the bus"):
        first = sampler.sample()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = sampler.sample()
    assert "resources/process_rss_gb" in first
    assert "resources/process_rss_gb" in second
    assert sampler.status["gpu"].startswith("unavailable (RuntimeError")
    assert "nvmlShutdown" in nvml.calls  # type: ignore[attr-defined]


def test_normalize_uuid() -> None:
    assert normalize_uuid(b"GPU-AbC-1") == "abc-1"
    assert normalize_uuid("abc-1") == "abc-1"


# -- host ----------------------------------------------------------------------------------------


def test_disk_and_network_are_rates_from_counter_deltas(monkeypatch: pytest.MonkeyPatch) -> None:
    disk = types.SimpleNamespace(read_bytes=0, write_bytes=0)
    net = types.SimpleNamespace(bytes_recv=0, bytes_sent=0)
    monkeypatch.setattr(psutil, "disk_io_counters", lambda: types.SimpleNamespace(**vars(disk)))
    monkeypatch.setattr(psutil, "net_io_counters", lambda: types.SimpleNamespace(**vars(net)))
    sampler = ResourceSampler(nvml=fake_nvml([]))
    first = sampler.sample(now=100.0)
    assert "resources/disk_read_mb_s" not in first  # no rate from a single reading
    disk.read_bytes, disk.write_bytes = 40 << 20, 10 << 20
    net.bytes_recv, net.bytes_sent = 6 << 20, 2 << 20
    out = sampler.sample(now=102.0)
    assert out["resources/disk_read_mb_s"] == pytest.approx(20.0)
    assert out["resources/disk_write_mb_s"] == pytest.approx(5.0)
    assert out["resources/net_recv_mb_s"] == pytest.approx(3.0)
    assert out["resources/net_sent_mb_s"] == pytest.approx(1.0)
    out = sampler.sample(now=104.0)  # counters unchanged: zero, not the cumulative total
    assert out["resources/disk_read_mb_s"] == 0.0


def test_host_figures_and_per_phase_io(tmp_path: Path) -> None:
    sampler = ResourceSampler(checkpoint_dir=tmp_path / "not" / "yet", nvml=fake_nvml([]))
    sampler.sample()
    payload = tmp_path / "payload.bin"
    sampler.phase = "train"
    payload.write_bytes(b"\x01" * (3 << 20))
    out = sampler.sample()
    sampler.phase = "val"
    assert len(payload.read_bytes()) == 3 << 20
    out = sampler.sample()
    assert out["resources/io_train_write_mb"] >= 3.0
    assert out["resources/io_val_read_mb"] >= 3.0
    assert out["resources/io_val_write_mb"] < 1.0
    assert out["resources/checkpoint_dir_free_gb"] > 0  # the nearest existing parent
    assert out["resources/process_rss_gb"] > 0.01
    assert out["resources/process_uss_gb"] > 0
    assert out["resources/process_threads"] >= 1
    assert 0 <= out["resources/system_memory_percent"] <= 100
    assert out["resources/memory_available_gb"] <= out["resources/memory_limit_gb"]
    limit, available = memory_limit()
    assert 0 < available <= limit


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_workers_are_found_and_their_cpu_read_with_kept_handles() -> None:
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_spin, args=(3.0,))
    # Children left by earlier tests in this process (e.g. DataLoader workers not yet reaped)
    # count as workers too: compare with them.
    before = ResourceSampler(worker_refresh_s=0.01, nvml=fake_nvml([])).sample()
    sampler = ResourceSampler(worker_refresh_s=0.01, nvml=fake_nvml([]))
    child.start()
    try:
        time.sleep(0.3)
        first = sampler.sample()
        time.sleep(0.3)
        second = sampler.sample()
        per_worker = sampler.worker_uss()
    finally:
        child.terminate()
        child.join()
    assert first["resources/workers_count"] == before["resources/workers_count"] + 1
    # each worker's USS by pid (what the worker-memory classifier reads from the samples)
    assert per_worker[str(child.pid)] > 0
    assert sum(per_worker.values()) == pytest.approx(second["resources/workers_uss_gb"] * (1 << 30))
    # Measured from the worker's creation on first sight, from the kept handle after: never 0.
    assert first["resources/workers_cpu_percent"] > 0
    assert second["resources/workers_cpu_percent"] > 0
    assert second["resources/workers_uss_gb"] > 0
    assert second["resources/process_tree_memory_gb"] == pytest.approx(
        second["resources/process_rss_gb"] + second["resources/workers_uss_gb"]
    )


# -- the monitor ---------------------------------------------------------------------------------


class ScriptedSampler:
    """Stands in for ResourceSampler: returns scripted values."""

    def __init__(self, values: Callable[[int], dict[str, float]]) -> None:
        self.values = values
        self.calls = 0
        self.phase = "idle"
        self.status = {"gpu": "unavailable (test)"}
        self.closed = False

    def sample(self, now: float | None = None) -> dict[str, float]:
        self.calls += 1
        return self.values(self.calls - 1)

    def close(self) -> None:
        self.closed = True

    def worker_uss(self) -> dict[str, float]:
        return {"4242": 1e8}


def make_monitor(tmp_path: Path, values: Callable[[int], dict[str, float]], **kw: Any):
    writer = RecordWriter(ResourceSample.path(tmp_path))
    sampler = ScriptedSampler(values)
    monitor = ResourceMonitor(sampler, StepSignals(), writer=writer, **kw)  # type: ignore[arg-type]
    return monitor, sampler


def test_logging_interval_averages_rates_and_keeps_last_gauges(tmp_path: Path) -> None:
    def values(i: int) -> dict[str, float]:
        return {"resources/process_cpu_percent": 10.0 * (i + 1), "resources/process_rss_gb": i}

    monitor, _ = make_monitor(
        tmp_path, values, interval_s=1.0, log_interval_s=3.0, record_samples=False
    )
    for t in range(5):  # interval closes at t=3 with samples 0..3
        monitor.tick(now=float(t))
    records = read_dicts(ResourceSample.path(tmp_path), ResourceSample)
    assert len(records) == 1
    record = records[0]
    assert record["metrics"]["resources/process_cpu_percent"] == pytest.approx(25.0)
    assert record["metrics"]["resources/process_rss_gb"] == 3.0
    assert {"t", "phase", "epoch", "step", "rank", "metrics"} <= set(record)
    assert monitor.take_pending() == record["metrics"]
    assert monitor.take_pending() is None
    summary = monitor.write_summary()
    assert summary["resources/process_cpu_percent_max"] == 50.0
    assert summary["resources/process_cpu_percent_mean"] == pytest.approx(30.0)
    assert summary["resources/samples"] == 5.0
    closing = read_dicts(ResourceSummary.path(tmp_path), ResourceSummary)
    assert closing[0]["metrics"] == summary
    assert closing[0]["status"] == {"gpu": "unavailable (test)"}


def test_every_sample_is_written_while_the_loggers_get_interval_averages(
    tmp_path: Path,
) -> None:
    def values(i: int) -> dict[str, float]:
        cpu = math.nan if i == 2 else 10.0 * (i + 1)  # a failed read: left out, not written
        return {"resources/process_cpu_percent": cpu, "resources/process_rss_gb": float(i)}

    monitor, _ = make_monitor(tmp_path, values, interval_s=1.0, log_interval_s=3.0)
    for t in range(7):
        monitor.tick(now=float(t))
    records = read_dicts(ResourceSample.path(tmp_path), ResourceSample)
    assert [r["metrics"]["resources/process_rss_gb"] for r in records] == [0, 1, 2, 3, 4, 5, 6]
    assert "resources/process_cpu_percent" not in records[2]["metrics"]
    assert records[3]["metrics"]["resources/process_cpu_percent"] == 40.0  # raw, not averaged
    assert {"t", "phase", "epoch", "step", "rank", "metrics"} <= set(records[0])
    assert all(r["workers_uss"] == {"4242": 1e8} for r in records)  # per worker, not logged
    # the loggers' record: the second interval (samples 4..6), rates averaged, gauges last
    assert monitor.take_pending() == {
        "resources/process_cpu_percent": pytest.approx(60.0),
        "resources/process_rss_gb": 6.0,
    }
    monitor.writer.close()  # type: ignore[union-attr]


def test_training_signals_nan_loss_and_data_wait_share(tmp_path: Path) -> None:
    monitor, _ = make_monitor(tmp_path, lambda i: {}, rate_window_s=60.0)
    signals = monitor.signals
    signals.set_phase("train")
    monitor.tick()
    for _ in range(5):
        signals.train_batch_start()
        signals.train_batch_end(torch.tensor(0.5))
        time.sleep(0.02)  # the "data wait" before the next batch
    signals.train_batch_start()
    values = monitor.tick()
    assert values["resources/loss_nonfinite"] == 0.0
    assert 0.5 < values["resources/data_wait_share"] <= 1.0
    assert values["resources/train_steps_per_s"] > 0
    assert values["resources/step_time_median_s"] > 0
    assert values["resources/last_step_age_s"] >= 0
    signals.train_batch_end(torch.tensor(float("nan")))
    assert monitor.tick()["resources/loss_nonfinite"] == 1.0
    signals.set_phase("val")
    assert "resources/data_wait_share" not in monitor.tick()


def test_thread_runs_as_a_daemon_and_is_joined(tmp_path: Path) -> None:
    engine = AlertEngine(build_rules({"nan_loss": {}}))
    monitor, sampler = make_monitor(
        tmp_path, lambda i: {"resources/process_rss_gb": 1.0}, interval_s=0.01, engine=engine
    )
    monitor.start()
    deadline = time.monotonic() + 5
    while sampler.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    threads = [t for t in threading.enumerate() if t.name == THREAD_NAME]
    assert len(threads) == 1
    assert threads[0].daemon
    monitor.close()
    assert sampler.calls >= 3
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]
    assert sampler.closed


def test_a_tick_error_warns_once_and_stops_the_thread(tmp_path: Path) -> None:
    def broken(i: int) -> dict[str, float]:
        raise RuntimeError("boom")

    monitor, sampler = make_monitor(tmp_path, broken, interval_s=0.01)

    def run_until_stopped() -> None:
        monitor.start()
        deadline = time.monotonic() + 5
        while monitor.alive and time.monotonic() < deadline:
            time.sleep(0.01)

    with pytest.warns(ResourceMonitorWarning, match=r"off for the rest of this run.*boom"):
        run_until_stopped()
    assert monitor.failed
    assert not monitor.alive
    assert sampler.calls == 1
    monitor.stop()


def test_metric_docs_cover_what_the_sampler_emits() -> None:
    nvml = fake_nvml([device("GPU-a")])
    sampler = ResourceSampler(nvml=nvml, checkpoint_dir=".")
    sampler.sample()
    out = sampler.sample()
    documented = {
        name.replace("{i}", "0").replace("{phase}", phase)
        for name in resources.METRIC_DOCS
        for phase in ("train", "val", "test", "idle")
    }
    missing = {k.removeprefix("resources/") for k in out} - documented
    assert not missing
    assert all(math.isfinite(v) for v in out.values())
