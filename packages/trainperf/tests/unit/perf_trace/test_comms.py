"""Communication per step against a brute-force oracle, on traces built from real ones: the
real GPU trace with some of its kernels renamed to NCCL collectives (device view), the session's
CPU trace with a gloo all-reduce span added on another thread (host view)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from trainperf.analysis.trace import analyze_trace, load_traces
from trainperf.analysis.trace.comms import communication, subtract
from trainperf.analysis.trace.step_phases import PHASES
from trainperf.analysis.trace.steps import compute_steps
from trainperf.analysis.trace.table import EventTable, Kind

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _covered(starts: np.ndarray, ends: np.ndarray, left: np.ndarray) -> np.ndarray:
    """Whether each elementary interval starting at ``left`` lies inside one of the intervals
    (brute force: every interval against every point)."""
    if starts.size == 0:
        return np.zeros(left.size, bool)
    return ((starts[None, :] <= left[:, None]) & (ends[None, :] > left[:, None])).any(axis=1)


def _oracle(
    comm: tuple[np.ndarray, np.ndarray], busy: tuple[np.ndarray, np.ndarray], s: int, e: int
) -> tuple[int, int]:
    """(ns in collectives, of which exposed) inside ``[s, e)``."""
    cs, ce = np.clip(comm[0], s, e), np.clip(comm[1], s, e)
    bs, be = np.clip(busy[0], s, e), np.clip(busy[1], s, e)
    cuts = np.unique(np.concatenate([[s, e], cs, ce, bs, be]))
    left, width = cuts[:-1], np.diff(cuts)
    in_comm = _covered(cs, ce, left)
    in_busy = _covered(bs, be, left)
    return int(width[in_comm].sum()), int(width[in_comm & ~in_busy].sum())


def _spans(table: EventTable, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    idx = np.flatnonzero(mask)
    return table.start[idx], table.start[idx] + table.dur[idx]


def test_subtract_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    a_s = rng.integers(0, 1000, 40)
    a_e = a_s + rng.integers(1, 80, 40)
    b_s = rng.integers(0, 1000, 40)
    b_e = b_s + rng.integers(1, 80, 40)
    es, ee = subtract(a_s, a_e, b_s, b_e)
    grid = np.arange(0, 1100)
    want = _covered(a_s, a_e, grid) & ~_covered(b_s, b_e, grid)
    assert _covered(es, ee, grid).tolist() == want.tolist()


@pytest.fixture
def gpu_with_nccl(traces_dir: Path, tmp_path: Path) -> Path:
    with gzip.open(Path(traces_dir) / "gpu_ns_resolution_2024.pt.trace.json.gz", "rt") as f:
        doc = json.load(f)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[::7]:
        e["name"] = NCCL
    out = tmp_path / "nccl.json"
    out.write_text(json.dumps(doc))
    return out


def test_device_view_matches_the_oracle(gpu_with_nccl: Path) -> None:
    table = load_traces(gpu_with_nccl)
    steps = compute_steps(table)
    comm = communication(table, steps)
    assert comm.method == {0: "device"}
    is_nccl = table.name_ids(lambda n: n == NCCL)[table.name] & (table.kind == Kind.KERNEL)
    others = (table.kind == Kind.KERNEL) & ~is_nccl
    for i in range(len(steps)):
        total, exposed = _oracle(
            _spans(table, is_nccl), _spans(table, others), int(steps.start[i]), int(steps.end[i])
        )
        assert comm.total[i] == total
        assert comm.exposed[i] == exposed
        assert comm.overlapped[i] == total - exposed
        assert comm.exposed_phases[i].sum() <= exposed
        assert (comm.exposed_phases[i] <= steps.phases[i]).all()
    assert comm.total.sum() > 0
    assert comm.calls[0][NCCL] > 0


def test_device_view_in_the_analysis(gpu_with_nccl: Path) -> None:
    report = analyze_trace(gpu_with_nccl)
    (row,) = report["communication"]
    assert row["method"] == "device"
    assert row["ms_per_step"] == pytest.approx(
        row["overlapped_ms_per_step"] + row["exposed_ms_per_step"], abs=2e-3
    )
    assert report["metrics"]["comm_method"] == "device"
    # one stream: nothing overlaps, every collective is exposed (14 % of the step here)
    assert row["overlap_pct"] == 0.0
    finding = next(f for f in report["findings"] if f["id"] == "communication_bound")
    assert finding["evidence"]["exposed_in"] == "backward"
    assert finding["evidence"]["exposed_pct"] == pytest.approx(row["exposed_pct"], abs=0.01)
    assert "bucket_cap_mb" in finding["suggestion"]
    assert "comm hook" in finding["suggestion"]  # GPU: compression


def test_host_view_matches_the_oracle(
    recorded_cpu_trace: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    doc = json.loads(recorded_cpu_trace[0].read_text())
    steps_ev = sorted(
        (e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    main = steps_ev[0]
    # gloo's all-reduce on its own thread: the second half of every step (overlapping the
    # step's own ops there, and the wait after them)
    for st in steps_ev:
        doc["traceEvents"].append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "gloo:all_reduce",
                "pid": main["pid"],
                "tid": 424242,
                "ts": st["ts"] + 0.5 * st["dur"],
                "dur": 0.45 * st["dur"],
            }
        )
    path = tmp_path / "gloo.json"
    path.write_text(json.dumps(doc))
    table = load_traces(path)
    steps = compute_steps(table)
    comm = communication(table, steps)
    assert comm.method == {0: "host"}
    gloo = table.name_ids(lambda n: n == "gloo:all_reduce")[table.name]
    for i in range(len(steps)):
        ops = (table.kind == Kind.CPU_OP) & (table.thread == steps.thread[i]) & (table.dur > 0)
        total, exposed = _oracle(
            _spans(table, gloo), _spans(table, ops), int(steps.start[i]), int(steps.end[i])
        )
        assert comm.total[i] == total
        assert comm.exposed[i] == exposed
        # the host view charges the exposed time exactly to the phases it falls in
        assert comm.exposed_phases[i].sum() == exposed
    assert 0 < comm.exposed.sum() < comm.total.sum()
    assert set(np.flatnonzero(comm.exposed_phases.sum(axis=0)).tolist()) <= set(range(len(PHASES)))


def test_a_gpu_rank_set_shows_device_communication_side_by_side(
    gpu_with_nccl: Path, tmp_path: Path
) -> None:
    """Two ranks of the NCCL trace (the same events: equal ranks, equal clocks)."""
    from trainperf.analysis.trace.rankset import analyze_rank_set

    doc = json.loads(gpu_with_nccl.read_text())
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in (0, 1):
        info = {**doc["distributedInfo"], "rank": rank, "world_size": 2}
        (folder / f"r{rank}.json").write_text(json.dumps({**doc, "distributedInfo": info}))
    result = analyze_rank_set(folder, jobs=1)
    assert result is not None
    rows = {r.rank: r for r in result.ranks}
    assert rows[0] == msgspec.structs.replace(rows[1], rank=0, files=["r0.json"])
    assert rows[0].comm_method == "device"
    assert rows[0].gpu_busy_pct is not None
    assert rows[0].phases_ms["sync_wait"] == rows[0].comm_exposed_ms > 0
    assert [(s.stage, s.rank) for s in result.stragglers] == [("train", None)]
    assert result.integrity.clean
