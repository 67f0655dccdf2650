"""The typed (msgspec) trace decoder on the mixed-type fields real traces carry, and its errors."""

from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trainperf.analysis.trace import decode
from trainperf.analysis.trace.ingest import load_traces
from trainperf.analysis.trace.table import Kind, TraceError
from trainperf.cli.main import main


def _x(name: str, ts: Any, dur: Any = 10, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur} | (
        extra
    )


def _write(tmp_path: Path, events: list[Any], name: str = "t.json", **top: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events} | top))
    return path


def _by_name(table: Any, column: str) -> dict[str, Any]:
    values = getattr(table, column).tolist()
    return {table.names[n]: v for n, v in zip(table.name.tolist(), values, strict=True)}


def test_ts_int_float_and_numeric_string_keep_nanosecond_decimals(tmp_path: Path) -> None:
    events = [_x("int", 100), _x("float", 100.125, 2.5), _x("string", "101")]
    table = load_traces(_write(tmp_path, events, baseTimeNanoseconds=5_000))
    start = _by_name(table, "start")
    assert start == {"int": 0, "float": 125, "string": 1000}
    assert _by_name(table, "dur") == {"int": 10_000, "float": 2_500, "string": 10_000}
    assert table.origin_ns == 5_000 + 100_000
    assert table.sources[0].schema == "relative"


def test_non_numeric_ts_is_dropped_and_bad_dur_counts_as_zero(tmp_path: Path) -> None:
    events = [
        _x("kept", 100),
        _x("text_ts", "soon"),
        _x("list_ts", [1]),
        _x("no_dur", 120, None),
        _x("negative_dur", 130, -4),
    ]
    del events[3]["dur"]
    table = load_traces(_write(tmp_path, events))
    assert set(_by_name(table, "start")) == {"kept", "no_dur", "negative_dur"}
    assert _by_name(table, "dur")["no_dur"] == 0
    assert _by_name(table, "dur")["negative_dur"] == 0
    assert any("dropped 2 events without a numeric 'ts'" in w for w in table.warnings)
    assert any("2 complete events without a valid 'dur'" in w for w in table.warnings)


def test_args_absent_null_list_or_object_and_unread_keys_skipped(tmp_path: Path) -> None:
    nested = {"Input Dims": [[8, 3, 16, 16], []], "Call stack": "a.py(1): f", "External id": 4}
    events = [
        _x("absent", 100),
        _x("null", 101, args=None),
        _x("list", 102, args=[1, {"correlation": 5}]),
        _x("text", 103, args="oops"),
        _x("no_corr", 104, args=nested),
        _x("corr", 105, args=nested | {"correlation": 77}),
        _x("float_corr", 106, args={"correlation": 78.0}),
        _x("null_corr", 107, args={"correlation": None}),
    ]
    table = load_traces(_write(tmp_path, events))
    assert _by_name(table, "correlation") == {
        "absent": -1,
        "null": -1,
        "list": -1,
        "text": -1,
        "no_corr": -1,
        "corr": 77,
        "float_corr": 78,
        "null_corr": -1,
    }


def test_ids_pids_tids_and_names_of_any_json_type(tmp_path: Path) -> None:
    events = [
        _x("a", 100, pid="1", tid=1),
        _x("b", 101, pid=1, tid="1"),
        _x("gemm", 102, pid=0, tid="stream 7", cat="Kernel", args={"correlation": 3}),
        _x(42, 103),  # type: ignore[arg-type]
        _x("flowed", 104, id="0x1f"),
        {"ph": "s", "cat": "ac2g", "id": 12, "pid": 1, "tid": 1, "ts": 100},
        {"ph": "f", "cat": "async", "id": "12", "pid": 0, "tid": "stream 7", "ts": 102, "bp": "e"},
        {"ph": "i", "s": "t", "name": "marker", "pid": 1, "tid": 1, "ts": 101},
    ]
    table = load_traces(_write(tmp_path, events))
    assert sorted(table.names) == ["42", "a", "b", "flowed", "gemm"]
    assert {k for k in table.thread_keys if k[1] == "1"} == {(0, "1", "1")}
    assert (0, "0", "stream 7") in table.thread_keys
    assert _by_name(table, "kind")["gemm"] == Kind.KERNEL
    assert table.sources[0].n_events == len(events)


