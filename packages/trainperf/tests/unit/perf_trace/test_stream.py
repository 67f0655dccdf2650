"""Streaming decode (issue 21.1): a trace read in pieces gives the same table as the trace read
whole, wherever the pieces are cut, and memory follows the events, not the file's bytes."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trainperf.analysis.trace import decode
from trainperf.analysis.trace.analyze import analyze_table
from trainperf.analysis.trace.ingest import load_traces
from trainperf.analysis.trace.scan import Fallback
from trainperf.analysis.trace.table import EventTable

from trainperf_testing.bigtrace import write_replicated
from trainperf_testing.paths import TESTS_ROOT


def _same_tables(a: EventTable, b: EventTable) -> None:
    for col in ("src", "kind", "name", "thread", "start", "dur", "correlation", "parent"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col), err_msg=col)
    np.testing.assert_array_equal(a.self_ns, b.self_ns)
    assert a.names == b.names
    assert a.thread_keys == b.thread_keys
    assert a.origin_ns == b.origin_ns
    assert a.warnings == b.warnings
    assert [s.n_events for s in a.sources] == [s.n_events for s in b.sources]
    assert [s.device_properties for s in a.sources] == [s.device_properties for s in b.sources]
    assert [s.rank for s in a.sources] == [s.rank for s in b.sources]
    for col in ("ts", "nbytes", "total_allocated", "total_reserved", "device_type", "device_id"):
        np.testing.assert_array_equal(getattr(a.memory, col), getattr(b.memory, col))


def _whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> EventTable:
    """The table as the whole-file decoder (the one before streaming) builds it."""

    def refuse(*args: Any) -> None:
        raise Fallback("whole file wanted")

    with monkeypatch.context() as m:
        m.setattr(decode, "_parse_stream", refuse)
        return load_traces(path)


def _streamed(path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch) -> EventTable:
    """The table read in pieces of ``chunk`` bytes; fails if the stream gave up on the file."""

    def no_fallback(*args: Any) -> None:
        raise AssertionError(f"{path.name}: the stream fell back to the whole-file path")

    with monkeypatch.context() as m:
        m.setattr(decode, "CHUNK_BYTES", chunk)
        m.setattr(decode, "_parse_whole", no_fallback)
        return load_traces(path)


@pytest.mark.parametrize("chunk", [1, 7, 333, 4_099, 65_537])
def test_a_recorded_trace_in_pieces_is_the_trace_whole(
    recorded_cpu_trace: tuple[Path, dict[str, Any]], chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = recorded_cpu_trace[0]
    whole = _whole(path, monkeypatch)
    assert len(whole) > 100
    assert len(whole.memory) > 0
    _same_tables(whole, _streamed(path, chunk, monkeypatch))


@pytest.mark.parametrize("chunk", [4_099, 1 << 20])
@pytest.mark.parametrize(
    "name", ["gpu_resnet50_2021.pt.trace.json.gz", "gpu_ns_resolution_2024.pt.trace.json.gz"]
)
def test_the_gpu_fixtures_in_pieces_are_the_fixtures_whole(
    traces_dir: Path, name: str, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = traces_dir / name
    whole = _whole(path, monkeypatch)
    streamed = _streamed(path, chunk, monkeypatch)
    _same_tables(whole, streamed)
    a, b = analyze_table(whole, top_k=None).as_dict(), analyze_table(streamed, top_k=None).as_dict()
    for d in (a, b):
        for s in d["sources"]:
            s.pop("parse_s", None)
    assert a == b


def _awkward_events() -> list[Any]:
    """Events whose text puts the usual cut ``},`` inside strings and nested ``args``, with
    escapes, non-ASCII text split across reads, and odd entries."""
    tricky = ['}, {"ph": "X"}', '\\"},', "a\\\\", "é ü 测试 🙂", "]}", '{"x": [1, 2]}']
    events: list[Any] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": '}, "t"'}},
    ]
    t = 1000.0
    for k in range(40):
        name = f"op{k % 7} {tricky[k % len(tricky)]}"
        args: dict[str, Any] = {
            "correlation": k,
            "Input Dims": [[k, 3], []],
            "nested": [{"a": "},"}, {"b": [{"c": tricky[(k + 1) % len(tricky)]}]}],
        }
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1 + k % 2,
                "ts": t,
                "dur": 10.5,
                "args": args,
            }
        )
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": t + 1, "dur": 2}
        )
        events.append(
            {
                "ph": "i",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": t + 2,
                "args": {"Bytes": 64 * k, "Total Allocated": 64 * k},
            }
        )
        events.append({"ph": "f", "id": k, "pid": 1, "tid": 1, "ts": t + 3, "cat": "ac2g"})
        t += 20.0
    return events


def _write_awkward(path: Path, layout: str) -> Path:
    events = _awkward_events()
    props = [{"id": 0, "name": "GPU }, {"}, {"id": 1, "name": "b"}]
    if layout == "bare":
        text = json.dumps(events)
    elif layout == "spaced":  # no "}," anywhere between events: only the exact scanner cuts
        body = "\n ,\n ".join(json.dumps(e) for e in events)
        text = '{"traceEvents" : [\n ' + body + '\n ] , "baseTimeNanoseconds": 5000}'
    else:  # keys before and after the events, the after ones holding "},"
        text = (
            '\ufeff{"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": '
            + json.dumps(events, ensure_ascii=False)
            + ', "deviceProperties": '
            + json.dumps(props)
            + ', "traceName": "x"}'
        )
    data = text.encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("layout", ["keys-around", "bare", "spaced"])
def test_cuts_inside_strings_escapes_and_nested_args_change_nothing(
    tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write_awkward(tmp_path / "t.json", layout)
    whole = _whole(path, monkeypatch)
    assert len(whole) == 80
    if layout == "keys-around":
        assert whole.sources[0].rank == 3
        assert len(whole.sources[0].device_properties) == 2
    for chunk in [*range(1, 40), 61, 127, 500, 1_000, 4_096, 1 << 20]:
        _same_tables(whole, _streamed(path, chunk, monkeypatch))


def test_a_gzip_trace_is_streamed_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_awkward(tmp_path / "t.json.gz", "keys-around")
    _same_tables(_whole(path, monkeypatch), _streamed(path, 97, monkeypatch))


@pytest.mark.parametrize(
    "text",
    [
        b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}, {"ph": "X", "ts": 3',
        b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2},, {"ph": "X"}]}',
        b'{"traceEvents": {"ph": "X"}}',
        b'{"traceEvents": [], "traceEvents": [{"ph": "X", "ts": 1, "dur": 1}]}',
    ],
    ids=["truncated", "double-comma", "not-a-list", "repeated-key"],
)
def test_what_the_stream_cannot_take_is_read_whole(
    tmp_path: Path, text: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Malformed or unusual files give exactly the whole-file path's answer (its error)."""
    path = tmp_path / "odd.json"
    path.write_bytes(text)
    results = []
    for streamed in (False, True):
        try:
            results.append(repr(_whole(path, monkeypatch) if not streamed else load_traces(path)))
        except Exception as exc:  # the same error either way
            results.append(f"{type(exc).__name__}: {exc}")
    if results[0].startswith("EventTable"):
        _same_tables(_whole(path, monkeypatch), load_traces(path))
    else:
        assert results[0] == results[1]


