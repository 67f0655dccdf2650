"""The rules on each of a run's stages: input-bound, a phase's material share, a straggler.

A phase's share has one finding shape (:func:`phase_finding`: slow metric, slow postprocessing,
callbacks, the module's hooks, checkpoints, unattributed time); the straggler is the DDP rank the
others wait for. Each is a :class:`~trainperf.core.rules.Rule` over the
:class:`.context.VerdictContext` (at the end of the module)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from trainperf.analysis.advice import candidates_for, workers_wait
from trainperf.analysis.config_keys import find_cache_key
from trainperf.analysis.run import RunData, hint
from trainperf.analysis.stages import StageSummary
from trainperf.analysis.verdict.context import (
    AdviceNames,
    VerdictContext,
    per_stage_rule,
    rounded,
    score,
    suggested_workers,
)
from trainperf.analysis.verdict.input_causes import receive_bound_parts, wait_causes
from trainperf.core.candidates import Candidate
from trainperf.core.finding_ids import FindingId
from trainperf.core.findings import THRESHOLDS, Finding, input_bound_severity, threshold
from trainperf.core.ranks import STRAGGLER_MIN_S, STRAGGLER_MIN_SHARE
from trainperf.core.rules import function_rule

# Worker parts: finer parts inside fetch (dataset) and collate.
_FETCH_PARTS = ("decode", "transform")
_COLLATE_PARTS = ("targets",)
_PART_WORDS = {
    "fetch": "the dataset's __getitem__ (fetch)",
    "decode": "image decoding",
    "transform": "augmentation / transforms",
    "collate": "the collate function",
    "targets": "target generation",
}


def phase_share(s: StageSummary, phase: str, rule: str) -> float | None:
    """``phase``'s share (%) of the stage's wall time, or ``None`` below ``{rule}_warn_pct``."""
    pct = s.share(phase)
    return pct if s.wall_s > 0 and pct >= threshold(f"{rule}_warn_pct") else None


def phase_finding(
    s: StageSummary,
    phase: str,
    finding_id: str,
    total_s: float,
    title: str,
    suggestion: str,
    rule: str,
    top: tuple[str, float] | None = None,
    *,
    severity: str | None = None,
    evidence: dict[str, Any] | None = None,
    candidates: list[Candidate] | None = None,
) -> Finding:
    """A finding that ``phase`` takes a material share of the stage, scored by its seconds:
    evidence ``{phase}_pct`` / ``{phase}_s``, the slowest named callback or hook (``top``), then
    ``evidence``; judged by ``{rule}_warn_pct`` and, where the table has one,
    ``{rule}_critical_pct`` (critical from there on; else a warning)."""
    secs = s.phases_s.get(phase, 0.0)
    pct = s.share(phase)
    limits = {"warning_pct": threshold(f"{rule}_warn_pct")}
    if f"{rule}_critical_pct" in THRESHOLDS:
        limits["critical_pct"] = threshold(f"{rule}_critical_pct")
    if severity is None:
        severity = "critical" if pct >= limits.get("critical_pct", math.inf) else "warning"
    return Finding(
        id=finding_id,
        severity=severity,
        score=score(secs, total_s),
        title=title,
        evidence={
            f"{phase}_pct": rounded(pct),
            f"{phase}_s": rounded(secs, 3),
            **({"slowest": top[0], "slowest_s": rounded(top[1], 3)} if top else {}),
            **(evidence or {}),
        },
        threshold=limits,
        suggestion=suggestion,
        stage=s.stage,
        candidates=candidates or [],
    )


def _worker_bottleneck(s: StageSummary) -> tuple[str | None, dict[str, Any]]:
    """The worker part that explains the data wait, with per-sample / per-batch figures."""
    w = s.worker_s
    per_sample = max(s.samples, 1)
    per_batch = max(s.num_batches, 1)
    evidence: dict[str, Any] = {
        f"worker_{part}_ms_per_sample": rounded(1000.0 * secs / per_sample, 2)
        for part, secs in sorted(w.items())
    }
    if "collate" in w:
        evidence["worker_collate_ms_per_batch"] = rounded(1000.0 * w["collate"] / per_batch, 2)
    fetch, collate = w.get("fetch", 0.0), w.get("collate", 0.0)
    if fetch <= 0 and collate <= 0:
        return None, evidence
    dominant_pct = threshold("worker_part_dominant_pct") / 100.0
    children: tuple[str, ...]
    if fetch >= collate:
        part, parent, children = "fetch", fetch, _FETCH_PARTS
    else:
        part, parent, children = "collate", collate, _COLLATE_PARTS
    best = max(children, key=lambda c: w.get(c, 0.0))
    if w.get(best, 0.0) >= dominant_pct * parent:
        part = best
    return part, evidence


def input_bound(
    s: StageSummary, run: RunData, names: AdviceNames, total_s: float
) -> Finding | None:
    if (pct := phase_share(s, "data_wait", "input")) is None:
        return None
    causes = wait_causes(run, s, names)  # which part of the wait: the workers or the receive
    if causes is not None and causes.receive_bound:
        title, text, extra, found = receive_bound_parts(s, causes, pct, names)
        return phase_finding(
            s,
            "data_wait",
            FindingId.INPUT_BOUND,
            total_s,
            title,
            text,
            "input",
            severity=input_bound_severity(pct),
            evidence=extra,
            candidates=found,
        )
    part, evidence = _worker_bottleneck(s)
    title = f"input-bound: {pct:.0f} % of {s.label} wall time is data wait"
    title += causes.words() if causes is not None else ""
    evidence.update(causes.evidence() if causes is not None else {})
    if part is not None:
        secs = s.worker_s.get(part, 0.0)
        if part == "collate":
            title += (
                f"; {_PART_WORDS[part]} takes {1000.0 * secs / max(s.num_batches, 1):.0f} ms/batch"
                + (" in the workers" if s.num_workers else " in the main process")
            )
        else:
            where = "worker-side " if s.num_workers else ""
            ms = 1000.0 * secs / max(s.samples, 1)
            title += f"; {where}{_PART_WORDS[part]} takes {ms:.0f} ms/sample"
    workers_key = names.key("num_workers", stage=s.stage, aliases=("workers",))
    workers = names.name(workers_key, "the DataLoader's num_workers", s.num_workers)
    advice: list[str] = []
    busy = names.workers_busy(s)  # a worker's CPU share: waiting workers are not cores in use
    want = suggested_workers(s, names.cpu_count, busy)
    if part == "targets":
        cache = find_cache_key(names.config, "enabled")
        if cache is None:
            advice.append(
                "compute the per-sample targets once and read them back (cache them keyed by "
                "the un-augmented sample) instead of in every epoch"
            )
        elif cache.value is not True:
            advice.append(
                f"enable `{cache.path}=true`"
                + (" (now false)" if cache.value is False else "")
                + " so the targets are computed once and read back"
                + (
                    " (training reads them back only when augmentation keeps the labels fixed)"
                    if s.stage == "train"
                    else ""
                )
            )
    elif part in ("fetch", "decode", "transform"):
        advice.append(
            f"make {_PART_WORDS[part]} cheaper (decode once at the training size, cache decoded "
            "images, lighter augmentation)"
        )
    elif part == "collate":
        advice.append(
            "make the collate function cheaper: vectorise it or move per-sample work into "
            "__getitem__"
        )
    if not s.num_workers:
        n = max(2, min(want or 2, names.cpu_count or 4))
        advice.append(f"load in parallel: set {workers} to {n}")
    elif want is not None and want > s.num_workers:
        beyond = busy is not None and names.cpu_count is not None and want > names.cpu_count
        advice.append(
            f"raise {workers} to {want}"
            + (
                f" (its workers wait, at {100.0 * busy:.0f} % of a core each, so more workers "
                f"than the {names.cpu_count} cores still help)"
                if beyond and busy is not None
                else ""
            )
        )
    elif names.cpu_count and s.num_workers >= names.cpu_count and not workers_wait(busy):
        advice.append(
            f"{workers} already uses all {names.cpu_count} cores"
            + (
                f" (its workers compute, at {100.0 * busy:.0f} % of a core each): more workers "
                "will not help"
                if busy is not None
                else ": more workers help only if they wait (I/O, sleep) rather than compute; "
                "their CPU share was not recorded (ResourceMonitorCallback records it), so "
                "measure it with trainperf try"
            )
        )
    if run.device == "cpu":
        advice.append(
            "on CPU the workers share cores with the compute threads"
            + (f" ({names.cpu_count} cores here)" if names.cpu_count else "")
            + ", so balance workers against torch.set_num_threads"
        )
    else:
        pin = names.key("pin_memory", stage=s.stage)
        pinned = (pin is not None and pin.value is True) or (s.loader and s.loader.pin_memory)
        if not pinned:
            advice.append(f"use pinned memory ({names.name(pin, 'pin_memory')})")
    evidence = {
        "stage_wall_s": rounded(s.wall_s, 3),
        "worker_bottleneck": part,
        "num_workers": s.num_workers,
        "worker_cpu_pct_of_core": rounded(100.0 * busy) if busy is not None else None,
        "samples": s.samples,
        **evidence,
    }
    return phase_finding(
        s,
        "data_wait",
        FindingId.INPUT_BOUND,
        total_s,
        title,
        "; ".join(advice) + ".",
        "input",
        severity=input_bound_severity(pct),
        evidence=evidence,
        candidates=candidates_for(FindingId.INPUT_BOUND, names.facts(s), part=part),
    )


def slow_metric(
    s: StageSummary, run: RunData, names: AdviceNames, total_s: float
) -> Finding | None:
    if (pct := phase_share(s, "metric", "metric")) is None:
        return None
    secs = s.phases_s.get("metric", 0.0)
    per_epoch = secs / max(s.epochs, 1)
    advice = [
        "the metric runs in the main loop and blocks it: vectorise its matching or accumulate "
        "counts per batch and compute once per epoch"
    ]
    if s.stage == "val":
        trainer = ("trainer",)
        every = names.name(
            names.key("check_val_every_n_epoch", prefer=trainer),
            "the Trainer's check_val_every_n_epoch",
        )
        fewer = names.name(
            names.key("limit_val_batches", prefer=trainer), "the Trainer's limit_val_batches"
        )
        advice.append(f"validate less often ({every}) or on fewer batches ({fewer})")
    if run.device == "cpu":
        advice.append(
            "on CPU keep it out of the DataLoader workers' cores (it runs in the main process)"
        )
    title = (
        f"slow metric: {pct:.0f} % of {s.label} wall time is metric computation "
        f"({per_epoch:.2f} s per epoch)"
    )
    evidence = {
        "metric_s_per_epoch": rounded(per_epoch, 3),
        "metric_ms_per_batch": rounded(1000.0 * secs / max(s.num_batches, 1), 2),
        "stage_wall_s": rounded(s.wall_s, 3),
    }
    advised = "; ".join(advice) + "."
    return phase_finding(
        s, "metric", FindingId.SLOW_METRIC, total_s, title, advised, "metric", evidence=evidence
    )


def slow_postprocess(
    s: StageSummary, run: RunData, names: AdviceNames, total_s: float
) -> Finding | None:
    if (pct := phase_share(s, "postprocess", "postprocess")) is None:
        return None
    ms_per_sample = 1000.0 * s.phases_s.get("postprocess", 0.0) / max(s.samples, 1)
    post = ("postprocess",)
    cands = names.name(
        names.key("max_candidates", prefer=post), "the postprocessor's candidate cap"
    )
    box = names.name(names.key("box_thresh", prefer=post), "its box score threshold")
    return phase_finding(
        s,
        "postprocess",
        FindingId.SLOW_POSTPROCESS,
        total_s,
        f"slow postprocessing: {pct:.0f} % of {s.label} wall time turns maps into boxes "
        f"({ms_per_sample:.1f} ms/sample)",
        f"fewer contours per image: lower {cands} or raise {box}; "
        "an untrained model yields many candidates, so early epochs are slowest.",
        "postprocess",
        evidence={"postprocess_ms_per_sample": rounded(ms_per_sample, 2)},
        candidates=candidates_for(FindingId.SLOW_POSTPROCESS, names.facts(s)),
    )


def overheads(s: StageSummary, names: AdviceNames, total_s: float) -> list[Finding]:
    """Callbacks, the LightningModule's own hooks, checkpoints and unattributed time."""
    out: list[Finding] = []
    if (pct := phase_share(s, "callbacks", "callbacks")) is not None:
        top = _top_named(s.callback_hooks_s)
        if top is not None:
            name, name_s = top
            title = (
                f"{pct:.0f} % of {s.label} wall time is spent in callbacks, "
                f"{100 * name_s / s.wall_s:.0f} % in {name}"
            )
            advice = (
                f"{name} takes {name_s:.3f} s: make it cheaper, run it less often or only on "
                "rank zero, or remove it."
            )
        else:  # a run recorded before callbacks were named
            every = names.name(
                names.key("log_every_n_steps", prefer=("trainer",)),
                "the Trainer's log_every_n_steps",
            )
            title = f"{pct:.0f} % of {s.label} wall time is spent in callbacks and logging"
            advice = f"log less often ({every}) and look for a slow callback in a profiler trace."
        out.append(
            phase_finding(
                s,
                "callbacks",
                FindingId.CALLBACK_OVERHEAD,
                total_s,
                title,
                advice,
                "callbacks",
                top,
            )
        )
    if (pct := phase_share(s, "module_hooks", "callbacks")) is not None:
        top = _top_named(s.module_hooks_s)
        name = top[0] if top else "the model module's hooks"
        title = (
            f"{pct:.0f} % of {s.label} wall time is spent in the model module's own hooks, "
            f"most in {name}"
        )
        advice = (
            f"{name} is your module's code: time its parts (wrap metric work in "
            "trainperf.perf_phase('metric') to see it as its own phase), compute it less often, "
            "or vectorise it."
        )
        out.append(
            phase_finding(
                s,
                "module_hooks",
                FindingId.MODULE_HOOK_OVERHEAD,
                total_s,
                title,
                advice,
                "callbacks",
                top,
            )
        )
    if (pct := phase_share(s, "checkpoint", "callbacks")) is not None:
        title = f"{pct:.0f} % of {s.label} wall time is spent saving checkpoints"
        advice = (
            "save less often (ModelCheckpoint every_n_epochs / every_n_train_steps, save_top_k) "
            "or to a faster disk."
        )
        out.append(
            phase_finding(
                s, "checkpoint", FindingId.CHECKPOINT_OVERHEAD, total_s, title, advice, "callbacks"
            )
        )
    if (pct := phase_share(s, "unattributed", "unattributed")) is not None:
        key = names.key("persistent_workers", stage=s.stage)
        live = s.loader.persistent_workers if s.loader is not None else None
        persistent = key.value if key is not None else live
        advice = "worker start-up and epoch-start hooks land here"
        config_off = key is not None and key.value is False
        if persistent is not True and (config_off or s.num_workers):
            setting = names.name(key, "the DataLoader's persistent_workers")
            advice += f"; keep workers alive between epochs ({setting} -> true)"
        title = f"{pct:.0f} % of {s.label} wall time is not attributed to any phase"
        advice += "; a profiler window on an early epoch shows what it is."
        candidates = candidates_for(FindingId.UNATTRIBUTED, names.facts(s))
        out.append(
            phase_finding(
                s,
                "unattributed",
                FindingId.UNATTRIBUTED,
                total_s,
                title,
                advice,
                "unattributed",
                candidates=candidates,
            )
        )
    return out


