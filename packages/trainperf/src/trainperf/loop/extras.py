"""The plain loop Monitor's resource sampling and profiler windows.

The Monitor's options beyond the phases: resource sampling on a thread
(``trainperf.probe.resources``, the alert rules with their log and ``alerts.jsonl`` sinks) and
``torch.profiler`` windows over the epochs a :class:`ProfileSchedule` names, with the traces
where :class:`TraceOptions` puts them (``profiler_traces/epoch_{N}.json``; ``trainperf analyze``
reads them). Either failing is one warning and turns itself off; training goes on."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import torch

from trainperf.alerts.catalogue import build_rules
from trainperf.alerts.engine import AlertEngine
from trainperf.alerts.sinks import AlertSink, JsonlSink, LogSink
from trainperf.errors import PerfCallbackWarning
from trainperf.probe.resources import ResourceMonitor, ResourceSampler, StepSignals
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions
from trainperf.recording.run_recorder import RunRecorder
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import ResourceSample


class ResourceSampling:
    """Host, DataLoader-worker, disk and GPU resources every second on a daemon thread, into
    ``run_dir/perf/resources.jsonl`` (rank zero) with the alert rules."""

    def __init__(self, run_dir: Path, recorder: RunRecorder) -> None:
        self.signals = StepSignals()
        self.monitor: ResourceMonitor | None = None
        cuda = recorder.device.index if recorder.device.type == "cuda" else None
        if recorder.device.type == "cuda" and cuda is None and torch.cuda.is_available():
            cuda = torch.cuda.current_device()
        zero = recorder.rank == 0
        sinks: list[AlertSink] = [LogSink(), JsonlSink(run_dir / "perf" / "alerts.jsonl")]
        try:
            monitor = ResourceMonitor(
                ResourceSampler(checkpoint_dir=run_dir, cuda_device=cuda),
                self.signals,
                engine=AlertEngine(build_rules({}), sinks, rank=recorder.rank, all_rules=zero),
                writer=RecordWriter(ResourceSample.path(run_dir)) if zero else None,
                rank=recorder.rank,
                context=lambda: (recorder.global_step, 0),
                main_thread_ident=threading.get_ident(),
            )
            monitor.start()
            self.monitor = monitor
            self.signals.set_phase("train")
        except Exception as exc:
            warnings.warn(
                f"trainperf.loop.Monitor: resource sampling is off ({type(exc).__name__}: {exc})",
                PerfCallbackWarning,
                stacklevel=3,
            )

    def close(self) -> None:
        monitor, self.monitor = self.monitor, None
        if monitor is None:
            return
        monitor.stop()
        if not monitor.failed:
            self.signals.set_phase("idle")
            monitor.tick()
        monitor.flush_interval()
        monitor.write_summary(run="fit")
        monitor.close()


class ProfilerWindows:
    """One ``torch.profiler`` window per profiled stage epoch (:meth:`open` / ``step`` /
    :meth:`close`), its trace written as ``<output_dir>/epoch_{N}.json`` (rank suffix under
    several ranks)."""

    def __init__(
        self, run_dir: Path, schedule: ProfileSchedule | None, trace: TraceOptions, rank: int
    ) -> None:
        self.run_dir = run_dir
        self.schedule = schedule
        self.trace = trace
        self.rank = rank
        self.off = schedule is None
        self.written: list[Path] = []

    def _path(self, epoch: int, cycle: int) -> Path:
        out = Path(self.trace.output_dir)
        folder = out if out.is_absolute() else self.run_dir / out
        rank = f"_rank{self.rank}" if torch.distributed.is_initialized() else ""
        suffix = f"_cycle{cycle}" if cycle else ""
        gz = ".gz" if self.trace.gzip else ""
        return folder / f"epoch_{epoch}{suffix}{rank}.json{gz}"

    def open(self, stage: str, epoch: int) -> Any:
        """A started profiler for ``stage``'s ``epoch`` when the schedule names it, else None."""
        schedule = self.schedule
        if self.off or schedule is None or not schedule.profiles(stage, epoch):
            return None
        try:
            from torch.profiler import ProfilerActivity, profile
            from torch.profiler import schedule as cycle

            cycles = [0]

            def ready(prof: Any) -> None:
                path = self._path(epoch, cycles[0])
                cycles[0] += 1
                path.parent.mkdir(parents=True, exist_ok=True)
                prof.export_chrome_trace(str(path))
                self.written.append(path)

            wanted = {a.lower() for a in self.trace.activities}
            have = torch.profiler.supported_activities()
            activities = [ProfilerActivity.CPU]
            if "cuda" in wanted and ProfilerActivity.CUDA in have:
                activities.append(ProfilerActivity.CUDA)
            prof = profile(
                activities=activities,
                schedule=cycle(
                    wait=schedule.wait,
                    warmup=schedule.warmup,
                    active=schedule.active,
                    repeat=schedule.repeat,
                    skip_first=schedule.skip_first,
                ),
                on_trace_ready=ready,
                record_shapes=self.trace.record_shapes,
                profile_memory=self.trace.profile_memory,
                with_stack=self.trace.with_stack,
            )
            prof.start()
            return prof
        except Exception as exc:
            self._off(exc)
            return None

    def close(self, prof: Any) -> None:
        try:
            prof.stop()
        except Exception as exc:
            self._off(exc)

    def _off(self, exc: BaseException) -> None:
        self.off = True
        warnings.warn(
            f"trainperf.loop.Monitor: profiling is off ({type(exc).__name__}: {exc})",
            PerfCallbackWarning,
            stacklevel=3,
        )