def test_non_object_entries_are_counted_and_skipped(tmp_path: Path) -> None:
    events = [_x("a", 100), None, 3, "text", [1, 2], True, {}]
    table = load_traces(_write(tmp_path, events))
    assert table.names == ["a"]
    assert any("skipped 5 trace entries that are not JSON objects" in w for w in table.warnings)


def test_memory_args_with_missing_or_odd_values(tmp_path: Path) -> None:
    def mem(ts: Any, args: Any) -> dict[str, Any]:
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "args": args}

    events = [
        _x("op", 100),
        mem(101, {"Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048, "Device Id": -1}),
        mem(102.5, {"Bytes": -512, "Device Type": 1, "Device Id": 0}),
        mem(103, "not an object"),
        mem(104, {"Bytes": None}),
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": "1", "args": {"name": "pt_autograd_0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": 5}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2},
    ]
    table = load_traces(_write(tmp_path, events))
    mem_table = table.memory
    assert mem_table.nbytes.tolist() == [512, -512, 0, 0]
    assert mem_table.total_allocated.tolist() == [512, -1, -1, -1]
    assert mem_table.total_reserved.tolist() == [2048, -1, -1, -1]
    assert mem_table.device_type.tolist() == [0, 1, 0, 0]
    assert mem_table.device_id.tolist() == [-1, 0, -1, -1]
    assert mem_table.ts.tolist() == [1000, 2500, 3000, 4000]


def test_array_document_gzip_without_suffix_and_bom_give_the_same_table(tmp_path: Path) -> None:
    events = [_x("a", 100.5, args={"correlation": 1}), _x("b", 101, 3, tid="1")]
    as_object = load_traces(_write(tmp_path, events))
    array = tmp_path / "array.json"
    array.write_text(json.dumps(events))
    gz_no_suffix = tmp_path / "gz.json"
    gz_no_suffix.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"traceEvents": events}).encode())
    for path in (array, gz_no_suffix, bom):
        other = load_traces(path)
        assert other.names == as_object.names
        for column in ("start", "dur", "thread", "correlation", "parent", "self_ns"):
            assert np.array_equal(getattr(other, column), getattr(as_object, column)), column


def test_distributed_info_and_top_level_keys_of_any_type(tmp_path: Path) -> None:
    table = load_traces(
        _write(
            tmp_path,
            [_x("a", 1)],
            distributedInfo={"rank": "2", "world_size": 4.0},
            deviceProperties=[{"id": 0, "name": "GPU"}, "junk"],
            Framework=3,
            extra={"nested": [1, {"x": None}]},
        )
    )
    source = table.sources[0]
    assert (source.rank, source.world_size, source.rank_from) == (2, 4, "distributedInfo")
    assert source.device_properties == ({"id": 0, "name": "GPU"},)
    assert source.framework is None
    assert source.schema == "absolute"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"traceEvents": [{"ph": "X", "ts": 1', r"truncated\): unexpected end of data"),
        (b'{"traceEvents": [1,]}', r"trailing comma in array at line 1 column 20"),
        (b'{\n"traceEvents": [\n{"ph": "X",, "ts": 1}]}', r"at line 3 column 12"),
        (b'{"traceEvents": [{"ph": "X", "ts": NaN}]}', r"not valid JSON: invalid character"),
        (b'{"traceEvents": []} x', r"trailing characters"),
        (b'{"traceEvents": [{"name": "a\\ud800"}]}', r"surrogate escape"),
        (b'{"traceEvents": [{"ph": "X", "x": "\xff"}]}', r"not UTF-8 text"),
        (b" \n\t", r"file is empty"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "dur": 1e400}]}',
            r"number out of range at \$\.traceEvents\[1\]\.dur",
        ),
    ],
)
def test_decode_errors_name_the_file_and_place(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=reason) as info:
        load_traces(path)
    assert info.value.path == str(path)


def test_cli_exits_2_on_a_decode_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nan.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": Infinity}]}')
    assert main(["analyze", str(path)]) == 2
    assert str(path) in capsys.readouterr().err


