"""The verdict's finding on ``torch.compile`` recompiles that recur or churn.

``torch.compile`` recompiles judged: the finding when recompiles recur after a run's first
epoch or reach :data:`RECOMPILE_CHURN` in one (``perf/recompiles.jsonl``, written by
``EpochScanCallback`` from :class:`trainperf.probe.recompiles.CompileWatch`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import msgspec

from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding
from trainperf.records.epoch_scans import RecompilesRecord, merge_reasons
from trainperf.records.files import epoch_runs, read_records

#: Recompiles in one epoch from which compiling is shape churn, even in the first epoch (one or
#: two are normal: Dynamo's automatic dynamic shapes recompile once, then generalise).
RECOMPILE_CHURN = 4


def recompile_finding(epochs: Sequence[RecompilesRecord], total_s: float = 0.0) -> Finding | None:
    """A finding when recompiles recur after a run's first epoch, reach :data:`RECOMPILE_CHURN`
    in one epoch, or hit the recompile limit; ``None`` otherwise. ``epochs``: one run's records
    in order; ``total_s``: the run's recorded wall time. The score is the share of it spent
    compiling (what this run measured; the eager fallback after the limit is not measured), 0
    without step-time records."""
    counted = [e for e in epochs if e.available]
    if not counted:
        return None
    first = min(e.epoch for e in counted)
    later = [e for e in counted if e.epoch > first and e.recompiles]
    churn = [e for e in counted if e.recompiles >= RECOMPILE_CHURN]
    hit = [e for e in counted if e.limit_hit]
    if not (later or churn or hit):
        return None
    recompiles = sum(e.recompiles for e in counted)
    compile_s = sum(e.compile_s for e in counted)
    reasons = merge_reasons(r for e in counted for r in e.reasons)
    why = []
    if hit:
        limit = next((e.limit for e in hit if e.limit is not None), None)
        why.append(
            f"hit the recompile limit{f' ({limit})' if limit is not None else ''} in epoch "
            f"{hit[0].epoch}: the function then runs eagerly"
        )
    if later:
        why.append(
            f"recompiles recur after the first epoch ({sum(e.recompiles for e in later)} in "
            f"epochs {', '.join(str(e.epoch) for e in later[:6])})"
        )
    if churn and not later:
        why.append(f"{max(e.recompiles for e in churn)} recompiles in one epoch")
    cause = ""
    if dimmed := next((r for r in reasons if r.dimension), None):
        sizes = dimmed.sizes
        shown = ", ".join(str(s) for s in sizes[:8]) + (", ..." if len(sizes) > 8 else "")
        cause = f"; {dimmed.dimension} changes" + (f" (sizes {shown})" if sizes else "")
    elif reasons:
        cause = f"; guard: {reasons[0].reason}"
    title = (
        f"torch.compile recompiles: {recompiles} recompiles ({compile_s:.1f} s compiling); "
        + "; ".join(why)
        + cause
    )
    how = "(torch._dynamo.mark_dynamic)"
    dim_match = next((r for r in reasons if r.dimension and "size" in r.reason), None)
    if dim_match is not None:
        index = dim_match.reason.rsplit(" ", 1)[-1]
        name = dim_match.reason.split("'", 1)[1].rsplit("' ", 1)[0]
        how = f"before the call: torch._dynamo.mark_dynamic(<{name}>, {index})"
    advice = [
        "pad inputs to a few size buckets (each bucket compiles once)",
        "compile with dynamic=True",
        f"or mark the changing dimension dynamic {how}",
        "raising torch._dynamo.config.recompile_limit only postpones it",
    ]
    return Finding(
        id=FindingId.RECOMPILES,
        severity="warning",
        score=round(min(100.0, 100.0 * compile_s / total_s), 1) if total_s > 0 else 0.0,
        title=title,
        evidence={
            "recompiles": recompiles,
            "compile_s": round(compile_s, 3),
            "recompiles_by_epoch": {str(e.epoch): e.recompiles for e in counted},
            "limit_hit_epochs": [e.epoch for e in hit],
            "reasons": [msgspec.to_builtins(r) for r in reasons[:10]],
            "batch_shapes_by_epoch": {
                str(e.epoch): e.batch_shapes for e in counted if e.batch_shapes is not None
            },
        },
        threshold={"recompiles_per_epoch": float(RECOMPILE_CHURN)},
        suggestion="; ".join(advice) + ".",
        stage="train",
        source="compile",
        confidence="measured",
    )


def recompile_findings_of(
    records: Sequence[RecompilesRecord], total_s: float = 0.0
) -> list[Finding]:
    """The verdict's recompile finding from the records of ``perf/recompiles.jsonl`` (in file
    order); each run recorded there (its epochs start again) is judged on its own, the worst one
    kept."""
    runs = epoch_runs(records)
    found = [f for run in runs if (f := recompile_finding(run, total_s)) is not None]
    return [max(found, key=lambda f: f.score)] if found else []


def recompile_findings(run_dir: str | os.PathLike[str], total_s: float = 0.0) -> list[Finding]:
    """:func:`recompile_findings_of` ``<run_dir>/perf/recompiles.jsonl``."""
    records = read_records(RecompilesRecord.path(run_dir), RecompilesRecord)
    return recompile_findings_of(records, total_s)
