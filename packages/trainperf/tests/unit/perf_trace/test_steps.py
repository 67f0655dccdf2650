"""Analyses on a trace recorded in the test and on synthetic traces with known answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trainperf.analysis.trace import analyze_trace
from trainperf.analysis.trace.aggregates import step_statistics
from trainperf.analysis.trace.step_phases import PHASES, classify_phase, union_in_windows

from trainperf_testing.synth import make_trace, write

CUDA_FINDINGS = {"low_gpu_utilisation", "memory_near_capacity", "host_sync", "launch_overhead"}


def test_self_time_matches_key_averages_within_1_percent(
    recorded_cpu_trace: tuple[Path, dict[str, Any]],
) -> None:
    path, averages = recorded_cpu_trace
    report = analyze_trace(path, top_k=None)
    ours = {r["name"]: r for r in report["top_cpu_op_rows"] + report["top_annotations"]}
    checked = 0
    for key, (count, self_us) in averages.items():
        if self_us < 1.0:  # sub-µs totals: the trace's ns rounding dominates
            continue
        row = ours[key]
        assert row["calls"] == count, key
        assert row["self_ms"] * 1e3 == pytest.approx(self_us, rel=0.01), key
        checked += 1
    assert checked >= 20


def test_recorded_cpu_trace_breakdown(recorded_cpu_trace: tuple[Path, dict[str, Any]]) -> None:
    report = analyze_trace(recorded_cpu_trace[0])
    assert report["summary"]["n_steps"] == 3
    assert not report["summary"]["has_gpu"]
    assert report["top_cuda_ops"] == []
    for step in report["steps"]:
        assert sum(step["phases_ms"].values()) == pytest.approx(step["wall_ms"], abs=1e-6)
        assert step["phases_ms"]["forward"] > 0
        assert step["phases_ms"]["backward"] > 0
        assert step["phases_ms"]["optimizer"] > 0
        assert step["phases_ms"]["data_wait"] > 0
        assert "gpu_ms" not in step
    peak = report["memory_peak_rows"][0]
    assert peak["device"] == "cpu"
    assert not peak["estimated"]
    assert peak["peak_allocated_bytes"] > 0
    assert report["memory_timeline"]["cpu"]
    assert not CUDA_FINDINGS & {f["id"] for f in report["findings"]}


def test_synthetic_phases_are_exact(tmp_path: Path) -> None:
    report = analyze_trace(write(make_trace(n_steps=4, jitter=0.0), tmp_path / "t.json"))
    step = report["steps"][0]
    # see synth.make_trace: data 100 µs (starts 1 µs in), forward 2+405+21, backward 301, opt 52
    assert step["phases_ms"]["data_wait"] == pytest.approx(0.100)
    assert step["phases_ms"]["backward"] == pytest.approx(0.300)
    assert step["phases_ms"]["optimizer"] == pytest.approx(0.050)
    assert sum(step["phases_ms"].values()) == pytest.approx(step["wall_ms"], abs=1e-6)
    assert report["dataloader_time_pct"] == pytest.approx(100 * 0.1 / step["wall_ms"], rel=1e-3)
    assert [f["id"] for f in report["findings"]] == ["data_loading"]


def test_duplicate_profiler_step_numbers_are_kept_apart(tmp_path: Path) -> None:
    doc = make_trace(n_steps=3, shuffle=False)
    for ev in doc["traceEvents"]:
        if ev["name"] == "ProfilerStep#3":
            ev["name"] = "ProfilerStep#2"
    # an exact duplicate span is dropped with a note
    dup = next(e for e in doc["traceEvents"] if e["name"] == "ProfilerStep#1")
    doc["traceEvents"].append(dict(dup))
    report = analyze_trace(write(doc, tmp_path / "t.json"))
    assert [s["step"] for s in report["steps"]] == [
        "ProfilerStep#1",
        "ProfilerStep#2",
        "ProfilerStep#2 (2)",
    ]
    assert any("ProfilerStep spans" in w for w in report["warnings"])


def test_two_ranks_report_per_rank_rows(tmp_path: Path) -> None:
    write(make_trace(rank=0, seed=1), tmp_path / "a.json")
    write(make_trace(rank=1, seed=2, conv_us=800), tmp_path / "b.json")
    report = analyze_trace(tmp_path)
    assert report["summary"]["ranks"] == [0, 1]
    rows = {r["rank"]: r for r in report["per_rank"]}
    assert rows[0]["steps"] == rows[1]["steps"] == 6
    assert rows[1]["median_step_ms"] > rows[0]["median_step_ms"] + 0.3


@pytest.mark.parametrize(
    ("name", "phase"),
    [
        ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "data_wait"),
        ("Optimizer.zero_grad#Adam.zero_grad", "optimizer"),
        ("## backward ##", "backward"),
        ("[pl][profile][Strategy]SingleDeviceStrategy.training_step", "forward"),
        ("[pl][profile][Strategy]SingleDeviceStrategy.backward", "backward"),
        ("[pl][profile][_TrainingEpochLoop].train_dataloader_next", "data_wait"),
        ("[pl][profile][Callback]ModelCheckpoint.on_train_batch_end", "callbacks"),
        ("[pl][profile][Callback]ModelCheckpoint.on_save_checkpoint", "checkpoint"),
        ("[pl][profile][LightningModule]M.on_train_batch_start", "module_hooks"),
        ("[pl][profile][LightningModule]M.optimizer_step", "optimizer"),
        ("[pl][module]torch.nn.modules.conv.Conv2d: net.0", "forward"),
    ],
)
def test_classify_phase(name: str, phase: str) -> None:
    assert PHASES[classify_phase(name)] == phase


def test_containers_and_ops_are_not_markers() -> None:
    assert classify_phase("[pl][profile]run_training_batch") == -1
    assert classify_phase("aten::mm") == -1


def test_union_in_windows_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 1000, 50)
    ends = starts + rng.integers(1, 60, 50)
    ws = np.array([0, 100, 250, 990])
    we = np.array([100, 400, 260, 1100])
    covered = np.zeros(1200, bool)
    for s, e in zip(starts, ends, strict=True):
        covered[s:e] = True
    expect = [int(covered[a:b].sum()) for a, b in zip(ws, we, strict=True)]
    assert union_in_windows(starts, ends, ws, we).tolist() == expect


def test_step_statistics_flags_robust_outliers() -> None:
    wall = np.array([100, 101, 99, 100, 102, 180], dtype=np.int64) * 1_000_000
    stats = step_statistics(wall, [f"s{i}" for i in range(6)])
    assert stats is not None
    assert stats.median_ms == pytest.approx(100.5)
    assert [o.step for o in stats.outliers] == ["s5"]
    assert step_statistics(np.zeros(0, np.int64), []) is None
