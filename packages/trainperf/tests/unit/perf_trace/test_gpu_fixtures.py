"""What the real GPU traces in ../shared/fixtures/traces must report."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from trainperf.analysis.trace import analyze_trace


@functools.cache
def _analyze(path: Path) -> dict:
    # each fixture file is analysed once per session; the reports are only read
    return analyze_trace(path)


@pytest.fixture
def resnet_2021(traces_dir: Path) -> dict:
    return _analyze(Path(traces_dir) / "gpu_resnet50_2021.pt.trace.json.gz")


@pytest.fixture
def trace_2024(traces_dir: Path) -> dict:
    return _analyze(Path(traces_dir) / "gpu_ns_resolution_2024.pt.trace.json.gz")


def _parts_sum_to_wall(report: dict) -> None:
    for step in report["steps"]:
        assert sum(step["phases_ms"].values()) == pytest.approx(step["wall_ms"], abs=1e-5)
        assert sum(step["gpu_ms"].values()) == pytest.approx(step["wall_ms"], abs=1e-5)
        assert min(step["gpu_ms"].values()) >= 0


def test_resnet_2021_is_dominated_by_data_loading(resnet_2021: dict) -> None:
    r = resnet_2021
    assert r["summary"]["has_gpu"]
    assert r["summary"]["n_steps"] == 6
    assert [s["number"] for s in r["steps"]] == [5, 6, 7, 8, 9, 10]
    assert 35 < r["dataloader_time_pct"] < 45
    phases = r["phase_summary"]["train"]["phases"]
    assert max(phases, key=lambda p: phases[p]["pct"]) == "data_wait"
    ids = {f["id"]: f for f in r["findings"]}
    assert ids["data_loading"]["severity"] == "critical"
    assert ids["data_loading"]["evidence"]["loader"] == ["_SingleProcessDataLoaderIter"]
    assert "num_workers" in ids["data_loading"]["suggestion"]
    # SGD of 2021 has no foreach: its per-parameter loop runs on the host with the GPU idle, one
    # finding for one optimizer (optimizer_not_multi_tensor is not printed beside it)
    assert "optimizer_host_bound" in ids
    assert "optimizer_not_multi_tensor" not in ids
    loop = ids["optimizer_host_bound"]["evidence"]
    assert loop["optimizer"] == ["SGD"]
    assert loop["host_loop_ms_per_step"] > 3 * loop["optimizer_gpu_ms_per_step"]
    # its two blocking calls per step are the pageable copies' (aten::to in transfer),
    # microseconds each: one waited for queued work, the other found the GPU idle
    assert r["metrics"]["sync_calls_per_step"] == 1
    assert r["metrics"]["sync_idle_calls_per_step"] == 1
    assert r["metrics"]["sync_top"] == {"cudaStreamSynchronize": 12}
    assert "host_sync" not in ids
    assert "low_gpu_utilisation" in ids
    _parts_sum_to_wall(r)


def test_resnet_2021_kernels_and_memory(resnet_2021: dict) -> None:
    r = resnet_2021
    kinds = {row["kind"] for row in r["top_cuda_op_rows"]}
    assert "kernel" in kinds
    top = r["top_cuda_op_rows"][0]
    assert "cudnn" in top["name"]
    assert top["launched_by"].startswith("aten::cudnn_convolution_backward")
    gpu = r["phase_summary"]["train"]["gpu"]
    assert gpu["kernel"]["pct"] > 40
    assert gpu["memcpy"]["mean_ms"] > 0
    peaks = {p["device"]: p for p in r["memory_peak_rows"]}
    assert peaks["cuda:0"]["estimated"]  # 2021 has only per-event Bytes
    assert peaks["cuda:0"]["capacity_bytes"] == 34084028416
    assert 0 < peaks["cuda:0"]["pct_of_capacity"] < 90


def test_resnet_2021_documented_pairs(resnet_2021: dict) -> None:
    """The original project's shape on a real GPU trace: ``top_cuda_ops`` as ``(op_name,
    time_us)`` pairs of the device rows' total time, ``memory_peaks`` as ``(time, bytes)``."""
    r = resnet_2021
    rows = r["top_cuda_op_rows"]
    assert r["top_cuda_ops"] == [(row["name"], round(row["total_ms"] * 1e3, 3)) for row in rows]
    assert "cudnn" in r["top_cuda_ops"][0][0]
    assert r["memory_peaks"]
    for (at_us, peak), row in zip(r["memory_peaks"], r["memory_peak_rows"], strict=True):
        assert (at_us, peak) == (round(row["at_ms"] * 1e3, 3), row["peak_allocated_bytes"])
    assert all(isinstance(b, int) and b > 0 for _, b in r["memory_peaks"])