def _same_tables(a: Any, b: Any) -> None:
    for col in ("src", "kind", "name", "thread", "start", "dur", "correlation", "parent"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    np.testing.assert_array_equal(a.self_ns, b.self_ns)
    assert a.names == b.names
    assert a.thread_keys == b.thread_keys
    assert a.origin_ns == b.origin_ns
    for col in ("ts", "nbytes", "total_allocated", "total_reserved", "device_type", "device_id"):
        np.testing.assert_array_equal(getattr(a.memory, col), getattr(b.memory, col))


def _generic_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "_decode_piece", decode._decode_piece_generic)


def _mixed_events() -> list[Any]:
    mem = {"Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2048, "Device Type": 1}
    return [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        _x("outer", 100, 50, args={"correlation": 9, "Input Dims": [[1]]}),
        _x("inner", 110, 10),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 105, "cat": "ac2g", "name": "f"},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 111, "args": mem},
        {"ph": "I", "name": "[memory]", "pid": 1, "tid": 1, "ts": 112, "args": {"Bytes": -512}},
        {"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 113},
        {"ph": "C", "name": "counter", "pid": 1, "ts": 114, "args": {"v": 1}},
        {"ts": 120, "name": "ph_last", "dur": 5, "cat": "cpu_op", "pid": 1, "tid": 1, "ph": "X"},
    ]


def test_tagged_decoder_takes_standard_phases() -> None:
    entries, generic = decode._decode_piece(json.dumps(_mixed_events()).encode())
    assert not generic
    n_events, n_bad, complete, memory = decode._split(entries, generic)
    assert (n_events, n_bad) == (9, 0)
    assert [e.name for e in complete] == ["outer", "inner", "ph_last"]
    assert [e.ts for e in memory] == [111, 112]


@pytest.mark.parametrize(
    "odd",
    [
        {"ph": "Z", "name": "unknown phase", "ts": 1},
        {"name": "no phase", "ts": 1},
        {"ph": 7, "name": "numeric phase", "ts": 1},
        None,
        [1, 2],
    ],
    ids=["unknown-ph", "missing-ph", "numeric-ph", "null-entry", "list-entry"],
)
def test_odd_entries_take_the_generic_path_and_agree(tmp_path: Path, odd: Any) -> None:
    path = _write(tmp_path, [*_mixed_events(), odd])
    assert decode._decode_piece(json.dumps([*_mixed_events(), odd]).encode())[1]  # generic
    fast_table = load_traces(_write(tmp_path, _mixed_events(), name="plain.json"))
    odd_table = load_traces(path)
    _same_tables(fast_table, odd_table)


def test_both_decoders_build_the_same_table_on_real_traces(
    recorded_cpu_trace: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = recorded_cpu_trace[0]
    fast = load_traces(path)
    assert len(fast) > 100
    assert fast.memory.ts.size > 0
    _generic_only(monkeypatch)
    _same_tables(fast, load_traces(path))


def test_both_decoders_agree_on_the_gpu_fixtures(
    traces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = load_traces(traces_dir)
    _generic_only(monkeypatch)
    _same_tables(fast, load_traces(traces_dir))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo (POSIX)")
def test_a_pipe_is_read_like_a_file(tmp_path: Path) -> None:
    """``trainperf analyze <(zcat trace.json.gz)``: a FIFO reports size 0 and cannot be mapped."""
    plain = _write(tmp_path, _mixed_events())
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(plain.read_bytes()))
    writer.start()
    try:
        piped = load_traces(fifo)
    finally:
        writer.join(timeout=10)
    _same_tables(load_traces(plain), piped)


def test_every_phase_of_the_trace_event_format_takes_the_fast_path() -> None:
    phases = "XiIMBEbensftSTpFCPONDRcvV()"
    events = [
        {"ph": ph, "name": f"e{k}", "pid": 1, "tid": 1, "ts": 100 + k}
        for k, ph in enumerate(phases)
    ]
    entries, generic = decode._decode_piece(json.dumps(events).encode())
    assert not generic
    complete = decode._split(entries, generic)[2]
    assert [e.name for e in complete] == ["e0"]  # only the complete event becomes a row
