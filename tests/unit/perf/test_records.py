"""The run directory's typed records: round trip, strict JSON, tolerant readers, bad input named
by file and line, each schema name spelled once in the code."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import msgspec
import numpy as np
import pytest
from trainperf.core.ranks import Straggler
from trainperf.core.stage import Stage
from trainperf.recording.run_files import epoch_record
from trainperf.records.epoch_scans import RecompilesRecord
from trainperf.records.epochs import EpochRecord, IntervalRecord
from trainperf.records.files import RecordWriter, epoch_runs, read_records, read_run_record
from trainperf.records.monitoring import AlertEvent, ProfilerWindow, ResourceSample, ResourceSummary
from trainperf.records.run_info import run_info, write_run_info
from trainperf.records.run_record import RunRecord
from trainperf.records.schema import (
    LEGACY_SCHEMA_PREFIX,
    SCHEMA_PREFIX,
    RunDirError,
    current_schema,
)
from trainperf.records.try_record import TryRecord

from scripts.structure_counts import schema_spellings
from trainperf_testing.run_lines import write_lines

ROOT = Path(__file__).resolve().parents[3]
TOOLKIT_SRC = ROOT / "packages" / "trainperf" / "src"


def _report(**kw: object) -> EpochRecord:
    fields = {
        "stage": Stage.VAL,
        "epoch": 2,
        "wall_s": 3.0,
        "phases_s": {"forward": 2.0, "unattributed": 1.0},
        "gpu_phases_s": {},
        "worker_s": {"fetch": 0.5},
        "batch_stats": {"mean": 0.3, "std": math.nan},
        "num_batches": 10,
        "samples": 40,
        "memory": {"process_rss_gb": 1.0},
        "peak_rss_gb": 1.5,
        "peak_gpu_memory_gb": math.nan,
        "world_size": 2,
        "global_samples": 80,
        "global_batches": 20,
        "global_wall_s": 4.0,
        "batch_times_s": [0.25, np.float32(0.5)],
        "straggler": Straggler(1, 0.4, 0.1, "data_wait", 0.3, 0.35),
    }
    fields.update(kw)
    return EpochRecord(**fields)  # type: ignore[arg-type]


def test_an_epoch_round_trips_with_the_same_keys_and_nan_as_null(tmp_path: Path) -> None:
    report = _report()
    writer = RecordWriter(EpochRecord.path(tmp_path))
    writer.write(epoch_record(report, 1.0))
    writer.close()
    text = EpochRecord.path(tmp_path).read_text()
    assert "NaN" not in text  # strict JSON on disk
    raw = json.loads(text)
    expected = {f.name for f in msgspec.structs.fields(EpochRecord)} | {"schema"}
    assert set(raw) == expected
    assert raw["schema"] == "trainperf/perf-epoch"
    assert raw["v"] == 1
    assert raw["peak_gpu_memory_gb"] is None
    assert raw["batch_stats"] == {"mean": 0.3, "std": None}
    assert raw["samples_per_sec"] == 20.0  # global samples over the slowest rank's wall time
    (back,) = read_records(EpochRecord.path(tmp_path), EpochRecord)
    assert back.stage is Stage.VAL
    assert back.batch_times_s == [0.25, 0.5]
    assert back.straggler == report.straggler
    assert back.peak_gpu_memory_gb is None


@pytest.mark.parametrize(
    "record",
    [
        IntervalRecord(t=1.0, stage=Stage.TRAIN, epoch=0, num_batches=3, samples=12, step=3),
        ResourceSample(t=1.0, phase="train", metrics={"resources/cpu": 50.0}),
        ResourceSummary(t=2.0, rank=0, status={"gpu": "none"}, metrics={"x_mean": 1.0}),
        AlertEvent(t=1.0, rule="hang", event="fired", severity="critical", rank=1),
        ProfilerWindow(stage=Stage.TEST, epoch=0, batches=(0, 2), overhead_s={"export": 0.1}),
        TryRecord(
            session="s",
            kind="candidate",
            override="a=1",
            description="d",
            family="f",
            alters_computation=False,
            eval_time=False,
            status="recommended",
            ratios=(1.1, 1.2),
        ),
    ],
)
def test_every_kind_round_trips(tmp_path: Path, record: object) -> None:
    kind = type(record)
    path = tmp_path / "x.jsonl"
    writer = RecordWriter(path)
    writer.write(record)  # type: ignore[arg-type]
    writer.close()
    assert read_records(path, kind) == [record]  # type: ignore[type-var]


KINDS = (
    RunRecord,
    EpochRecord,
    IntervalRecord,
    ResourceSample,
    ResourceSummary,
    AlertEvent,
    ProfilerWindow,
    TryRecord,
)


def test_every_kind_has_its_own_schema_spelled_once_in_the_code() -> None:
    schemas = {kind.schema() for kind in KINDS}
    assert len(schemas) == len(KINDS)
    assert all(name.startswith(SCHEMA_PREFIX) for name in schemas)
    spellings = schema_spellings(
        sorted((ROOT / "ocr").rglob("*.py")) + sorted(TOOLKIT_SRC.rglob("*.py"))
    )
    assert {name: spellings[name] for name in schemas} == dict.fromkeys(schemas, 1)
    twice = {name: n for name, n in spellings.items() if n > 1}
    assert twice == {}


def test_unknown_keys_are_ignored_and_other_schemas_skipped(tmp_path: Path) -> None:
    path = tmp_path / "resources.jsonl"
    sample = {"t": 1.0, "metrics": {"resources/cpu": 5.0}, "from_the_future": [1, 2]}
    write_lines(path, ResourceSample, [sample])
    write_lines(path, ResourceSummary, [{"t": 2.0, "metrics": {}, "status": {}, "rank": 0}])
    write_lines(path, ResourceSample, [{"t": 3.0}])
    samples = read_records(path, ResourceSample)
    assert [s.t for s in samples] == [1.0, 3.0]
    assert not hasattr(samples[0], "from_the_future")
    assert [s.run_kind for s in read_records(path, ResourceSummary)] == ["fit"]


def test_legacy_schema_names_read_as_todays(tmp_path: Path) -> None:
    """Folders written before the toolkit left the app carry ``receipt-ocr/...`` tags: every
    reader takes them as the same schema; other prefixes stay other schemas."""
    assert current_schema(LEGACY_SCHEMA_PREFIX + "perf-epoch") == EpochRecord.schema()
    assert current_schema("elsewhere/perf-epoch") == "elsewhere/perf-epoch"
    assert current_schema(None) is None
    old = EpochRecord.schema().replace(SCHEMA_PREFIX, LEGACY_SCHEMA_PREFIX)
    path = EpochRecord.path(tmp_path)
    path.parent.mkdir(parents=True)
    lines = [
        {"schema": old, "v": 1, "stage": "val", "wall_s": 1.0},
        {"schema": "elsewhere/perf-epoch", "v": 1, "stage": "val", "wall_s": 2.0},
        {"schema": EpochRecord.schema(), "v": 1, "stage": "train", "wall_s": 3.0},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [(r.stage, r.wall_s) for r in read_records(path, EpochRecord)] == [
        (Stage.VAL, 1.0),
        (Stage.TRAIN, 3.0),
    ]
    old_run = RunRecord.schema().replace(SCHEMA_PREFIX, LEGACY_SCHEMA_PREFIX)
    RunRecord.path(tmp_path).write_text(json.dumps({"schema": old_run, "v": 1, "world_size": 2}))
    assert read_run_record(tmp_path).world_size == 2
    write_run_info(tmp_path, {"device": "cpu"})  # a writer merges it and writes today's name
    raw = json.loads(RunRecord.path(tmp_path).read_text())
    assert (raw["schema"], raw["world_size"], raw["device"]) == (RunRecord.schema(), 2, "cpu")


def test_absent_file_reads_as_empty(tmp_path: Path) -> None:
    assert read_records(tmp_path / "missing.jsonl", EpochRecord) == []


def test_truncated_last_line_is_ignored_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    write_lines(path, ResourceSample, [{"t": 1.0}])
    with open(path, "a") as fh:
        fh.write('{"schema": "receipt-ocr/resource-sample", "v": 1, "t"')  # a crash mid-write
    with pytest.warns(UserWarning, match=r"x\.jsonl: line 2 is cut short"):
        assert [r.t for r in read_records(path, ResourceSample)] == [1.0]


def test_malformed_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"schema": "receipt-ocr/resource-sample", "v": 1, "t": 1}\nnot json\n{}\n')
    with pytest.raises(RunDirError, match=r"x\.jsonl: line 2 is not valid JSON"):
        read_records(path, ResourceSample)


def test_newer_version_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "alerts.jsonl"
    write_lines(path, AlertEvent, [{"event": "fired"}])
    write_lines(path, AlertEvent, [{"event": "fired"}], version=2)
    refused = r"alerts\.jsonl: line 2 is trainperf/alert version 2; .* up to version 1"
    with pytest.raises(RunDirError, match=refused):
        read_records(path, AlertEvent)


def test_a_field_of_the_wrong_type_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "alerts.jsonl"
    write_lines(path, AlertEvent, [{"event": "fired"}, {"event": "fired", "step": "three"}])
    with pytest.raises(RunDirError, match=r"alerts\.jsonl: line 2: .*`\$\.step`"):
        read_records(path, AlertEvent)
    write_lines(path := tmp_path / "b.jsonl", AlertEvent, [{"event": "exploded"}])
    with pytest.raises(RunDirError, match=r"b\.jsonl: line 1: .*fired or resolved"):
        read_records(path, AlertEvent)
    write_lines(path := tmp_path / "c.jsonl", EpochRecord, [{"stage": "val", "wall_s": -1}])
    with pytest.raises(RunDirError, match=r"c\.jsonl: line 1: .*`\$\.wall_s`"):
        read_records(path, EpochRecord)


def test_a_record_without_a_version_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"schema": "receipt-ocr/perf-epoch", "stage": "val", "wall_s": 1}\n')
    with pytest.raises(RunDirError, match=r"line 1 has no integer 'v'"):
        read_records(path, EpochRecord)


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    writer = RecordWriter(path)

    def burst(k: int) -> None:
        for i in range(200):
            writer.write(ResourceSample(t=float(i), rank=k, phase="x" * 500))

    threads = [threading.Thread(target=burst, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = read_records(path, ResourceSample)
    assert sorted((r.rank, r.t) for r in records) == [
        (k, float(i)) for k in range(4) for i in range(200)
    ]


def test_run_info_merges_writers_and_keeps_the_start_time(tmp_path: Path) -> None:
    write_run_info(tmp_path, {"world_size": 2})
    first = read_run_record(tmp_path)
    write_run_info(tmp_path, {"hparams": {"lr": 0.1, "bad": math.nan}})
    info = read_run_record(tmp_path)
    assert info.world_size == 2
    assert info.hparams == {"lr": 0.1, "bad": None}
    assert info.started_at == first.started_at
    write_run_info(tmp_path, {"device": "cpu"})  # a later writer keeps the others' parts
    assert read_run_record(tmp_path).hparams == {"lr": 0.1, "bad": None}
    raw = json.loads(RunRecord.path(tmp_path).read_text())
    assert raw["schema"] == "trainperf/run"
    assert raw["v"] == 1
    assert {"hostname", "python", "cpu_count", "argv"} <= raw.keys()
    assert None not in raw.values()  # fields nobody set stay out of the file


def test_run_info_collects_this_process() -> None:
    info = run_info()
    assert info.cpu_count is not None
    assert info.argv


def test_bad_run_info_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "run.json").write_text("{oops")
    with pytest.raises(RunDirError, match=r"run\.json: not valid JSON"):
        read_run_record(tmp_path)
    (tmp_path / "perf" / "run.json").write_text(json.dumps({"schema": "receipt-ocr/run", "v": 9}))
    with pytest.raises(RunDirError, match="version 9"):
        read_run_record(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_run_record(tmp_path / "elsewhere")


def test_every_cache_x_with_x_hits_or_x_misses_has_a_hit_rate() -> None:
    from trainperf.records.run_info import cache_names, hit_rate, hit_rates

    counts: dict[str, float | None] = {
        "polygon_cache_hits": 3,
        "polygon_cache_misses": 1,
        "polygon_cache_bytes_written": 9,
        "images_hits": 4,  # writers leave zero counters out: no images_misses
        "tokens_misses": 2,
        "tokens_hits": None,  # a null counts as 0
        "_hits": 5,  # no name before the suffix: no cache
        "decoded": 7,
    }
    assert cache_names(counts) == ["images", "polygon_cache", "tokens"]
    assert hit_rates(counts) == {"images": 1.0, "polygon_cache": 0.75, "tokens": 0.0}
    assert hit_rate(counts, "polygon_cache") == 0.75
    assert hit_rate(counts, "absent") is None
    assert hit_rates({}) == {}


def test_to_jsonable_handles_nested_and_odd_values() -> None:
    from trainperf.records.run_info import to_jsonable

    out = to_jsonable({"a": [math.inf, {"b": np.int64(3)}], 4: object.__name__, "c": Path("p")})
    assert out == {"a": [None, {"b": 3}], "4": "object", "c": "p"}


def test_text_with_unicode_line_separators_stays_one_line(tmp_path: Path) -> None:
    path = tmp_path / "alerts.jsonl"
    event = AlertEvent(event="fired", message="a\u2028b\x1cc\u0085d")  # raw UTF-8 on disk
    writer = RecordWriter(path)
    writer.write(event)
    writer.close()
    assert read_records(path, AlertEvent) == [event]


def test_epoch_runs_split_where_a_new_run_starts_its_epochs_again() -> None:
    epochs = [0, 1, 2, 0, 1, 1, 5]  # a second fit into the folder, then a resumed epoch
    runs = epoch_runs(RecompilesRecord(epoch=e) for e in epochs)
    assert [[r.epoch for r in run] for run in runs] == [[0, 1, 2], [0, 1], [1, 5]]
    assert epoch_runs([]) == []
