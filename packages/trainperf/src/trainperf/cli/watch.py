"""``trainperf watch RUN_DIR``: follow a run (running or finished) from its files alone.

Reads what the monitors append to ``RUN_DIR/perf/`` (epochs, in-epoch intervals, resource
samples, alerts and each rank's start and end in ``lifecycle.jsonl``), so it works from another
terminal, over SSH, and for ranks on other nodes writing to a shared folder. On a terminal it
redraws a live view (Rich); into a pipe or a log it prints one line per event. It stops when
every rank's last start has its end (exit 0), when a run on this host is gone without an end
(exit 1), when nothing new has come for ``--stale-after`` seconds (exit 1), or on Ctrl-C
(exit 0), and prints a final summary.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import msgspec
import psutil
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from trainperf.analysis.lifecycle import interrupted_at, resume_command
from trainperf.core.stage import STAGE_ORDER
from trainperf.errors import MissingPathError
from trainperf.present.live import live_line
from trainperf.records.epochs import EpochRecord, IntervalRecord
from trainperf.records.files import parse_record
from trainperf.records.monitoring import AlertEvent, LifecycleRecord, ResourceSample
from trainperf.records.schema import PERF_DIRNAME, Record, RunDirError, current_schema

EXIT_ENDED = 0
EXIT_LOST = 1

FOLLOWED = (LifecycleRecord, EpochRecord, IntervalRecord, ResourceSample, AlertEvent)
#: Resource metrics in the view: (metric, label, unit).
_RESOURCES = (
    ("resources/process_cpu_percent", "cpu", "%"),
    ("resources/process_rss_gb", "rss", " GiB"),
    ("resources/workers_uss_gb", "workers uss", " GiB"),
    ("resources/gpu_util_percent", "gpu", "%"),
    ("resources/cuda_allocated_gb", "cuda", " GiB"),
)


@dataclass
class _Tail:
    """One JSON-lines file read as it grows: complete lines only, from where the last read
    stopped (a file that shrank or was replaced was rewritten: it is read again from the
    start)."""

    path: Path
    kinds: dict[str, type[Record]]
    offset: int = 0
    line: int = 0
    partial: bytes = b""
    inode: int = -1

    def poll(self) -> list[Record]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        size = stat.st_size
        if size < self.offset or stat.st_ino != self.inode:
            self.offset, self.line, self.partial, self.inode = 0, 0, b"", stat.st_ino
        if size == self.offset:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(size - self.offset)
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        out: list[Record] = []
        for raw_line in lines:
            self.line += 1
            if not raw_line.strip():
                continue
            try:
                raw = json.loads(raw_line)
            except json.JSONDecodeError as exc:
                msg = f"{self.path}: line {self.line} is not valid JSON: {exc.msg}"
                raise RunDirError(msg) from None
            schema = current_schema(raw.get("schema")) if isinstance(raw, dict) else None
            kind = self.kinds.get(schema) if schema is not None else None
            if kind is not None:
                out.append(parse_record(kind, raw, f"{self.path}: line {self.line}"))
        return out


class RunTail:
    """The :data:`FOLLOWED` files of one run directory; :meth:`poll` returns what was appended
    since the last call, in time order."""

    def __init__(self, run_dir: Path) -> None:
        by_file: dict[Path, dict[str, type[Record]]] = {}
        for kind in FOLLOWED:
            by_file.setdefault(kind.path(run_dir), {})[kind.schema()] = kind
        self._tails = [_Tail(path, kinds) for path, kinds in by_file.items()]

    def poll(self) -> list[Record]:
        new = [record for tail in self._tails for record in tail.poll()]
        new.sort(key=lambda r: getattr(r, "t", None) or 0.0)
        return new


def _pid_gone(record: LifecycleRecord) -> bool:
    """The process of a start record ran on this host and is gone (or is another process now)."""
    if record.hostname != socket.gethostname() or record.pid <= 0:
        return False
    try:
        return psutil.Process(record.pid).create_time() > record.t + 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


@dataclass
class WatchState:
    """What has been read so far: the last interval, resource sample (per rank) and lifecycle
    record (per rank), every epoch and alert."""

    epochs: list[EpochRecord] = field(default_factory=list)
    interval: IntervalRecord | None = None
    resources: dict[int, ResourceSample] = field(default_factory=dict)
    alerts: list[AlertEvent] = field(default_factory=list)
    lifecycle: dict[int, LifecycleRecord] = field(default_factory=dict)

    def apply(self, record: Record) -> None:
        if isinstance(record, EpochRecord):
            self.epochs.append(record)
            self.interval = None
        elif isinstance(record, IntervalRecord):
            self.interval = record
        elif isinstance(record, ResourceSample):
            self.resources[record.rank] = record
        elif isinstance(record, AlertEvent):
            self.alerts.append(record)
        elif isinstance(record, LifecycleRecord):
            self.lifecycle[record.rank] = record

    def ended(self) -> str | None:
        """Why the run is over (``None`` while it runs): every rank's last record is an end, or
        a rank's process on this host is gone without one."""
        if not self.lifecycle:
            return None
        last = self.lifecycle.values()
        world = max(r.world_size for r in last)
        if len(self.lifecycle) >= world and all(r.event == "end" for r in last):
            statuses = sorted({r.status or "finished" for r in last})
            reason = f"{' / '.join(statuses)} ({', '.join(sorted({r.run for r in last}))})"
            where = interrupted_at(last)
            return reason if where is None else f"{reason} {where.removeprefix('interrupted ')}"
        for rank, record in sorted(self.lifecycle.items()):
            if record.event == "start" and _pid_gone(record):
                return f"rank {rank}'s process {record.pid} is gone without an end (it died)"
        return None

    def active_alerts(self) -> list[AlertEvent]:
        """Alerts whose last event (per rank and rule) is ``fired``."""
        last = {(e.rank, e.rule): e for e in self.alerts}
        return [e for e in last.values() if e.event == "fired"]


