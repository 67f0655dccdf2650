"""A file too large for one table (issue 21.1): spilled to disk and analysed in time windows, it
gives the same analysis as the file analysed whole, for CPU traces, Lightning traces whose spans
overlap without nesting, and real GPU traces (kernels still running across a cut, memory)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trainperf.analysis.trace import spill, windowed
from trainperf.analysis.trace.analyze import timed_analysis
from trainperf.analysis.trace.ingest import _open_parents, load_traces
from trainperf.analysis.trace.table import Kind, TraceError

from trainperf_testing.bigtrace import write_replicated
from trainperf_testing.windowed_checks import _plain, _whole_and_windowed


def test_a_replicated_cpu_trace_in_windows_is_the_trace_whole(
    recorded_cpu_trace: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    write_replicated(recorded_cpu_trace[0], path, 3 << 20)
    (whole, by_hook), (parts, parts_by_hook), n = _whole_and_windowed(path, monkeypatch, 1000)
    assert n >= 4
    assert whole.summary.n_steps >= 10
    assert whole.memory_peaks
    assert _plain(parts) == _plain(whole)
    assert parts_by_hook == by_hook


def test_the_gpu_fixtures_in_windows_are_the_fixtures_whole(
    traces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path in sorted(traces_dir.glob("*.json.gz")):
        (whole, _), (parts, _), n = _whole_and_windowed(path, monkeypatch, 5000)
        assert n >= 4, path.name
        assert whole.summary.has_gpu
        assert whole.top_cuda_ops
        assert _plain(parts) == _plain(whole), path.name


def _lightning_like(path: Path) -> Path:
    """Steps whose spans overlap the callbacks' spans without nesting in them (as Lightning's
    ``[pl][profile]`` spans and ``ProfilerStep#N`` do), inside one epoch span that crosses every
    cut, with ops in each step."""
    ev: list[dict[str, Any]] = []

    def span(name: str, ts: float, dur: float, cat: str = "user_annotation") -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})

    span("[pl][profile]run_training_epoch", 0.0, 10_000.0)
    for k in range(40):
        t = 100.0 + 200.0 * k
        span(f"ProfilerStep#{k}", t, 190.0)
        span("[pl][profile][Callback]Logger.on_train_batch_end", t - 20.0, 40.0)  # overlaps
        span("[pl][profile][LightningModule]M.training_step", t + 30.0, 100.0)
        for j in range(5):
            span("aten::mm", t + 35.0 + 15.0 * j, 10.0 + j, cat="cpu_op")
            span("aten::empty", t + 36.0 + 15.0 * j, 2.0, cat="cpu_op")
        span("Optimizer.step#SGD.step", t + 140.0, 30.0)
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_spans_that_overlap_without_nesting_give_the_same_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _lightning_like(tmp_path / "lightning.json")
    (whole, by_hook), (parts, parts_by_hook), n = _whole_and_windowed(path, monkeypatch, 60)
    assert n >= 8
    assert _plain(parts) == _plain(whole)
    assert parts_by_hook == by_hook
    # the epoch span's self time counts every window's gaps: its duration less its children's
    epoch = next(r for r in whole.top_annotations if r.name.endswith("run_training_epoch"))
    assert 0 < epoch.self_ms < 10.0


def test_parents_by_pointer_jumping_are_the_stack_of_open_spans() -> None:
    """The vectorised parent search against the plain stack walk, on random overlapping
    spans (nested, overlapping without nesting, equal)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        m = int(rng.integers(1, 300))
        s = np.sort(rng.integers(0, 1000, m))
        e = s + rng.integers(1, 300, m)
        order = np.lexsort((-e, s))
        s, e = s[order], e[order]
        expected = np.full(m, -1)
        stack: list[int] = []
        for i in range(m):
            while stack and e[stack[-1]] <= s[i]:
                stack.pop()
            if stack:
                expected[i] = stack[-1]
            stack.append(i)
        assert (_open_parents(s, e) == expected).all()


def test_a_parent_is_the_latest_span_still_open(tmp_path: Path) -> None:
    """An op that starts after the step's neighbour span has ended belongs to the step, not to
    that span (which the step overlaps without nesting in it)."""
    table = load_traces(_lightning_like(tmp_path / "lightning.json"))
    names = table.names
    for i in range(len(table)):
        if names[table.name[i]] != "aten::mm" or table.kind[i] != Kind.CPU_OP:
            continue
        p = int(table.parent[i])
        assert names[table.name[p]].endswith("training_step")
        assert table.start[p] <= table.start[i] < table.start[p] + table.dur[p]


def test_the_spill_folder_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _lightning_like(tmp_path / "lightning.json")
    made: list[Path] = []
    mkdtemp = tempfile.mkdtemp

    def spy(*args: Any, **kwargs: Any) -> str:
        made.append(Path(mkdtemp(*args, **kwargs)))
        return str(made[-1])

    monkeypatch.setattr(spill, "SPILL_EVENTS", 0)
    monkeypatch.setattr(windowed, "WINDOW_EVENTS", 60)
    monkeypatch.setattr(spill.tempfile, "mkdtemp", spy)
    analysis, _ = timed_analysis(path, str(path), None)
    assert analysis.summary.n_steps == 40
    assert len(made) == 1
    assert not made[0].exists()


def test_a_spill_that_cannot_be_written_is_one_clear_error(tmp_path: Path) -> None:
    path = _lightning_like(tmp_path / "lightning.json")
    with pytest.raises(TraceError, match="set TMPDIR to a folder with room") as err:
        spill.parse_or_spill(path, limit=0, tmp_dir=tmp_path / "missing")
    assert str(path) in str(err.value)


def test_step_spans_ignored_in_several_windows_are_counted_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _lightning_like(tmp_path / "lightning.json")
    doc = json.loads(path.read_text())
    steps = [e for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    doc["traceEvents"] += [dict(steps[k]) for k in (2, 20, 38)]  # exact duplicates, far apart
    path.write_text(json.dumps(doc))
    (whole, _), (parts, _), n = _whole_and_windowed(path, monkeypatch, 60)
    assert n >= 8
    note = "ignored 3 ProfilerStep spans nested in or equal to another one"
    assert note in whole.warnings
    assert parts.warnings == whole.warnings
    assert _plain(parts) == _plain(whole)


def test_window_sums_add_field_by_field() -> None:
    from collections import Counter

    from trainperf.analysis.trace.integrity import IntegritySums
    from trainperf.analysis.trace.measures import MeasureSums

    a = IntegritySums(host_self=Counter({0: 5}), pids={0: {"1"}}, cut={0: [3]})
    b = IntegritySums(pids={0: {"2"}})
    both = a + b
    assert isinstance(both.outside_n, Counter)  # empty counters stay counters
    assert both.host_self[0] == 5
    assert both.pids == {0: {"1", "2"}}
    assert both.cut == {0: [3]}  # the later window's, where it looked
    assert (b + a).cut == {0: [3]}
    m = MeasureSums(n_ops=2, optimizer_params=7, op_durs=Counter({10: 2}))
    m2 = m + MeasureSums(n_ops=3, optimizer_params=4, op_durs=Counter({10: 1, 12: 1}))
    assert (m2.n_ops, m2.optimizer_params) == (5, 7)
    assert m2.op_durs == Counter({10: 3, 12: 1})
