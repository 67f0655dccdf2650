"""Epochs far slower than the others of their stage, and what the run's records say about why.

An epoch is slow when its time per batch is at least ``slow_epoch_x`` times the median of the
stage's other steady epochs (warm-up epochs are left out: :func:`~.stages.split_warmup`) and
beyond ``slow_epoch_mad`` robust deviations of them (1.4826 x their median absolute deviation):
a robust measure, so one slow epoch does not hide in its own noise. It needs two other epochs.

Each slow epoch is checked against what the run recorded, and every check is named whether it
found something or not, so "unexplained" says what was ruled out:

- **phases**: where the extra seconds went (the phase that grew);
- **outlier batches**: a few batches far slower than the other epochs' median batch holding
  most of the extra, or every batch slower (a machine-wide cause);
- **CPU contention** and a **saturated host** in the epoch's resource samples
  (:mod:`trainperf.analysis.contention`), against the other epochs' host CPU;
- **I/O wait** and **host memory** (swapping is not recorded; memory near full is its sign);
- **compiling** (``perf/recompiles.jsonl``) and a **profiler window** in the epoch;
- **GC pauses**: not recorded by the run, said so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainperf.analysis.contention import Contention, summarize
from trainperf.analysis.stages import split_warmup
from trainperf.core.findings import threshold
from trainperf.core.stage import Stage
from trainperf.records.epoch_scans import RecompilesRecord
from trainperf.records.epochs import EpochRecord
from trainperf.records.monitoring import ProfilerWindow, ResourceSample

__all__ = ["NO_SAMPLES", "Check", "SlowEpoch", "slow_epochs"]

#: What the contention check found in an epoch without resource samples.
NO_SAMPLES = "no resource samples in this epoch"
#: A batch at least this many times the other epochs' median batch is an outlier batch.
OUTLIER_BATCH_X = 3.0
#: Outlier batches that hold at least this share of the epoch's extra time explain it.
OUTLIER_SHARE = 0.5
#: A host CPU (median, % of all cores) this many points above the other epochs' is a cause.
HOST_CPU_RISE_PTS = 15.0


@dataclass(frozen=True)
class Check:
    """One thing looked at for a slow epoch: its name, whether it explains the epoch, and what
    was found (words)."""

    name: str
    explains: bool
    found: str


@dataclass(frozen=True)
class SlowEpoch:
    """A slow epoch of ``stage``: its wall time, seconds per batch against the other epochs'
    median (``x_median`` times), the extra seconds, the phases that grew (phase -> extra s) and
    the :class:`Check` list, explaining ones first."""

    stage: Stage
    epoch: int | None
    wall_s: float
    s_per_batch: float
    median_s_per_batch: float
    x_median: float
    excess_s: float
    others: int
    phases_extra_s: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def causes(self) -> list[Check]:
        """The checks that explain it (empty: unexplained)."""
        return [c for c in self.checks if c.explains]


def _mad_sigma(values: Sequence[float], median: float) -> float:
    return 1.4826 * statistics.median(abs(v - median) for v in values)


def slow_epochs(
    epochs: Sequence[EpochRecord],
    recompiles: Sequence[RecompilesRecord] = (),
    resources: Sequence[ResourceSample] = (),
    windows: Sequence[ProfilerWindow] = (),
    cpu_count: int | None = None,
) -> list[SlowEpoch]:
    """The slow epochs of every stage (see the module doc), slowest (most extra seconds)
    first."""
    steady, _ = split_warmup(epochs, recompiles)
    out: list[SlowEpoch] = []
    for stage in dict.fromkeys(r.stage for r in steady):
        mine = [r for r in steady if r.stage == stage and r.num_batches > 0]
        if len(mine) < 3:
            continue
        per_batch = [r.wall_s / r.num_batches for r in mine]
        for i, r in enumerate(mine):
            others = per_batch[:i] + per_batch[i + 1 :]
            median = statistics.median(others)
            sigma = _mad_sigma(others, median)
            if median <= 0 or per_batch[i] < threshold("slow_epoch_x") * median:
                continue
            if per_batch[i] - median <= threshold("slow_epoch_mad") * sigma:
                continue
            rest = mine[:i] + mine[i + 1 :]
            slow = SlowEpoch(
                stage=stage,
                epoch=r.epoch,
                wall_s=r.wall_s,
                s_per_batch=per_batch[i],
                median_s_per_batch=median,
                x_median=per_batch[i] / median,
                excess_s=r.wall_s - median * r.num_batches,
                others=len(rest),
                phases_extra_s=_phases_extra(r, rest),
            )
            checks = _checks(slow, r, rest, recompiles, resources, windows, cpu_count)
            out.append(_with(slow, checks))
    return sorted(out, key=lambda e: -e.excess_s)


def _with(slow: SlowEpoch, checks: list[Check]) -> SlowEpoch:
    ordered = [c for c in checks if c.explains] + [c for c in checks if not c.explains]
    return SlowEpoch(**{**slow.__dict__, "checks": ordered})


def _phases_extra(r: EpochRecord, rest: Sequence[EpochRecord]) -> dict[str, float]:
    """Phase -> seconds above the other epochs' median per batch, the phases that grew by at
    least a tenth of the extra, largest first."""
    extra: dict[str, float] = {}
    for phase, secs in r.phases_s.items():
        typical = statistics.median(e.phases_s.get(phase, 0.0) / e.num_batches for e in rest)
        grew = secs - typical * r.num_batches
        if grew > 0:
            extra[phase] = grew
    total = sum(extra.values())
    kept = {p: round(s, 3) for p, s in extra.items() if total and s >= 0.1 * total}
    return dict(sorted(kept.items(), key=lambda kv: -kv[1]))


def _checks(
    slow: SlowEpoch,
    r: EpochRecord,
    rest: Sequence[EpochRecord],
    recompiles: Sequence[RecompilesRecord],
    resources: Sequence[ResourceSample],
    windows: Sequence[ProfilerWindow],
    cpu_count: int | None,
) -> list[Check]:
    checks = [_outlier_batches(slow, r, rest)]
    checks += _host(slow, resources, cpu_count, {e.epoch for e in rest})
    spent = sum(c.compile_s for c in recompiles if c.epoch == r.epoch and c.available)
    if slow.stage == Stage.TRAIN and any(c.available for c in recompiles):
        checks.append(
            Check(
                "compiling",
                spent >= 0.5 * slow.excess_s,
                f"Dynamo compiled for {spent:.1f} s in this epoch"
                if spent
                else "no Dynamo compiles in this epoch",
            )
        )
    profiled = [w for w in windows if w.stage == slow.stage and w.epoch == r.epoch]
    checks.append(
        Check(
            "profiler window",
            bool(profiled),
            f"a profiler window recorded batches {profiled[0].batches} of it (its overhead)"
            if profiled and profiled[0].batches
            else ("a profiler window recorded it" if profiled else "no profiler window in it"),
        )
    )
    checks.append(Check("GC pauses", False, "not recorded"))
    return checks


def _outlier_batches(slow: SlowEpoch, r: EpochRecord, rest: Sequence[EpochRecord]) -> Check:
    typical = [t for e in rest for t in e.batch_times_s if t is not None]
    mine = [t for t in r.batch_times_s if t is not None]
    if not typical or not mine:
        return Check("outlier batches", False, "batch times not recorded")
    median = statistics.median(typical)
    stride = max(r.batch_times_stride, 1)
    outliers = [(i * stride, t) for i, t in enumerate(r.batch_times_s) if t is not None]
    outliers = [(i, t) for i, t in outliers if t >= OUTLIER_BATCH_X * median]
    # the stored times are every stride-th batch: their excess scaled to the whole epoch
    excess = stride * sum(t - median for _, t in outliers)
    few = len(outliers) <= 0.25 * len(mine)
    explains = bool(outliers) and few and excess >= OUTLIER_SHARE * slow.excess_s
    if not outliers:
        slower = statistics.median(mine) / median if median > 0 else 0.0
        return Check(
            "outlier batches",
            False,
            f"none: every batch was slower (median batch {slower:.1f}x the other epochs')",
        )
    lo, hi = min(t for _, t in outliers), max(t for _, t in outliers)
    where = ", ".join(str(i) for i, _ in outliers[:6]) + (", ..." if len(outliers) > 6 else "")
    return Check(
        "outlier batches",
        explains,
        f"{len(outliers)} of {len(mine)} batches took {lo:.2f}-{hi:.2f} s "
        f"(>= {OUTLIER_BATCH_X:.0f}x the other epochs' median batch, {median * 1000:.0f} ms; "
        f"batches {where}), {excess:.1f} s of the {slow.excess_s:.1f} s extra",
    )


def _median_of(samples: Sequence[ResourceSample], name: str) -> float | None:
    values = [v for s in samples if (v := s.metrics.get(name)) is not None]
    return statistics.median(values) if values else None


def _host(
    slow: SlowEpoch,
    resources: Sequence[ResourceSample],
    cpu_count: int | None,
    other_epochs: set[int | None],
) -> list[Check]:
    """CPU contention, a saturated host, I/O wait and host memory in the epoch's samples."""
    stage = str(slow.stage)
    mine = [s for s in resources if s.phase == stage and s.epoch == slow.epoch]
    others = [s for s in resources if s.phase == stage and s.epoch in other_epochs]
    if not mine:
        return [Check("CPU contention", False, NO_SAMPLES)]
    out: list[Check] = []
    found: Contention | None = summarize(mine, cpu_count)
    cpu = _median_of(mine, "resources/system_cpu_percent")
    before = _median_of(others, "resources/system_cpu_percent")
    vs = f"; other epochs {before:.0f} %" if before is not None else ""
    if found is not None and found.present:
        out.append(Check("CPU contention", True, found.sentence()))
    elif cpu is not None:
        risen = before is None or cpu - before >= HOST_CPU_RISE_PTS
        busy = cpu >= threshold("cpu_saturated_pct") and risen
        words = f"host CPU {cpu:.0f} % busy (median{vs})"
        if found is not None and not found.present:
            words += ", other processes' share below the contention limit"
        out.append(Check("CPU contention" if not busy else "host CPU saturated", busy, words))
    else:
        out.append(Check("CPU contention", False, "no host CPU in the samples"))
    iowait = _median_of(mine, "resources/iowait_percent")
    if iowait is not None:
        high = iowait >= threshold("iowait_pct")
        out.append(Check("I/O wait", high, f"iowait {iowait:.0f} % (median)"))
    memory = max(
        (v for s in mine if (v := s.metrics.get("resources/system_memory_percent")) is not None),
        default=None,
    )
    if memory is not None:
        full = memory >= threshold("host_memory_pct")
        out.append(
            Check(
                "swap",
                full,
                f"host memory peaked at {memory:.0f} %"
                + (": swapping likely" if full else "; swap itself is not recorded"),
            )
        )
    else:
        out.append(Check("swap", False, "not recorded"))
    return out