_PEAK = r"""
import sys
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
from trainperf.analysis.trace import analyze_trace, spill, windowed
# a file over 100,000 events is spilled and analysed in windows of about 100,000 events
spill.SPILL_EVENTS = windowed.WINDOW_EVENTS = 100_000
spill.BLOCK_EVENTS = 1 << 16
base = status("VmRSS")
analyze_trace(sys.argv[1])
print(status("VmHWM") - base)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_peak_memory_does_not_grow_with_the_file(
    recorded_cpu_trace: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A 50 MB and a 200 MB trace (a recorded trace's steps repeated), with the spill and the
    windows set at 100,000 events: the peak RSS of the analysis is the same within a small
    constant (before the windows it grew by ~0.37x the file's growth, ~55 MiB here)."""
    peaks, sizes = [], []
    for mb in (50, 200):
        path = tmp_path / f"t{mb}.json"
        write_replicated(recorded_cpu_trace[0], path, mb << 20)
        sizes.append(path.stat().st_size)
        out = subprocess.run(
            [sys.executable, "-c", _PEAK, str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=TESTS_ROOT,
            timeout=300,
        )
        peaks.append(int(out.stdout.split()[-1]))
        path.unlink()
    growth = peaks[1] - peaks[0]
    assert growth < 12 << 20, f"peak grew {growth >> 20} MiB ({peaks} bytes for {sizes} bytes)"
    assert peaks[1] < 0.5 * sizes[1], f"peak {peaks[1]} bytes for a {sizes[1]}-byte trace"