# -- wording ------------------------------------------------------------------------------------


def epoch_line(record: EpochRecord) -> str:
    """``epoch 3 train 13.31 s 240 samples 18.0 samples/s · forward 52% backward 41% ...``."""
    rate = record.samples_per_sec
    if rate is None and record.all_wall_s > 0:
        rate = record.all_samples / record.all_wall_s
    text = (
        f"epoch {record.epoch} {record.stage} {record.all_wall_s:.2f} s "
        f"{record.all_samples} samples · {live_line(record.phases_s, rate)}"
    )
    if record.straggler is not None:
        text += f" · straggler rank {record.straggler.rank}"
    return text


def interval_line(record: IntervalRecord) -> str:
    """``  epoch 3 train so far: 120 batches, 37.1 s · forward 50% ... · 16.2 samples/s``."""
    head = (
        f"  epoch {record.epoch} {record.stage} so far: {record.num_batches} batches, "
        f"{record.elapsed_s:.1f} s"
    )
    rest = live_line(record.phases_s, record.samples_per_sec, world_size=record.world_size)
    return f"{head} · {rest}" if rest else head


def resources_line(sample: ResourceSample) -> str:
    parts = [
        f"{label} {sample.metrics[name]:.{0 if unit == '%' else 2}f}{unit}"
        for name, label, unit in _RESOURCES
        if name in sample.metrics
    ]
    return f"  resources rank {sample.rank}: " + ", ".join(parts) if parts else ""


def alert_line(event: AlertEvent) -> str:
    return f"alert rank {event.rank} {event.rule} {event.event}: {event.message}"


def lifecycle_line(record: LifecycleRecord) -> str:
    if record.event == "start":
        return f"rank {record.rank} {record.run} started (pid {record.pid} on {record.hostname})"
    said = interrupted_at([record])
    return f"rank {record.rank} {record.run} {said or record.status or 'finished'}"


def summary_lines(state: WatchState, reason: str, run_dir: Path | None = None) -> list[str]:
    """The final summary: why watching stopped (an interrupted run: where, and the command that
    resumes it from ``run_dir``), epochs seen, last throughput, alerts."""
    lines = [f"watch: {reason}"]
    if run_dir is not None and interrupted_at(state.lifecycle.values()) is not None:
        lines.append(f"  resume: {resume_command(run_dir)}")
    by_stage: dict[str, list[EpochRecord]] = {}
    for record in state.epochs:
        by_stage.setdefault(str(record.stage), []).append(record)
    for stage, records in by_stage.items():
        lines.append(f"  {stage}: {len(records)} epoch(s); last: {epoch_line(records[-1])}")
    fired = [e for e in state.alerts if e.event == "fired"]
    if fired:
        names = sorted({f"rank {e.rank} {e.rule}" for e in fired})
        lines.append(f"  alerts fired: {len(fired)} ({', '.join(names)})")
    active = state.active_alerts()
    if active:
        lines.append("  still active: " + ", ".join(f"rank {e.rank} {e.rule}" for e in active))
    return lines


# -- the two views ----------------------------------------------------------------------------


def _epoch_order(record: EpochRecord) -> tuple[int, int]:
    return (record.epoch or 0, STAGE_ORDER.index(record.stage))


