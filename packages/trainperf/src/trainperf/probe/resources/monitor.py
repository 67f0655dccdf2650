"""The resource monitor: the sampler on a thread, alerts, records, summary.

The resource monitor: the sampler on a daemon thread, the training signals, the alert engine,
the logging intervals, the ``resources.jsonl`` records and the run summary."""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Mapping

from trainperf.alerts import AlertEngine, RuleContext
from trainperf.probe.resources.sampler import ResourceMonitorWarning, ResourceSampler
from trainperf.probe.resources.signals import StepSignals, is_nonfinite
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import ResourceSample, ResourceSummary

THREAD_NAME = "trainperf-resource-monitor"

# Metric-name suffixes averaged over a logging interval; other names (memory gauges, counters,
# cumulative totals) report their last value.
_MEAN_SUFFIXES = ("_percent", "_mb_s", "_w", "_c", "_mhz", "_share", "_per_s")


class ResourceMonitor:
    """Each tick (every ``interval_s``): sample, add the training signals, evaluate the alert rules,
    fold the values into the logging interval and the run summary, and (``record_samples``)
    write the sample to ``writer`` (``resources.jsonl``: the report plots every one). Every
    ``log_interval_s`` the interval's record (rates averaged) is left in :attr:`pending` for the
    training thread to hand to the loggers (:meth:`take_pending`: loggers are not thread-safe),
    and, without ``record_samples``, written instead. A tick that raises is one warning and stops
    the thread; training goes on. The settings are ``ResourceMonitorCallback``'s, documented and
    validated there.

    Args:
        engine: alert rules and sinks; ``None``: no alerting.
        writer: ``resources.jsonl`` writer; ``None`` on non-zero ranks.
        context: returns ``(step, epoch)`` for the records (called on the sampler thread);
            default the signals' step count and epoch.
        main_thread_ident: thread whose current frame a hang alert cites; default the caller's.
    """

    def __init__(
        self,
        sampler: ResourceSampler,
        signals: StepSignals,
        engine: AlertEngine | None = None,
        writer: RecordWriter | None = None,
        interval_s: float = 1.0,
        log_interval_s: float = 10.0,
        rate_window_s: float = 10.0,
        record_samples: bool = True,
        rank: int = 0,
        context: Callable[[], tuple[int, int]] | None = None,
        main_thread_ident: int | None = None,
    ) -> None:
        self.sampler = sampler
        self.signals = signals
        self.engine = engine
        self.writer = writer
        self.interval_s = float(interval_s)
        self.log_interval_s = float(log_interval_s)
        self.rate_window_s = float(rate_window_s)
        self.record_samples = bool(record_samples)
        self.rank = rank
        self._context = context or (lambda: (signals.steps, signals.epoch))
        self._main_ident = main_thread_ident or threading.get_ident()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one tick at a time (thread vs the final tick)
        self.pending: dict[str, float] | None = None
        self.samples = 0
        self.failed = False
        self._window: deque[tuple[int, int, int]] = deque()  # (train_ns, wait_ns, steps)
        self._periods: deque[float] = deque(maxlen=600)
        self._last_steps = 0
        self._last_train_ns = 0
        self._interval: dict[str, tuple[float, int, float]] = {}  # name -> (sum, count, last)
        self._interval_start: float | None = None
        self._summary: dict[str, tuple[float, int, float, float]] = {}  # (sum, count, max, last)
        self._write_failed = False

    # -- thread --------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """True while the sampler thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the daemon sampler thread (a daemon never keeps the process alive)."""
        if self.alive:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop and join the thread (idempotent); :meth:`tick` still works after."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def close(self) -> None:
        """:meth:`stop`, then release the sampler (NVML) and the alert sinks (idempotent)."""
        self.stop()
        self.sampler.close()
        if self.engine is not None:
            self.engine.close()

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:
                self.failed = True
                warnings.warn(
                    f"resource monitor failed and is off for the rest of this run "
                    f"({type(exc).__name__}: {exc})",
                    ResourceMonitorWarning,
                    stacklevel=1,
                )
                return
            # Fixed rate; after a stall, skip the missed ticks rather than bursting.
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:
                next_t = now + self.interval_s
            self._stop.wait(next_t - now)

    # -- one tick ------------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> dict[str, float]:
        """Sample once, evaluate the alert rules and fold the values into the records; returns
        the sample (with the training signals). Called by the thread; tests call it directly."""
        with self._lock:
            mono = time.monotonic() if now is None else now
            self.sampler.phase = self.signals.phase
            values = self.sampler.sample(mono)
            values.update(self._training_signals())
            step, epoch = self._context()
            if self.engine is not None:
                ctx = RuleContext(
                    phase=self.signals.phase,
                    step=step,
                    epoch=epoch,
                    checkpoint_bytes=self.signals.checkpoint_bytes,
                    straggler=self.signals.straggler,
                    where=self._where(values),
                    growth=self.signals.growth,
                )
                self.engine.update(values, ctx, t=mono)
            if self.record_samples:
                self._write(self._record(values, step, epoch))
            self._fold(values, mono, step, epoch)
            self.samples += 1
            return values

    def _record(self, metrics: Mapping[str, float], step: int, epoch: int) -> ResourceSample:
        """A ``resources.jsonl`` line (non-finite values left out: JSON has no NaN)."""
        return ResourceSample(
            t=time.time(),
            phase=self.signals.phase,
            epoch=epoch,
            step=step,
            rank=self.rank,
            metrics={k: v for k, v in metrics.items() if math.isfinite(v)},
            # per worker: trainperf.analysis.memory_growth.workers
            workers_uss=self.sampler.worker_uss(),
        )

    def _where(self, values: Mapping[str, float]) -> str | None:
        """The training thread's current line once no batch completed for 5 s (the hang
        rule cites it), else ``None``."""
        age = values.get("resources/last_step_age_s")
        if age is None or age <= 5.0:
            return None
        frame = sys._current_frames().get(self._main_ident)
        if frame is None:
            return None
        code = frame.f_code
        return f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"

    def _training_signals(self) -> dict[str, float]:
        sig = self.signals
        now = time.perf_counter_ns()
        out: dict[str, float] = {}
        if sig.phase == "train":
            train_ns = sig.train_time_ns(now)
            window = self._window
            window.append((train_ns, sig.wait_ns, sig.steps))
            horizon = train_ns - int(self.rate_window_s * 1e9)
            while len(window) > 2 and window[1][0] <= horizon:
                window.popleft()
            t0, w0, s0 = window[0]
            span = train_ns - t0
            if span > 0 and len(window) > 1:
                out["resources/data_wait_share"] = min(max((sig.wait_ns - w0) / span, 0.0), 1.0)
                out["resources/train_steps_per_s"] = (sig.steps - s0) / (span / 1e9)
        else:
            self._window.clear()
        steps = sig.steps
        train_ns = sig.train_time_ns(now)
        if steps > self._last_steps and train_ns > self._last_train_ns:
            self._periods.append(
                (train_ns - self._last_train_ns) / 1e9 / (steps - self._last_steps)
            )
        self._last_steps, self._last_train_ns = steps, train_ns
        if self._periods:
            out["resources/step_time_median_s"] = statistics.median(self._periods)
        if sig.last_end_ns:
            out["resources/last_step_age_s"] = (now - sig.last_end_ns) / 1e9
        nonfinite = is_nonfinite(sig.loss)
        if nonfinite is not None:
            out["resources/loss_nonfinite"] = nonfinite
        return out

    # -- records -------------------------------------------------------------------------------

    def _fold(self, values: Mapping[str, float], mono: float, step: int, epoch: int) -> None:
        if self._interval_start is None:
            self._interval_start = mono
        for name, value in values.items():
            if not math.isfinite(value):
                continue
            total, count, _ = self._interval.get(name, (0.0, 0, value))
            self._interval[name] = (total + value, count + 1, value)
            total, count, peak, _ = self._summary.get(name, (0.0, 0, value, value))
            self._summary[name] = (total + value, count + 1, max(peak, value), value)
        if mono - self._interval_start >= self.log_interval_s - 1e-9:
            self.flush_interval(step, epoch)
            self._interval_start = mono

    def flush_interval(self, step: int | None = None, epoch: int | None = None) -> None:
        """Close the logging interval: its record to :attr:`pending` (and to the writer without
        ``record_samples``)."""
        if not self._interval:
            return
        metrics = {
            name: total / count if name.endswith(_MEAN_SUFFIXES) else last
            for name, (total, count, last) in self._interval.items()
        }
        self._interval = {}
        if step is None or epoch is None:
            step, epoch = self._context()
        self.pending = metrics
        if not self.record_samples:  # otherwise every sample is in the file already
            self._write(self._record(metrics, step, epoch))

    def _write(
        self, record: ResourceSample | ResourceSummary, writer: RecordWriter | None = None
    ) -> None:
        writer = writer or self.writer
        if writer is None or self._write_failed:
            return
        try:
            writer.write(record)
        except OSError as exc:
            self._write_failed = True
            warnings.warn(
                f"resource monitor: cannot write {writer.path} ({exc}); records are off",
                ResourceMonitorWarning,
                stacklevel=2,
            )

    def take_pending(self) -> dict[str, float] | None:
        """The latest unlogged interval record (for the loggers), or None; clears it."""
        pending, self.pending = self.pending, None
        return pending

    def summary(self) -> dict[str, float]:
        """Run summary: ``<name>_mean`` and ``<name>_max`` of every sampled metric, plus the
        per-phase I/O totals, ``resources/samples`` and ``alerts/fired`` (events fired)."""
        out: dict[str, float] = {}
        for name, (total, count, peak, last) in sorted(self._summary.items()):
            if "/io_" in name and name.endswith("_mb"):
                out[name] = last  # cumulative per-phase totals
                continue
            out[f"{name}_mean"] = total / count
            out[f"{name}_max"] = peak
        out["resources/samples"] = float(self.samples)
        if self.engine is not None:
            out["alerts/fired"] = float(sum(self.engine.fired.values()))
        return out

    def write_summary(self, run: str | None = None) -> dict[str, float]:
        """Write the summary record (schema ``trainperf/resource-summary``) and return it.
        ``run`` names what was sampled (``"fit"``, ``"validate"``, ``"test"``): one run folder
        may hold a fit and the test that follows it."""
        summary = self.summary()
        if self.writer is not None:
            writer = RecordWriter(self.writer.path)
            record = ResourceSummary(
                t=time.time(),
                rank=self.rank,
                status=dict(self.sampler.status),
                metrics=summary,
                run=run,
            )
            self._write(record, writer)
            writer.close()
        return summary
