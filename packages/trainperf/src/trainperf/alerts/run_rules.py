"""The alert rules on the run itself.

A throughput drop, a NaN loss, a straggler rank, a hang and memory creep; their catalogue is
:mod:`trainperf.alerts.catalogue`."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping
from dataclasses import asdict
from typing import ClassVar

from trainperf.alerts.engine import Check, Rule, RuleContext, Setting
from trainperf.alerts.resource_rules import duration
from trainperf.core.cpu_shares import cpu_shares
from trainperf.core.finding_ids import AlertName, FindingId

__all__ = ["Hang", "MemoryCreep", "NanLoss", "StragglerRank", "ThroughputDrop"]


class ThroughputDrop(Rule):
    """Training steps/s fall ``drop`` (fraction) below the baseline: the median rate over
    ``baseline_s`` seconds of training after ``warmup_s`` seconds of warm-up. Resolves when the
    drop is below ``clear_drop``. When the engine is configured to, a firing requests a
    profiler window (``trainperf.core.triggers.request_profile``)."""

    name = AlertName.THROUGHPUT_DROP.value
    requests_profile = True
    # the report attaches it to that finding when present
    corroborates = FindingId.CPU_CONTENTION.value
    DEFAULTS: ClassVar[dict[str, Setting]] = {
        "hold_s": 60.0,
        "cooldown_s": 1800.0,
        "warmup_s": 60.0,
        "baseline_s": 60.0,
    }
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {
        "drop": ("throughput_drop_pct", 100.0),
        "clear_drop": ("throughput_clear_pct", 100.0),
    }

    def __init__(self, **settings: object) -> None:
        super().__init__(**settings)
        self._train_s = 0.0
        self._last_t: float | None = None
        self._rates: list[float] = []
        self.baseline: float | None = None

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        s = self.settings
        rate = values.get("resources/train_steps_per_s")
        if ctx.phase != "train" or rate is None:
            self._last_t = None  # training time counts only between training samples
            return None
        if self._last_t is not None:
            self._train_s += t - self._last_t
        self._last_t = t
        if self.baseline is None:
            if self._train_s >= s["warmup_s"]:
                self._rates.append(rate)
            if self._train_s >= s["warmup_s"] + s["baseline_s"] and self._rates:
                self.baseline = statistics.median(self._rates)
                self._rates = []
            return None
        if self.baseline <= 0:
            return None
        drop = 1.0 - rate / self.baseline
        shares = cpu_shares(values, os.cpu_count() or 0, _local_ranks())
        contended = shares is not None and shares.contended
        return Check(
            breach=drop > s["drop"],
            clear=drop < s["clear_drop"],
            message=(
                f"Training throughput dropped {drop:.0%}: {rate:.2f} steps/s against a "
                f"baseline of {self.baseline:.2f} steps/s measured after warm-up."
                + (
                    f" Other processes hold {shares.others_pct:.0f} % of the host's CPUs "
                    "(cpu_contention): the drop is likely theirs, not the run's."
                    if contended and shares is not None
                    else ""
                )
            ),
            resolve=f"Training throughput recovered: {rate:.2f} steps/s "
            f"(baseline {self.baseline:.2f}).",
            evidence={
                "steps_per_s": rate,
                "baseline_steps_per_s": self.baseline,
                "drop": drop,
                "data_wait_share": values.get("resources/data_wait_share", math.nan),
                "others_cpu_pct": shares.others_pct if shares is not None else math.nan,
            },
            suggestion=(
                "Compare data_wait_share and GPU utilisation/clocks with the baseline period; "
                "a profiler window (ProfilerCallback in on-demand mode) shows where the step "
                "time went."
            ),
        )


def _local_ranks() -> int:
    """Processes of this run on this host (``LOCAL_WORLD_SIZE``, set by torchrun; 1 without)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


class NanLoss(Rule):
    """The latest training loss is NaN or Inf. Resolves when it is finite again."""

    name = AlertName.NAN_LOSS.value
    severity = "critical"
    risk = True
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 0.0, "cooldown_s": 1800.0}

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        flag = values.get("resources/loss_nonfinite")
        if flag is None:
            return None
        return Check(
            breach=flag >= 1,
            clear=flag < 1,
            message=f"The training loss is NaN or Inf (step {ctx.step}, epoch {ctx.epoch}).",
            resolve=f"The training loss is finite again (step {ctx.step}).",
            evidence={"step": float(ctx.step), "epoch": float(ctx.epoch)},
            threshold={"nonfinite": 1.0},
            suggestion=(
                "Lower the learning rate or add gradient clipping (the Trainer's "
                "gradient_clip_val, e.g. 1.0); with fp16 use bf16 or a loss scaler; "
                "check inputs and targets for NaN (torch.autograd.set_detect_anomaly)."
            ),
        )


