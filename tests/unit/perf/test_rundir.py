"""The run directory's JSON-lines files: round trip, strict JSON, bad input named by line."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import numpy as np
import pytest

from ocr.perf.rundir import (
    JsonlWriter,
    RunDirError,
    read_records,
    read_run_info,
    to_jsonable,
    write_run_info,
)

SCHEMA = "receipt-ocr/test-record"


def test_round_trip_adds_schema_and_version_and_skips_other_schemas(tmp_path: Path) -> None:
    path = tmp_path / "perf" / "x.jsonl"
    writer = JsonlWriter(path, SCHEMA)
    writer.write({"a": 1, "nan": math.nan, "arr": (1.5, np.float32(2.0))})
    JsonlWriter(path, "receipt-ocr/other").write({"b": 2})
    writer.write({"a": 3})
    writer.close()
    records = read_records(path, SCHEMA)
    assert records == [
        {"schema": SCHEMA, "v": 1, "a": 1, "nan": None, "arr": [1.5, 2.0]},
        {"schema": SCHEMA, "v": 1, "a": 3},
    ]
    # Strict JSON on disk: no NaN token.
    assert "NaN" not in path.read_text()


def test_absent_file_reads_as_empty(tmp_path: Path) -> None:
    assert read_records(tmp_path / "missing.jsonl", SCHEMA) == []


def test_truncated_last_line_is_ignored_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    JsonlWriter(path, SCHEMA).write({"a": 1})
    with open(path, "a") as fh:
        fh.write('{"schema": "receipt-ocr/test-record", "v": 1, "a"')  # a crash mid-write
    with pytest.warns(UserWarning, match=r"x\.jsonl: line 2 is cut short"):
        assert [r["a"] for r in read_records(path, SCHEMA)] == [1]


def test_malformed_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"schema": "receipt-ocr/test-record", "v": 1}\nnot json\n{}\n')
    with pytest.raises(RunDirError, match=r"x\.jsonl: line 2 is not valid JSON"):
        read_records(path, SCHEMA)


def test_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    JsonlWriter(path, SCHEMA, version=2).write({"a": 1})
    with pytest.raises(RunDirError, match=r"line 1 is receipt-ocr/test-record version 2"):
        read_records(path, SCHEMA)
    assert read_records(path, SCHEMA, max_version=2)[0]["a"] == 1


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    writer = JsonlWriter(path, SCHEMA)

    def burst(k: int) -> None:
        for i in range(200):
            writer.write({"k": k, "i": i, "pad": "x" * 500})

    threads = [threading.Thread(target=burst, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = read_records(path, SCHEMA)
    assert len(records) == 800
    assert sorted((r["k"], r["i"]) for r in records) == [
        (k, i) for k in range(4) for i in range(200)
    ]


def test_run_info_merges_writers_and_keeps_the_start_time(tmp_path: Path) -> None:
    write_run_info(tmp_path, {"world_size": 2})
    first = read_run_info(tmp_path)
    write_run_info(tmp_path, {"hparams": {"lr": 0.1}})
    info = read_run_info(tmp_path)
    assert info["world_size"] == 2
    assert info["hparams"] == {"lr": 0.1}
    assert info["started_at"] == first["started_at"]
    assert info["schema"] == "receipt-ocr/run"
    assert info["v"] == 1
    assert {"hostname", "python", "cpu_count", "argv"} <= info.keys()


def test_bad_run_info_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "run.json").write_text("{oops")
    with pytest.raises(RunDirError, match=r"run\.json: not valid JSON"):
        read_run_info(tmp_path)
    (tmp_path / "perf" / "run.json").write_text(json.dumps({"schema": "receipt-ocr/run", "v": 9}))
    with pytest.raises(RunDirError, match="version 9"):
        read_run_info(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_run_info(tmp_path / "elsewhere")


def test_to_jsonable_handles_nested_and_odd_values() -> None:
    out = to_jsonable({"a": [math.inf, {"b": np.int64(3)}], 4: object.__name__, "c": Path("p")})
    assert out == {"a": [None, {"b": 3}], "4": "object", "c": "p"}


def test_polygon_cache_hit_rate_from_worker_counts() -> None:
    from ocr.perf.rundir import polygon_cache_hit_rate

    assert polygon_cache_hit_rate({"polygon_cache_hits": 3, "polygon_cache_misses": 1}) == 0.75
    # Writers leave zero counters out; a null or a stray string counts as 0.
    assert polygon_cache_hit_rate({"polygon_cache_hits": 4}) == 1.0
    assert polygon_cache_hit_rate({"polygon_cache_misses": 2, "polygon_cache_hits": None}) == 0.0
    assert polygon_cache_hit_rate({"polygon_cache_hits": "x", "items": 5}) is None
    assert polygon_cache_hit_rate({}) is None
