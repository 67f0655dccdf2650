"""The integrity section: clean on the real traces, and one problem per way of breaking them
(each broken trace built here from a real one: the session's CPU trace or a real GPU trace)."""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from trainperf.analysis.trace import analyze_trace

GPU_2024 = "gpu_ns_resolution_2024.pt.trace.json.gz"
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _read(path: Path) -> dict[str, Any]:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt") as f:
            return json.load(f)
    return json.loads(path.read_text())


def _analyze(doc: dict[str, Any], tmp_path: Path, name: str = "broken.json") -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return analyze_trace(path)


def _ids(report: dict[str, Any]) -> list[str]:
    return [p["id"] for p in report["integrity"]["problems"]]


@pytest.fixture
def cpu_doc(recorded_cpu_trace: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    return _read(recorded_cpu_trace[0])


@functools.cache
def _gpu_doc_cached(traces_dir: Path) -> dict[str, Any]:
    return _read(traces_dir / GPU_2024)


@pytest.fixture
def gpu_doc(traces_dir: Path) -> dict[str, Any]:
    return copy.deepcopy(_gpu_doc_cached(Path(traces_dir)))


def _steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(
        (e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )


def test_real_traces_are_clean(
    recorded_cpu_trace: tuple[Path, dict[str, Any]], traces_dir: Path
) -> None:
    for path in (recorded_cpu_trace[0], *sorted(Path(traces_dir).glob("*.json.gz"))):
        report = analyze_trace(path)
        assert report["integrity"] == {"clean": True, "problems": []}, path


def test_events_outside_steps(cpu_doc: dict[str, Any], tmp_path: Path) -> None:
    last_end = max(e["ts"] + e["dur"] for e in _steps(cpu_doc))
    ops = [e for e in cpu_doc["traceEvents"] if e.get("cat") == "cpu_op"]
    # the same ops again after the last step (work the profiler saw outside its steps)
    cpu_doc["traceEvents"] += [{**e, "ts": e["ts"] - ops[0]["ts"] + last_end + 10} for e in ops]
    report = _analyze(cpu_doc, tmp_path)
    (problem,) = report["integrity"]["problems"]
    assert problem["id"] == "events_outside_steps"
    assert problem["count"] >= len(ops)
    # the copies hold half the ops' self time; the annotations' (steps, optimizer, loader) is all
    # inside the steps, and grows with the machine's load: the share is judged against both
    full = analyze_trace(tmp_path / "broken.json", top_k=None)
    ops = sum(r["self_ms"] for r in full["top_cpu_op_rows"])
    labels = sum(r["self_ms"] for r in full["top_annotations"])
    expected = 100.0 * (ops / 2) / (ops + labels)
    assert problem["share_pct"] == pytest.approx(expected, rel=0.1)
    assert "top_cpu_ops" in problem["affects"]


def test_device_events_without_launching_call(gpu_doc: dict[str, Any], tmp_path: Path) -> None:
    launches = [
        e
        for e in gpu_doc["traceEvents"]
        if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaLaunchKernel"
    ]
    for e in launches[::2]:  # half the launches lose their correlation id (dropped records)
        e["args"] = {}
    report = _analyze(gpu_doc, tmp_path)
    assert _ids(report) == ["unlinked_device_events"]
    problem = report["integrity"]["problems"][0]
    assert problem["count"] > 100
    assert problem["share_pct"] > 5
    assert "steps.gpu_phases_ms" in problem["affects"]


def _cut(doc: dict[str, Any], at: float) -> None:
    """The profiler stopped at ``at`` (µs): later events are gone, open spans closed there."""
    kept = []
    for e in doc["traceEvents"]:
        ts = e.get("ts")
        if isinstance(ts, int | float) and e.get("ph") in ("X", "i") and ts >= at:
            continue
        if e.get("ph") == "X" and ts + e.get("dur", 0) > at:
            e["dur"] = at - ts
        kept.append(e)
    doc["traceEvents"] = kept


def test_a_step_cut_by_the_window_edge_cpu(cpu_doc: dict[str, Any], tmp_path: Path) -> None:
    last = _steps(cpu_doc)[-1]
    # cut in the middle of the step's longest op, so that a span is open at the edge whatever
    # the recorded timing (a cut between two ops would leave nothing to see)
    ops = [
        e
        for e in cpu_doc["traceEvents"]
        if e.get("cat") == "cpu_op"
        and e.get("tid") == last["tid"]
        and last["ts"] < e["ts"]
        and e["ts"] + e["dur"] < last["ts"] + last["dur"]
    ]
    longest = max(ops, key=lambda e: e["dur"])
    _cut(cpu_doc, longest["ts"] + 0.5 * longest["dur"])
    report = _analyze(cpu_doc, tmp_path)
    assert _ids(report) == ["cut_steps"]
    assert last["name"] in report["integrity"]["problems"][0]["message"]


def test_a_step_cut_by_the_window_edge_gpu(gpu_doc: dict[str, Any], tmp_path: Path) -> None:
    last = _steps(gpu_doc)[-1]
    _cut(gpu_doc, last["ts"] + 0.5 * last["dur"])
    report = _analyze(gpu_doc, tmp_path)
    assert "cut_steps" in _ids(report)
    problem = next(p for p in report["integrity"]["problems"] if p["id"] == "cut_steps")
    assert last["name"] in problem["message"]
    assert problem["count"] == 1


def test_two_processes_in_one_file(cpu_doc: dict[str, Any], tmp_path: Path) -> None:
    other = [
        {**e, "pid": 999_999}
        for e in cpu_doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
    ]
    cpu_doc["traceEvents"] += other
    report = _analyze(cpu_doc, tmp_path)
    assert "mixed_processes" in _ids(report)
    problem = next(p for p in report["integrity"]["problems"] if p["id"] == "mixed_processes")
    assert problem["count"] == 2
    assert "999999" in problem["message"]


def test_negative_and_implausible_durations(cpu_doc: dict[str, Any], tmp_path: Path) -> None:
    ops = [e for e in cpu_doc["traceEvents"] if e.get("cat") == "cpu_op"]
    for e in ops[:3]:
        e["dur"] = -5.0
    ops[3]["dur"] = 1e12  # 11.6 days in µs
    ops[4]["dur"] = 1e20  # beyond int64 nanoseconds: it read as a negative length before
    report = _analyze(cpu_doc, tmp_path)
    assert "invalid_durations" in _ids(report)
    problem = next(p for p in report["integrity"]["problems"] if p["id"] == "invalid_durations")
    assert problem["count"] == 5
    assert "4 negative, missing or overflowing" in problem["message"]
    assert "1 longer than twice the whole trace" in problem["message"]


def test_a_gpu_run_without_its_device_timeline(gpu_doc: dict[str, Any], tmp_path: Path) -> None:
    gpu_doc["traceEvents"] = [e for e in gpu_doc["traceEvents"] if e.get("cat") not in _DEVICE_CATS]
    report = _analyze(gpu_doc, tmp_path)
    assert _ids(report) == ["no_device_timeline"]
    problem = report["integrity"]["problems"][0]
    assert "kernel launches" in problem["message"]
    assert "metrics.gpu_busy_pct" in problem["affects"]