class StragglerRank(Rule):
    """One rank works (epoch wall time minus its own ``sync_wait``) at least ``share`` of the
    epoch longer than the median rank, from the epoch-end gather of the phases
    (``trainperf.core.ranks.find_straggler``). Never from epoch times: synchronised ranks end
    their epochs together. Resolves below ``clear_share``."""

    name = AlertName.STRAGGLER_RANK.value
    corroborates = FindingId.STRAGGLER.value
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 0.0, "cooldown_s": 0.0}
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {
        "share": ("straggler_work_pct", 100.0),
        "clear_share": ("straggler_clear_pct", 100.0),
    }

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        info = ctx.straggler
        if info is None:
            return None
        s = self.settings
        share, rank, cause = info.share, info.rank, info.cause
        return Check(
            breach=rank >= 0 and share >= s["share"],
            clear=share < s["clear_share"],
            message=(
                f"Rank {rank} is a straggler in epoch {info.epoch}: "
                f"{info.excess_s:.3f} s more work than the median rank "
                f"({100 * share:.0f} % of the epoch), mostly in {cause}; the other ranks wait "
                f"{info.others_wait_s:.3f} s for it."
            ),
            resolve=f"Ranks are in step again (largest excess {100 * share:.0f} % of the epoch).",
            evidence={k: v if isinstance(v, str) else float(v) for k, v in asdict(info).items()},
            suggestion=(
                f"Look at {cause or 'what differs'} on rank {rank}: its host (CPU contention, "
                "disk, thermal throttling), its data shard, or work done only on that rank."
            ),
        )


class Hang(Rule):
    """No batch has completed for ``factor`` times the median step time (at least ``min_s``
    seconds) while training, validating or testing. Resolves at the next completed batch."""

    name = AlertName.HANG.value
    severity = "critical"
    risk = True
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 0.0, "cooldown_s": 600.0}
    FROM_TABLE: ClassVar[dict[str, tuple[str, float]]] = {
        "factor": ("hang_factor", 1.0),
        "min_s": ("hang_min_s", 1.0),
    }

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        if ctx.phase not in ("train", "val", "test"):
            return None
        age = values.get("resources/last_step_age_s")
        median = values.get("resources/step_time_median_s")
        if age is None or median is None:
            return None
        s = self.settings
        limit = max(s["factor"] * median, s["min_s"])
        evidence: dict[str, float | str] = {
            "seconds_since_last_batch": age,
            "median_step_s": median,
            "phase": ctx.phase,
        }
        if ctx.where is not None:
            evidence["where"] = ctx.where
        where = f" The training thread is at {ctx.where}." if ctx.where is not None else ""
        return Check(
            breach=age > limit,
            clear=age < limit,
            message=(
                f"No batch completed for {duration(age)} during {ctx.phase} (median step "
                f"{median * 1e3:.1f} ms, limit {duration(limit)}).{where}"
            ),
            resolve=f"Batches complete again ({ctx.phase}).",
            evidence=evidence,
            suggestion=(
                "Dump all stacks (py-spy dump --pid PID) to see where it waits: a DataLoader "
                "worker that died or deadlocked (try num_workers=0), a collective that one rank "
                "never entered, or a full disk during checkpointing."
            ),
        )


class MemoryCreep(Rule):
    """An attribute of the LightningModule, the DataModule or a callback grows epoch after epoch
    (``EpochScanCallback``'s scan at each training epoch's end, :mod:`trainperf.probe.growth`):
    named with its growth per epoch and whether it holds autograd graphs, live, epochs before the
    process runs out of memory. Resolves when a later scan finds nothing growing."""

    name = AlertName.MEMORY_CREEP.value
    risk = True
    corroborates = FindingId.MEMORY_CREEP.value
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 0.0, "cooldown_s": 0.0}

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        info = ctx.growth
        if info is None:
            return None
        more = f" (and {len(info.paths) - 1} more)" if len(info.paths) > 1 else ""
        return Check(
            breach=bool(info.paths),
            clear=not info.paths,
            message=f"Memory creep at epoch {info.epoch}: {info.message}{more}",
            resolve=f"Nothing grows any more (epoch {info.epoch} scan).",
            evidence={"epoch": float(info.epoch), "attributes": ", ".join(info.paths)},
            suggestion=info.advice or "see the message.",
        )
