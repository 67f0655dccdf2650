"""``trainperf watch``: following a run directory from its files (records written here, as the
monitors write them, while the watcher reads)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainperf.cli.main import main as perf_main
from trainperf.cli.watch import EXIT_ENDED, EXIT_LOST, RunTail, Watch
from trainperf.core.stage import Stage
from trainperf.present.live import live_line, phase_split
from trainperf.records.epochs import EpochRecord, IntervalRecord
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import AlertEvent, LifecycleRecord
from trainperf.records.schema import Record, RunDirError

HOST = socket.gethostname()


def _write(run: Path, record: Record) -> None:
    writer = RecordWriter(type(record).path(run))
    writer.write(record)
    writer.close()


def _start(rank: int = 0, world: int = 1, pid: int | None = None) -> LifecycleRecord:
    return LifecycleRecord(
        t=time.time(),
        event="start",
        rank=rank,
        world_size=world,
        pid=os.getpid() if pid is None else pid,
        hostname=HOST,
    )


def _end(rank: int = 0, world: int = 1, status: str = "finished") -> LifecycleRecord:
    return LifecycleRecord(
        t=time.time(),
        event="end",
        rank=rank,
        world_size=world,
        pid=os.getpid(),
        hostname=HOST,
        status=status,  # type: ignore[arg-type]
    )


def _epoch(epoch: int, **phases: float) -> EpochRecord:
    wall = sum(phases.values())
    return EpochRecord(
        stage=Stage.TRAIN,
        epoch=epoch,
        wall_s=wall,
        phases_s=phases,
        samples=64,
        global_samples=64,
        global_wall_s=wall,
        samples_per_sec=64 / wall,
        t=time.time(),
    )


class _Script:
    """Writes the next record at each of the watcher's sleeps: a run that goes on while it is
    watched, deterministic (no threads, no wall-clock waits)."""

    def __init__(self, run: Path, records: list[Record]) -> None:
        self.run, self.records, self.now = run, list(records), 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.records:
            _write(self.run, self.records.pop(0))


def _follow(
    run: Path, records: list[Record], stale_after_s: float = 600.0
) -> tuple[int, list[str], Watch]:
    script = _Script(run, records)
    w = Watch(
        run,
        stale_after_s=stale_after_s,
        clock=script.clock,
        sleep=script.sleep,
        interval_every_s=0.0,
    )
    lines: list[str] = []
    code = w.follow(lines.append, None)
    return code, lines, w


def test_phase_split_names_the_largest_phases_with_their_shares() -> None:
    assert phase_split({"forward": 5.2, "backward": 4.1, "data_wait": 0.3, "metric": 0.4}) == (
        "forward 52% backward 41% metric 4%"
    )
    assert phase_split({}) == ""
    assert live_line({"forward": 1.0}, 17.04, "input-bound") == (
        "forward 100% · 17.0 samples/s · input-bound"
    )


def test_epochs_print_as_they_land_and_the_end_stops_the_watch(tmp_path: Path) -> None:
    records: list[Record] = [
        _start(),
        IntervalRecord(
            t=time.time(),
            epoch=0,
            num_batches=5,
            samples=40,
            elapsed_s=2.0,
            phases_s={"forward": 1.5, "data_wait": 0.5},
            samples_per_sec=20.0,
        ),
        _epoch(0, forward=2.0, backward=1.5, data_wait=0.5),
        _epoch(1, forward=2.0, backward=1.0, data_wait=1.0),
        _end(),
    ]
    code, lines, w = _follow(tmp_path, records)
    assert code == EXIT_ENDED
    assert lines[0].startswith(f"rank 0 fit started (pid {os.getpid()}")
    assert (
        "epoch 0 train so far: 5 batches, 2.0 s · forward 75% data_wait 25% · 20.0 samples/s"
        in (lines[1])
    )
    assert lines[2] == (
        "epoch 0 train 4.00 s 64 samples · forward 50% backward 38% data_wait 12% · 16.0 samples/s"
    )
    assert lines[3].startswith("epoch 1 train 4.00 s")
    assert lines[4] == "rank 0 fit finished"
    assert w.reason == "finished (fit)"
    assert len(w.state.epochs) == 2


def test_a_run_ends_only_when_every_rank_has_ended(tmp_path: Path) -> None:
    records: list[Record] = [
        _start(0, 2),
        _start(1, 2),
        _end(0, 2),
        AlertEvent(t=time.time(), rule="input_bound", event="fired", message="m", rank=1),
        _end(1, 2, "failed"),
    ]
    code, lines, w = _follow(tmp_path, records)
    assert code == EXIT_ENDED
    # rank 1's alert came after rank 0 ended: the watch was still following
    assert "alert rank 1 input_bound fired: m" in lines
    assert w.reason == "failed / finished (fit)"


def test_a_dead_process_without_an_end_is_named(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    gone = _start(pid=int(proc.stdout))
    code, _, w = _follow(tmp_path, [gone])
    assert code == EXIT_LOST
    assert f"process {int(proc.stdout)} is gone without an end" in w.reason


def test_nothing_new_for_too_long_gives_up(tmp_path: Path) -> None:
    code, _, w = _follow(tmp_path, [_epoch(0, forward=1.0)], stale_after_s=5.0)
    assert code == EXIT_LOST
    assert "nothing new for 5 s" in w.reason


def test_lines_are_read_whole_and_a_rewritten_file_is_read_again(tmp_path: Path) -> None:
    files = RunTail(tmp_path)
    path = EpochRecord.path(tmp_path)
    path.parent.mkdir(parents=True)
    line = json.dumps(
        {
            "schema": "receipt-ocr/perf-epoch",
            "v": 1,
            "stage": "train",
            "wall_s": 1,
        }
    )
    path.write_text(line[:20])
    assert files.poll() == []  # half a line: not yet
    path.write_text(line + "\n")
    assert [r.wall_s for r in files.poll()] == [1.0]  # type: ignore[attr-defined]
    assert files.poll() == []
    shorter = line.replace('"train"', '"val"')
    path.write_text(shorter + "\n")  # shorter than what was read: rewritten, read again
    assert [r.stage for r in files.poll()] == ["val"]  # type: ignore[attr-defined]
    with open(path, "a") as fh:
        fh.write("{not json\n")
    with pytest.raises(RunDirError, match=r"epochs\.jsonl: line 2 is not valid JSON"):
        files.poll()


def test_cli_json_lines_and_missing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for record in (_start(), _epoch(0, forward=1.0), _end()):
        _write(tmp_path, record)
    assert perf_main(["watch", str(tmp_path), "--json", "--poll", "0.01"]) == EXIT_ENDED
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o.get("schema") for o in out[:3]] == [
        "trainperf/lifecycle",
        "trainperf/perf-epoch",
        "trainperf/lifecycle",
    ]
    assert out[-1] == {"watch": "stopped", "reason": "finished (fit)", "exit": 0}
    assert perf_main(["watch", str(tmp_path / "nope")]) == 2
    assert "run directory not found" in capsys.readouterr().err


def test_the_live_view_lists_an_epochs_training_before_its_validation(tmp_path: Path) -> None:
    """In fit, epoch 0's validation record lands before its training record: the view still
    reads epoch by epoch, train then val."""
    from rich.console import Console
    from trainperf.cli.watch import WatchState, _live_view

    state = WatchState()
    for epoch, stage, wall in ((0, Stage.VAL, 4.4), (0, Stage.TRAIN, 88.0), (1, Stage.VAL, 4.5)):
        state.apply(EpochRecord(stage=stage, epoch=epoch, wall_s=wall, samples=8))
    console = Console(width=120, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(_live_view(state, tmp_path))
    rows = [line.split("│")[1:3] for line in console.export_text().splitlines() if "│" in line]
    assert [(e.strip(), s.strip()) for e, s in rows] == [("0", "train"), ("0", "val"), ("1", "val")]


def test_live_rates_are_all_ranks_like_the_epoch_records() -> None:
    """Under DDP the epoch records and the report state all ranks' samples/s; the live line and
    the watch's open-epoch line scale one rank's rate to them and say so (one figure per fact)."""
    from trainperf.cli.watch import interval_line

    phases = {"forward": 2.0, "backward": 1.0}
    assert live_line(phases, 7.3).endswith("· 7.3 samples/s")
    assert live_line(phases, 7.3, world_size=2).endswith("· 14.6 samples/s (2 ranks)")
    record = IntervalRecord(
        stage=Stage.TRAIN,
        epoch=1,
        num_batches=20,
        samples=80,
        elapsed_s=10.0,
        world_size=2,
        phases_s=phases,
        samples_per_sec=8.0,
    )
    assert "16.0 samples/s (2 ranks)" in interval_line(record)