def test_2024_trace_uses_explicit_markers_and_keeps_gpu_busy(trace_2024: dict) -> None:
    r = trace_2024
    assert r["summary"]["ranks"] == [0]
    assert r["summary"]["n_steps"] == 5
    phases = r["phase_summary"]["train"]["phases"]
    assert phases["backward"]["pct"] > phases["forward"]["pct"] > 20
    assert r["dataloader_time_pct"] == 0
    ids = {f["id"] for f in r["findings"]}
    assert "data_loading" not in ids
    assert "low_gpu_utilisation" not in ids
    assert "optimizer_not_multi_tensor" not in ids  # its SGD uses _foreach_ ops
    assert r["metrics"]["gpu_busy_pct"] > 90
    assert r["top_cuda_op_rows"][0]["kind"] == "kernel"
    # warm-up steps #101/#102 are much shorter than the rest
    assert {o["step"] for o in r["step_stats"]["train"]["outliers"]} == {
        "ProfilerStep#101",
        "ProfilerStep#102",
    }
    _parts_sum_to_wall(r)


def test_fixture_directory_holds_two_sources(traces_dir: Path) -> None:
    r = analyze_trace(traces_dir, top_k=5)
    assert len(r["sources"]) == 2
    assert r["summary"]["n_steps"] == 11
    assert len(r["top_cpu_ops"]) == 5
    assert {row["steps"] for row in r["per_rank"]} == {5, 6}


@pytest.mark.parametrize("fixture", ["resnet_2021", "trace_2024"])
def test_gpu_time_per_phase_from_launching_ops(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    r = request.getfixturevalue(fixture)
    for step in r["steps"]:
        gpu_phases = step["gpu_phases_ms"]
        # every kernel and copy is attributed by the phase of the call that launched it: at
        # most the device's total (streams may overlap), and backward's kernels are there
        launched = sum(gpu_phases.values())
        device = step["gpu_ms"]["kernel"] + step["gpu_ms"]["memcpy"] + step["gpu_ms"]["memset"]
        assert 0.5 * device < launched
        assert gpu_phases["backward"] > gpu_phases["optimizer"] > 0
        assert gpu_phases["forward"] > 0
        assert gpu_phases["data_wait"] == 0  # the DataLoader launches nothing


def test_resnet_2021_backward_on_the_autograd_thread_and_transfer(resnet_2021: dict) -> None:
    phases = resnet_2021["phase_summary"]["train"]["phases"]
    # the backward ops run on the autograd thread: the host phase still sees backward
    assert phases["backward"]["mean_ms"] > phases["optimizer"]["mean_ms"] > 0
    # the batch's host-to-device copies (aten::to) are a transfer phase of their own
    assert phases["transfer"]["mean_ms"] > 0
    gpu = resnet_2021["phase_summary"]["train"]["gpu_phases"]
    assert gpu["transfer"]["mean_ms"] == pytest.approx(
        resnet_2021["phase_summary"]["train"]["gpu"]["memcpy"]["mean_ms"], rel=0.05
    )
    # the optimizer finding counts per parameter: resnet50 has 161 parameter tensors
    assert resnet_2021["metrics"]["optimizer_params"] == 161
