"""Ingestion: schemas, gzip, directories, ranks, nesting, and errors for bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from trainperf.analysis.trace.ingest import load_traces
from trainperf.analysis.trace.table import EventTable, Kind, TraceError

from trainperf_testing.synth import make_trace, write


def _self_by_name(table: EventTable) -> dict[str, int]:
    out: dict[str, int] = {}
    for code, s in zip(table.name.tolist(), table.self_ns.tolist(), strict=True):
        out[table.names[code]] = out.get(table.names[code], 0) + s
    return out


def test_nesting_self_time_is_duration_minus_direct_children(tmp_path: Path) -> None:
    doc = make_trace(n_steps=2, jitter=0.0)
    table = load_traces(write(doc, tmp_path / "t.json"))
    by_name = _self_by_name(table)
    # conv2d (404 µs) > convolution (402) > mkldnn_convolution (400): 2 µs self each, twice
    assert by_name["aten::conv2d"] == 2 * 2_000
    assert by_name["aten::convolution"] == 2 * 2_000
    assert by_name["aten::mkldnn_convolution"] == 2 * 400_000
    assert by_name["Optimizer.step#SGD.step"] == 2 * (50_000 - 40_000)
    conv = table.names.index("aten::mkldnn_convolution")
    parent = table.parent[np.flatnonzero(table.name == conv)[0]]
    assert table.names[table.name[parent]] == "aten::convolution"


def test_unsorted_and_sorted_events_give_the_same_table(tmp_path: Path) -> None:
    a = load_traces(write(make_trace(shuffle=True), tmp_path / "a.json"))
    b = load_traces(write(make_trace(shuffle=False), tmp_path / "b.json"))
    assert _self_by_name(a) == _self_by_name(b)
    assert sorted(a.start.tolist()) == sorted(b.start.tolist())


def test_relative_and_absolute_timestamps_are_integer_ns(tmp_path: Path) -> None:
    rel = load_traces(write(make_trace(relative=True, jitter=0.0), tmp_path / "r.json"))
    ab = load_traces(write(make_trace(relative=False, jitter=0.0), tmp_path / "a.json"))
    assert rel.start.dtype == np.int64
    assert rel.origin_ns == 1_790_000_000_000_000_000 + 1_000_000  # base + first step (1000 µs)
    assert ab.origin_ns == 1_000_000
    assert sorted(rel.start.tolist()) == sorted(ab.start.tolist())
    assert rel.sources[0].schema == "relative"
    assert ab.sources[0].schema == "absolute"


def test_gzip_and_plain_json_agree(tmp_path: Path) -> None:
    doc = make_trace()
    a = load_traces(write(doc, tmp_path / "t.json"))
    b = load_traces(write(doc, tmp_path / "t.json.gz"))
    assert _self_by_name(a) == _self_by_name(b)


def test_2021_schema_categories_string_tids_and_missing_fields(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "Operator",
            "name": "ProfilerStep#1",
            "pid": 5,
            "tid": "5",
            "ts": 100,
            "dur": 50,
        },
        {
            "ph": "X",
            "cat": "Operator",
            "name": "aten::mm",
            "pid": 5,
            "tid": "5",
            "ts": 110,
            "dur": 20,
            "args": {"External id": 3},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 5,
            "tid": "5",
            "ts": 112,
            "dur": 5,
            "args": {"correlation": 9, "external id": 3},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "gemm",
            "pid": 0,
            "tid": "stream 7",
            "ts": 120,
            "dur": 10,
            "args": {"correlation": 9},
        },
        {"ph": "X", "cat": "Operator", "name": "aten::nodur", "pid": 5, "tid": "5", "ts": 140},
        {"ph": "X", "cat": "Operator", "name": "aten::nots", "pid": 5, "tid": "5", "dur": 3},
        {
            "ph": "i",
            "s": "t",
            "name": "[memory]",
            "pid": 5,
            "tid": 5,
            "ts": 111,
            "args": {"Device Type": 1, "Device Id": 0, "Bytes": 4096},
        },
        {"ph": "f", "cat": "async", "id": 9, "pid": 0, "tid": "stream 7", "ts": 120, "bp": "e"},
        "not an event",
    ]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    table = load_traces(path)
    kinds = {
        table.names[n]: int(k)
        for n, k in zip(table.name.tolist(), table.kind.tolist(), strict=True)
    }
    assert kinds["aten::mm"] == Kind.CPU_OP
    assert kinds["cudaLaunchKernel"] == Kind.RUNTIME
    assert kinds["gemm"] == Kind.KERNEL
    assert "aten::nots" not in kinds
    assert any("without a numeric 'ts'" in w for w in table.warnings)
    assert any("'dur'" in w for w in table.warnings)
    assert any("not JSON objects" in w for w in table.warnings)
    assert table.memory.nbytes.tolist() == [4096]
    assert table.memory.total_allocated.tolist() == [-1]  # 2021: no totals


def test_directory_of_ranks_keeps_same_rank_files_apart(tmp_path: Path) -> None:
    write(make_trace(rank=0, seed=1), tmp_path / "r0.json")
    write(make_trace(rank=1, seed=2), tmp_path / "r1.json.gz")
    write(make_trace(rank=1, seed=3), tmp_path / "r1_again.json")
    (tmp_path / "metrics.json").write_text('{"loss": 1.0}')
    table = load_traces(tmp_path)
    assert [s.rank for s in table.sources] == [0, 1, 1]
    assert {s.rank_from for s in table.sources} == {"distributedInfo"}
    # three files, three separate main threads; nothing merged
    assert len({k for k in table.thread_keys if k[1] == "7"}) == 3
    assert any("rank 1 appears in both" in w for w in table.warnings)
    assert any("metrics.json" in w and "skipped" in w for w in table.warnings)
    per_src = np.bincount(table.src, minlength=3)
    assert per_src[0] == per_src[1] == per_src[2] > 0


def test_rank_from_file_name_when_no_distributed_info(tmp_path: Path) -> None:
    table = load_traces(write(make_trace(), tmp_path / "epoch_1_rank3.json"))
    assert table.sources[0].rank == 3
    assert table.sources[0].rank_from == "filename"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "du', "truncated"),
        (b"", "empty"),
        (b'{"schemaVersion": 1}', "traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "must be a list"),
        (b"\xff\xfe garbage", "JSON"),
    ],
)
def test_malformed_files_raise_trace_error_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=reason) as info:
        load_traces(path)
    assert str(path) in str(info.value)


def test_truncated_gzip_raises_trace_error(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(make_trace()).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="gzip") as info:
        load_traces(path)
    assert info.value.path == str(path)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_traces(tmp_path / "nope.json")
    with pytest.raises(TraceError, match=r"no \*\.json"):
        load_traces(tmp_path)
