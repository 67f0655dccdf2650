"""The narrow, block-wise table of a large trace gives exactly the results of the wide, whole one:
narrow code columns, nesting and step placement in blocks (tiny blocks here, so that the real GPU
fixtures cross hundreds of block boundaries)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trainperf.analysis.trace.ingest as load_mod
import trainperf.analysis.trace.steps as steps_mod
from trainperf.analysis.trace import analyze_trace
from trainperf.analysis.trace.ingest import load_traces
from trainperf.analysis.trace.table import EventTable

FIXTURE = "gpu_ns_resolution_2024.pt.trace.json.gz"


def _strip(o: object) -> object:
    """``o`` without wall-clock figures."""
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in ("timing", "parse_s")}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def _nest_oracle(table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """Parent and self time by the plain stack walk, per thread over (start, longest first)."""
    parent = np.full(len(table), -1, np.int64)
    own = np.zeros(len(table), np.int64)
    host = np.isin(table.kind, load_mod.Kind.HOST) & (table.dur > 0)
    dev = np.isin(table.kind, load_mod.Kind.DEVICE)
    own[dev] = table.dur[dev]
    idx = np.flatnonzero(host)
    end = table.start + table.dur
    order = np.lexsort((idx, -end[idx], table.start[idx], table.thread[idx]))
    stack: list[int] = []
    thread = -1
    for i in idx[order].tolist():
        if table.thread[i] != thread:
            stack, thread = [], int(table.thread[i])
        while stack and end[stack[-1]] <= table.start[i]:
            stack.pop()
        own[i] = table.dur[i]
        if stack:
            p = stack[-1]
            parent[i] = p
            own[p] -= min(end[i], end[p]) - table.start[i]
        stack.append(i)
    np.maximum(own, 0, out=own)
    own[~(host | dev)] = 0
    return parent, own


def test_code_columns_are_narrow(traces_dir: Path) -> None:
    table = load_traces(Path(traces_dir) / FIXTURE)
    assert table.kind.dtype == np.int8
    for col in (table.src, table.name, table.thread, table.parent, table.correlation):
        assert col.dtype == np.int32
    assert table.start.dtype == table.dur.dtype == table.self_ns.dtype == np.int64


def test_block_wise_nesting_matches_a_stack_walk(
    traces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load_mod, "_NEST_BLOCK", 7)
    table = load_traces(Path(traces_dir) / FIXTURE)
    parent, own = _nest_oracle(table)
    assert (table.parent >= 0).sum() > 10_000
    np.testing.assert_array_equal(table.parent, parent)
    np.testing.assert_array_equal(table.self_ns, own)


@pytest.mark.parametrize("fixture", [FIXTURE, "gpu_resnet50_2021.pt.trace.json.gz"])
def test_tiny_blocks_give_the_same_analysis(
    traces_dir: Path, monkeypatch: pytest.MonkeyPatch, fixture: str
) -> None:
    whole = _strip(analyze_trace(Path(traces_dir) / fixture, top_k=None))
    monkeypatch.setattr(load_mod, "_NEST_BLOCK", 50)
    monkeypatch.setattr(steps_mod, "_LOCATE_BLOCK", 64)
    blocks = _strip(analyze_trace(Path(traces_dir) / fixture, top_k=None))
    assert blocks == whole