def _live_view(state: WatchState, run_dir: Path) -> RenderableType:
    table = Table(title=f"trainperf watch {run_dir}", title_justify="left", expand=False)
    for name in ("epoch", "stage", "wall s", "samples/s", "phases"):
        table.add_column(name, no_wrap=name != "phases", overflow="fold")
    # in fit, an epoch's validation lands before its training epoch ends: list train first
    for record in sorted(state.epochs[-12:], key=_epoch_order):
        rate = record.samples_per_sec
        table.add_row(
            str(record.epoch),
            str(record.stage),
            f"{record.all_wall_s:.2f}",
            f"{rate:.1f}" if rate is not None else "",
            live_line(record.phases_s, None),
        )
    rows: list[RenderableType] = [table]
    if state.interval is not None:
        rows.append(Text(interval_line(state.interval).strip()))
    rows.extend(Text(line.strip()) for line in map(resources_line, state.resources.values()))
    for event in state.alerts[-5:]:
        rows.append(Text(alert_line(event), style="yellow" if event.event == "fired" else ""))
    return Group(*rows)


@dataclass
class Watch:
    """Follows ``run_dir`` until it ends; ``emit`` gets each plain line (pipes, logs)."""

    run_dir: Path
    poll_s: float = 1.0
    stale_after_s: float = 600.0
    interval_every_s: float = 30.0
    json_lines: bool = False
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    state: WatchState = field(default_factory=WatchState)
    #: Why following stopped (set by :meth:`follow`).
    reason: str = ""
    _last_interval_line: float = field(default=float("-inf"), init=False)

    def _plain(self, record: Record) -> Iterator[str]:
        if self.json_lines:
            yield msgspec.json.encode(record).decode()
        elif isinstance(record, EpochRecord):
            yield epoch_line(record)
        elif isinstance(record, AlertEvent):
            yield alert_line(record)
        elif isinstance(record, LifecycleRecord):
            yield lifecycle_line(record)
        elif isinstance(record, IntervalRecord | ResourceSample):
            now = self.clock()
            if now - self._last_interval_line >= self.interval_every_s:
                self._last_interval_line = now
                if self.state.interval is not None:
                    yield interval_line(self.state.interval)
                for sample in self.state.resources.values():
                    if line := resources_line(sample):
                        yield line

    def follow(self, emit: Callable[[str], None], redraw: Callable[[], None] | None) -> int:
        """Read until the run ends, updating :attr:`state` and either redrawing the live view or
        (``redraw`` None) emitting plain lines; return the exit code."""
        files = RunTail(self.run_dir)
        last_news = self.clock()
        try:
            while True:
                new = files.poll()
                for record in new:
                    self.state.apply(record)
                    if redraw is None:
                        for line in self._plain(record):
                            emit(line)
                if new:
                    last_news = self.clock()
                    if redraw is not None:
                        redraw()
                ended = self.state.ended()
                if ended is not None:
                    self.reason = ended
                    return EXIT_LOST if "gone" in ended else EXIT_ENDED
                if self.clock() - last_news > self.stale_after_s:
                    self.reason = (
                        f"nothing new for {self.stale_after_s:.0f} s and no end recorded: the "
                        "run may have stopped (or its monitors are off)"
                    )
                    return EXIT_LOST
                self.sleep(self.poll_s)
        except KeyboardInterrupt:
            self.reason = "stopped watching (Ctrl-C); the run goes on"
            return EXIT_ENDED


def watch(
    run_dir: Path, *, poll_s: float = 1.0, stale_after_s: float = 600.0, json_lines: bool = False
) -> int:
    """``trainperf watch`` (module doc): the exit code; :class:`MissingPathError` when ``run_dir``
    is not a folder."""
    if not run_dir.is_dir():
        raise MissingPathError(f"run directory not found: {run_dir}")
    con = Console()
    w = Watch(run_dir, poll_s=poll_s, stale_after_s=stale_after_s, json_lines=json_lines)
    emit = partial(con.print, markup=False, highlight=False, soft_wrap=True)
    if not (run_dir / PERF_DIRNAME).is_dir() and not json_lines:
        emit(f"waiting for {run_dir / PERF_DIRNAME} (the run's monitors write there) ...")
    if json_lines or not con.is_terminal:
        code = w.follow(emit, None)
    else:
        with Live(_live_view(w.state, run_dir), console=con, refresh_per_second=2) as live:
            code = w.follow(emit, lambda: live.update(_live_view(w.state, run_dir)))
    if json_lines:
        emit(json.dumps({"watch": "stopped", "reason": w.reason, "exit": code}))
    else:
        for line in summary_lines(w.state, w.reason, run_dir):
            emit(line)
    return code