def _top_named(seconds: dict[str, float]) -> tuple[str, float] | None:
    """The callback or hook with the most time, or None when nothing was named."""
    name = max(sorted(seconds), key=lambda k: seconds[k], default=None)
    return (name, seconds[name]) if name is not None and seconds[name] > 0 else None


_STRAGGLER_ADVICE = {
    "data_wait": "its data is slower (a larger shard, a slower disk, fewer workers).",
    "forward": "its steps compute more (uneven batch shapes) or its device or host is slower.",
    "backward": "its backward computes more or its device or host is slower.",
    "optimizer": "its optimizer step is slower (host contention).",
    "callbacks": "a callback does more work on that rank: make it rank-zero-only or cheaper.",
    "module_hooks": "a hook of the model module does more work on that rank.",
    "checkpoint": "it writes checkpoints while the others wait: save from rank zero only.",
    "transfer": "its host-to-device copies are slower (pin memory, check its PCIe link).",
}


def straggler(s: StageSummary, total_s: float) -> Finding | None:
    """The rank the others wait for, from each epoch's straggler record (the rank that works
    longest beyond the median, and the phase / callback / hook where it does); never from epoch
    time alone: synchronised ranks finish their epochs together."""
    named = [x for _, x in s.stragglers if x]
    if not s.stragglers or not named:
        return None
    pct = 100.0 * len(named) / len(s.stragglers)
    if pct < threshold("straggler_epochs_pct"):
        return None
    rank = Counter(x.rank for x in named).most_common(1)[0][0]
    mine = [x for x in named if x.rank == rank]
    cause = Counter(x.cause for x in mine).most_common(1)[0][0]
    excess = sum(x.excess_s for x in mine)
    cause_s = sum(x.cause_excess_s for x in mine if x.cause == cause)
    wait = sum(x.others_wait_s for x in mine)
    return Finding(
        id=FindingId.STRAGGLER,
        severity="warning",
        score=score(excess, total_s),
        title=(
            f"straggler: rank {rank} holds the other ranks back in {len(mine)} of "
            f"{len(s.stragglers)} {s.label} epochs; cause: {cause}"
        ),
        evidence={
            "rank": rank,
            "cause": cause,
            "excess_s": rounded(excess, 3),
            "cause_excess_s": rounded(cause_s, 3),
            "others_sync_wait_s": rounded(wait, 3),
        },
        threshold={
            "work_excess_pct_of_epoch": 100 * STRAGGLER_MIN_SHARE,
            "work_excess_s": STRAGGLER_MIN_S,
            "epochs_pct": threshold("straggler_epochs_pct"),
        },
        suggestion=(
            f"rank {rank} spends {cause_s:.3f} s more than the median rank in {cause}, while the "
            f"others wait {wait:.3f} s for it in sync_wait: "
            + _STRAGGLER_ADVICE.get(cause.split(":")[0], "look at what differs on that rank.")
        ),
        stage=s.stage,
    )


