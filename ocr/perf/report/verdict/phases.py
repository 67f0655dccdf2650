"""Rules on where a stage's time goes: a phase that takes a material share of the stage's wall
time (slow metric, slow postprocessing, callbacks, module hooks, checkpoints, unattributed time;
the one finding shape they share with the input-bound rule), and the DDP rank the others wait for
(straggler)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ocr.perf.advice import candidates_for
from ocr.perf.candidates import Candidate
from ocr.perf.findings import THRESHOLDS, Finding, threshold
from ocr.perf.ranks import STRAGGLER_MIN_S, STRAGGLER_MIN_SHARE
from ocr.perf.report.load import RunData
from ocr.perf.report.stages import StageSummary
from ocr.perf.report.verdict.figures import rounded, score
from ocr.perf.report.verdict.settings import Settings


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


def slow_metric(s: StageSummary, run: RunData, adv: Settings, total_s: float) -> Finding | None:
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
        every = adv.name(
            adv.key("check_val_every_n_epoch", prefer=trainer),
            "the Trainer's check_val_every_n_epoch",
        )
        fewer = adv.name(
            adv.key("limit_val_batches", prefer=trainer), "the Trainer's limit_val_batches"
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
        s, "metric", "slow_metric", total_s, title, advised, "metric", evidence=evidence
    )


def slow_postprocess(
    s: StageSummary, run: RunData, adv: Settings, total_s: float
) -> Finding | None:
    if (pct := phase_share(s, "postprocess", "postprocess")) is None:
        return None
    ms_per_sample = 1000.0 * s.phases_s.get("postprocess", 0.0) / max(s.samples, 1)
    post = ("postprocess",)
    cands = adv.name(adv.key("max_candidates", prefer=post), "the postprocessor's candidate cap")
    box = adv.name(adv.key("box_thresh", prefer=post), "its box score threshold")
    return phase_finding(
        s,
        "postprocess",
        "slow_postprocess",
        total_s,
        f"slow postprocessing: {pct:.0f} % of {s.label} wall time turns maps into boxes "
        f"({ms_per_sample:.1f} ms/sample)",
        f"fewer contours per image: lower {cands} or raise {box}; "
        "an untrained model yields many candidates, so early epochs are slowest.",
        "postprocess",
        evidence={"postprocess_ms_per_sample": rounded(ms_per_sample, 2)},
        candidates=candidates_for("slow_postprocess", adv.facts(s)),
    )


def overheads(s: StageSummary, adv: Settings, total_s: float) -> list[Finding]:
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
            every = adv.name(
                adv.key("log_every_n_steps", prefer=("trainer",)), "the Trainer's log_every_n_steps"
            )
            title = f"{pct:.0f} % of {s.label} wall time is spent in callbacks and logging"
            advice = f"log less often ({every}) and look for a slow callback in a profiler trace."
        out.append(
            phase_finding(
                s, "callbacks", "callback_overhead", total_s, title, advice, "callbacks", top
            )
        )
    if (pct := phase_share(s, "module_hooks", "callbacks")) is not None:
        top = _top_named(s.module_hooks_s)
        name = top[0] if top else "the LightningModule's hooks"
        title = (
            f"{pct:.0f} % of {s.label} wall time is spent in the LightningModule's own hooks, "
            f"most in {name}"
        )
        advice = (
            f"{name} is your module's code: time its parts (wrap metric work in "
            "ocr.perf.perf_phase('metric') to see it as its own phase), compute it less often, "
            "or vectorise it."
        )
        out.append(
            phase_finding(
                s, "module_hooks", "module_hook_overhead", total_s, title, advice, "callbacks", top
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
                s, "checkpoint", "checkpoint_overhead", total_s, title, advice, "callbacks"
            )
        )
    if (pct := phase_share(s, "unattributed", "unattributed")) is not None:
        key = adv.key("persistent_workers", stage=s.stage)
        persistent = key.value if key is not None else None
        advice = "worker start-up and epoch-start hooks land here"
        if persistent is False or (persistent is None and s.num_workers):
            setting = adv.name(key, "the DataLoader's persistent_workers")
            advice += f"; keep workers alive between epochs ({setting} -> true)"
        title = f"{pct:.0f} % of {s.label} wall time is not attributed to any phase"
        advice += "; a profiler window on an early epoch shows what it is."
        candidates = candidates_for("unattributed", adv.facts(s))
        out.append(
            phase_finding(
                s,
                "unattributed",
                "unattributed",
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
    if not seconds:
        return None
    name = max(sorted(seconds), key=lambda k: seconds[k])
    return (name, seconds[name]) if seconds[name] > 0 else None


_STRAGGLER_ADVICE = {
    "data_wait": "its data is slower (a larger shard, a slower disk, fewer workers).",
    "forward": "its steps compute more (uneven batch shapes) or its device or host is slower.",
    "backward": "its backward computes more or its device or host is slower.",
    "optimizer": "its optimizer step is slower (host contention).",
    "callbacks": "a callback does more work on that rank: make it rank-zero-only or cheaper.",
    "module_hooks": "a LightningModule hook does more work on that rank.",
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
    by_rank = Counter(x.rank for x in named)
    rank = by_rank.most_common(1)[0][0]
    mine = [x for x in named if x.rank == rank]
    cause = Counter(x.cause for x in mine).most_common(1)[0][0]
    excess = sum(x.excess_s for x in mine)
    cause_s = sum(x.cause_excess_s for x in mine if x.cause == cause)
    wait = sum(x.others_wait_s for x in mine)
    return Finding(
        id="straggler",
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
