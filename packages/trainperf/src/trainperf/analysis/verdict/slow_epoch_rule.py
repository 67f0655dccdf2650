"""The ``slow_epoch`` finding: an epoch far slower than the others of its stage, with its cause.

The cause comes from the run's records, or an explicit "unexplained" names what was checked
(:mod:`trainperf.analysis.slow_epochs`). One finding per stage: its slowest epoch, the others
counted.

What it could recover: nothing where the cause is the host's load or the profiler (a caveat on
the measurement, not a change to the run); else the extra seconds (a bound)."""

from __future__ import annotations

from trainperf.analysis.run import RunData
from trainperf.analysis.slow_epochs import NO_SAMPLES, SlowEpoch, slow_epochs
from trainperf.analysis.verdict.context import VerdictContext, rounded, score
from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding, threshold
from trainperf.core.rules import function_rule

__all__ = ["slow_epoch_findings", "slow_epoch_rule"]

#: Causes that are the measurement's, not the run's: nothing to recover by changing the run.
_NOT_THE_RUNS = frozenset({"CPU contention", "host CPU saturated", "profiler window"})

#: What to do about each cause.
_ADVICE = {
    "CPU contention": (
        "other processes took the host's CPUs during it: its time is the machine's load, not "
        "the code's; measure on an idle host or dedicated cores"
    ),
    "host CPU saturated": (
        "every core was busy during it: check what else ran on the host then (other jobs, "
        "DataLoader workers beyond the cores, a logger or checkpoint thread)"
    ),
    "outlier batches": (
        "look at what those batches hold or do (larger samples, a cache miss, a checkpoint, "
        "logging or evaluation at that step)"
    ),
    "I/O wait": "the disk stalled the reads: put the data on a local SSD or cache it",
    "swap": (
        "host memory was near full: the OS likely swapped; fewer DataLoader workers or a "
        "smaller prefetch_factor"
    ),
    "compiling": "Dynamo compiled during it: see the recompiles finding for the shapes",
    "profiler window": "the profiler's own overhead: nothing to change in the run",
}


def slow_epoch_findings(run: RunData, total_s: float) -> list[Finding]:
    """One ``slow_epoch`` finding per stage with a slow epoch (see the module doc)."""
    cpu_count = run.run_info.cpu_count if run.run_info is not None else None
    found = slow_epochs(run.epochs, run.recompiles, run.resources, run.profiler_windows, cpu_count)
    out: list[Finding] = []
    for stage in dict.fromkeys(e.stage for e in found):
        mine = [e for e in found if e.stage == stage]
        out.append(_finding(mine[0], mine[1:], total_s))
    return out


def _finding(e: SlowEpoch, more: list[SlowEpoch], total_s: float) -> Finding:
    causes = e.causes
    names = [c.name for c in causes]
    checked = [c for c in e.checks if not c.explains]
    where = ", ".join(f"{p} +{s:.1f} s" for p, s in e.phases_extra_s.items())
    title = (
        f"{e.stage.label} epoch {e.epoch} took {e.x_median:.1f}x the other epochs' time per "
        f"batch ({e.wall_s:.1f} s, {e.excess_s:.1f} s extra" + (f": {where}" if where else "") + ")"
    )
    if causes:
        title += "; cause: " + "; ".join(f"{c.name} ({c.found})" for c in causes)
        advice = "; ".join(_ADVICE[n] for n in names if n in _ADVICE)
    else:
        title += "; cause unexplained"
        advice = (
            "nothing the run recorded explains it: "
            + "; ".join(f"{c.name}: {c.found}" for c in checked)
            + (
                ". Record resource samples (ResourceMonitorCallback) and a profiler window on a "
                "slow epoch to see it if it recurs"
                if any(c.found == NO_SAMPLES for c in checked)
                else ". Record a profiler window on a slow epoch to see it if it recurs"
            )
        )
    if more:
        title += (
            f"; {len(more)} more slow epoch{'s' if len(more) > 1 else ''} "
            f"({', '.join(str(m.epoch) for m in more)})"
        )
    excess = e.excess_s + sum(m.excess_s for m in more)
    cost = score(excess, total_s)
    theirs = bool(causes) and all(n in _NOT_THE_RUNS for n in names)
    return Finding(
        id=FindingId.SLOW_EPOCH,
        severity="info" if theirs else "warning",
        score=cost,
        title=title,
        evidence={
            "epoch": e.epoch,
            "wall_s": rounded(e.wall_s, 3),
            "s_per_batch": rounded(e.s_per_batch, 4),
            "other_epochs_median_s_per_batch": rounded(e.median_s_per_batch, 4),
            "x_median": rounded(e.x_median, 2),
            "excess_s": rounded(e.excess_s, 3),
            "other_epochs": e.others,
            "phases_extra_s": e.phases_extra_s,
            "checked": {c.name: c.found for c in e.checks},
            "more_slow_epochs": [m.epoch for m in more],
        },
        threshold={
            "x_median": threshold("slow_epoch_x"),
            "robust_deviations": threshold("slow_epoch_mad"),
        },
        suggestion=advice + ".",
        stage=e.stage,
        confidence="likely" if causes else "measured",
        recoverable_pct=0.0 if theirs else cost,
        recoverable_from="bound",
    )


@function_rule(FindingId.SLOW_EPOCH, emits={FindingId.SLOW_EPOCH})
def slow_epoch_rule(ctx: VerdictContext) -> list[Finding]:
    """An epoch far slower than the others of its stage (:func:`slow_epoch_findings`)."""
    return slow_epoch_findings(ctx.run, ctx.total_s)