input_bound_rule = per_stage_rule(FindingId.INPUT_BOUND, input_bound, FindingId.INPUT_BOUND)
slow_metric_rule = per_stage_rule(FindingId.SLOW_METRIC, slow_metric, FindingId.SLOW_METRIC)
slow_postprocess_rule = per_stage_rule(
    FindingId.SLOW_POSTPROCESS, slow_postprocess, FindingId.SLOW_POSTPROCESS
)


@function_rule(
    "phase_overheads",
    emits={
        FindingId.CALLBACK_OVERHEAD,
        FindingId.MODULE_HOOK_OVERHEAD,
        FindingId.CHECKPOINT_OVERHEAD,
        FindingId.UNATTRIBUTED,
    },
)
def phase_overheads_rule(ctx: VerdictContext) -> list[Finding]:
    """Callbacks, the module's own hooks, checkpoints and unattributed time, per stage."""
    return [f for s in ctx.stages.values() for f in overheads(s, ctx.names, ctx.total_s)]


@function_rule(FindingId.STRAGGLER, emits={FindingId.STRAGGLER})
def straggler_rule(ctx: VerdictContext) -> list[Finding]:
    """The DDP rank the others wait for, per stage."""
    return [f for s in ctx.stages.values() if (f := straggler(s, ctx.total_s)) is not None]


@function_rule(FindingId.NOT_RECORDED, emits={FindingId.NOT_RECORDED})
def not_recorded_rule(ctx: VerdictContext) -> Finding | None:
    """An info line when the run recorded no step-time attribution at all."""
    if ctx.stages:
        return None
    return Finding(
        id=FindingId.NOT_RECORDED,
        severity="info",
        score=0.0,
        title="no step-time attribution was recorded for this run",
        evidence={},
        threshold={},
        suggestion=f"{hint(ctx.run, 'record')} so each epoch's time is attributed to phases.",
        source="step-time",
    )
