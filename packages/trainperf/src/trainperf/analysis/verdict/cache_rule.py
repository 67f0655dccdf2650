"""Worker caches in the verdict: each cache's hit rate after the first epoch, its corrupt entries.

For a cache X they come from the DataLoader workers' ``X_hits`` / ``X_misses`` (``X_evictions``,
``X_corrupt``) counters of the epoch records (:data:`cache_rule`)."""

from __future__ import annotations

from collections import Counter

from trainperf.analysis.config_keys import find_cache_key
from trainperf.analysis.run import RunData
from trainperf.analysis.stages import StageSummary
from trainperf.analysis.verdict.context import AdviceNames, VerdictContext, rounded, score
from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import Finding, threshold
from trainperf.core.rules import function_rule
from trainperf.core.stage import Stage
from trainperf.records.run_info import CORRUPT, EVICTIONS, HITS, MISSES, cache_names, counter


def cache(
    run: RunData, stages: dict[Stage, StageSummary], names: AdviceNames, total_s: float
) -> list[Finding]:
    """Each worker cache X's hit rate after the first epoch (the first fills it) and its corrupt
    entries, from the ``X_hits`` / ``X_misses`` (``X_evictions``, ``X_corrupt``) counters."""
    out: list[Finding] = []
    for name in cache_names({k for e in run.epochs for k in e.worker_counts}):
        out += _cache_findings(name, run, stages, names, total_s)
    return out


def _cache_findings(
    name: str, run: RunData, stages: dict[Stage, StageSummary], names: AdviceNames, total_s: float
) -> list[Finding]:
    out: list[Finding] = []
    hits, misses = Counter[str](), Counter[str]()
    evictions = corrupt = 0
    words = name.replace("_", " ")
    for e in run.epochs:
        counts = e.worker_counts
        corrupt += int(counter(counts, name + CORRUPT))
        evictions += int(counter(counts, name + EVICTIONS))
        if (e.epoch or 0) >= 1:
            hits[e.stage] += int(counter(counts, name + HITS))
            misses[e.stage] += int(counter(counts, name + MISSES))
    for stage, s in stages.items():
        lookups = hits[stage] + misses[stage]
        if lookups == 0:
            continue
        rate = 100.0 * hits[stage] / lookups
        if rate >= threshold("cache_hit_min_pct"):
            continue
        targets_s = s.worker_s.get("targets", 0.0)
        advice = "keys must not depend on augmentation, and all workers must share one cache"
        if evictions:
            advice = (
                f"{evictions} evictions: raise "
                f"{names.name(find_cache_key(names.config, 'max_bytes', name), 'its size limit')}"
                "; " + advice
            )
        out.append(
            Finding(
                id=FindingId.CACHE_MISSES,
                severity="warning",
                score=round(score(targets_s, total_s) * (1 - rate / 100.0), 1),
                title=(
                    f"{words} hits only {rate:.0f} % of {s.label} lookups after the first epoch"
                ),
                evidence={
                    "cache": name,
                    "hit_rate_pct": rounded(rate),
                    "hits": hits[stage],
                    "misses": misses[stage],
                    "evictions": evictions,
                    "worker_targets_s": rounded(targets_s, 3),
                },
                threshold={"min_hit_rate_pct": threshold("cache_hit_min_pct")},
                suggestion=advice + ".",
                stage=stage,
            )
        )
    if corrupt:
        out.append(
            Finding(
                id=FindingId.CACHE_CORRUPT,
                severity="warning",
                score=0.0,
                title=f"{corrupt} corrupt {words} entries were read (and recomputed)",
                evidence={"cache": name, "corrupt": corrupt},
                threshold={"corrupt": 0.0},
                suggestion=(
                    "check the cache directory's disk; delete the cache folder if it persists."
                ),
            )
        )
    return out


@function_rule("cache", emits={FindingId.CACHE_MISSES, FindingId.CACHE_CORRUPT})
def cache_rule(ctx: VerdictContext) -> list[Finding]:
    """The worker caches' findings (:func:`cache`)."""
    return cache(ctx.run, ctx.stages, ctx.names, ctx.total_s)
