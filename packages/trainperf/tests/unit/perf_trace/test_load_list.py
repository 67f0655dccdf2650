"""``load_traces`` on a list of paths (the cycles of one profiler window, analysed together)."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainperf.analysis.trace import analyze_table, analyze_trace
from trainperf.analysis.trace.ingest import load_traces
from trainperf.analysis.trace.table import TraceError

from trainperf_testing.synth import make_trace, write


def test_a_list_keeps_its_order_and_sums_the_files(tmp_path: Path) -> None:
    a = write(make_trace(n_steps=3, seed=1), tmp_path / "epoch_0.json")
    b = write(make_trace(n_steps=2, seed=2), tmp_path / "epoch_0_cycle1.json")
    write(make_trace(n_steps=5, seed=3), tmp_path / "other.json")  # not in the list
    table = load_traces([b, a])
    assert [s.path.name for s in table.sources] == ["epoch_0_cycle1.json", "epoch_0.json"]
    assert len(table) == len(load_traces(a)) + len(load_traces(b))
    report = analyze_table(table, top_k=None)
    assert report.summary.n_steps == 5
    one, two = analyze_trace(a, top_k=None), analyze_trace(b, top_k=None)
    calls = {r.name: r.calls for r in report.top_cpu_ops}
    for row in one["top_cpu_op_rows"]:
        other = next((r["calls"] for r in two["top_cpu_op_rows"] if r["name"] == row["name"]), 0)
        assert calls[row["name"]] == row["calls"] + other


def test_an_empty_list_or_a_missing_member_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty list"):
        load_traces([])
    a = write(make_trace(n_steps=1), tmp_path / "a.json")
    with pytest.raises(TraceError, match=r"missing\.json: no such file"):
        load_traces([a, tmp_path / "missing.json"])
