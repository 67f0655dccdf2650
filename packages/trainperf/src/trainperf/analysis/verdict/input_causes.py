"""Which part of an input-bound stage's data wait is the ceiling: workers or hand-over.

Either the DataLoader workers (the batch was not ready), or handing the batch over (the worker's
send, the main process's receive and ``pin_memory``: bytes and tensors); the split comes from
``data_wait_causes_s`` in ``perf/epochs.jsonl``.

When the hand-over is most of the wait and the workers sit idle (their CPU share far below one
core each, or their own timed work far below their wall time), more workers cannot help: the
ceiling is one thread of the main process moving bytes, and the candidates are fewer bytes
(compact batches) and fewer tensors per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.analysis.run import RunData
from trainperf.analysis.stages import StageSummary
from trainperf.analysis.verdict.context import AdviceNames, rounded
from trainperf.core.candidates import Candidate

#: The hand-over is the ceiling when it is at least this share of the measured wait.
RECEIVE_SHARE = 0.5
#: Workers "sit idle" below this share of their time (CPU share of a core, or timed work / wall).
WORKERS_IDLE_BELOW = 0.5

_CAUSE_WORDS = {
    "worker": "waiting for a worker to finish its batch",
    "receive": "the main process receiving / pinning the batch after a worker had finished it",
    "main_loading": "loading in the main process (num_workers=0)",
}


@dataclass(frozen=True)
class WaitCauses:
    """One stage's data wait by cause, summed over its epochs (seconds), with the batch size
    in bytes and tensors and how busy its workers were (a fraction of their time; None when
    neither their CPU share nor their timed work is known)."""

    worker_s: float
    receive_s: float
    main_loading_s: float
    batches: int
    batch_bytes: float | None
    batch_tensors: int | None
    workers_busy: float | None

    @property
    def total_s(self) -> float:
        return self.worker_s + self.receive_s + self.main_loading_s

    @property
    def cause(self) -> str | None:
        """The larger measured cause (``worker``, ``receive``, ``main_loading``), or None."""
        parts = {"worker": self.worker_s, "receive": self.receive_s}
        parts["main_loading"] = self.main_loading_s
        name = max(parts, key=lambda k: parts[k])
        return name if parts[name] > 0 else None

    @property
    def receive_bound(self) -> bool:
        """The hand-over is the ceiling and the workers sit idle (module doc)."""
        idle = self.workers_busy is not None and self.workers_busy < WORKERS_IDLE_BELOW
        measured = self.worker_s + self.receive_s
        return idle and measured > 0 and self.receive_s >= RECEIVE_SHARE * measured

    def words(self) -> str:
        """``"; 80 % of it waiting for a worker to finish its batch"`` (empty when unknown)."""
        cause = self.cause
        if cause is None or self.total_s <= 0:
            return ""
        pct = 100.0 * getattr(self, f"{cause}_s") / self.total_s
        return f"; {pct:.0f} % of it {_CAUSE_WORDS[cause]}"

    def evidence(self) -> dict[str, Any]:
        per_batch = max(self.batches, 1)
        return {
            "data_wait_worker_ms_per_batch": rounded(1000.0 * self.worker_s / per_batch, 2),
            "data_wait_receive_ms_per_batch": rounded(1000.0 * self.receive_s / per_batch, 2),
            "data_wait_main_loading_ms_per_batch": rounded(
                1000.0 * self.main_loading_s / per_batch, 2
            ),
            "batch_mb": rounded(self.batch_bytes / 1e6, 1) if self.batch_bytes else None,
            "batch_tensors": self.batch_tensors,
            "workers_busy_pct": rounded(100.0 * self.workers_busy)
            if self.workers_busy is not None
            else None,
        }


def wait_causes(run: RunData, s: StageSummary, names: AdviceNames) -> WaitCauses | None:
    """The stage's :class:`WaitCauses`; None when its epochs recorded none (older folders, a
    loader that could not be instrumented)."""
    epochs = [e for e in run.epochs if e.stage == s.stage and e.data_wait_causes_s]
    if not epochs:
        return None
    sums = {"worker": 0.0, "receive": 0.0, "main_loading": 0.0}
    byte_sum = 0.0
    byte_batches = 0
    tensors: int | None = None
    for e in epochs:
        for name in sums:
            sums[name] += float(e.data_wait_causes_s.get(name) or 0.0)
        if e.batch_bytes is not None:
            byte_sum += e.batch_bytes * e.num_batches
            byte_batches += e.num_batches
        tensors = e.batch_tensors if e.batch_tensors is not None else tensors
    return WaitCauses(
        worker_s=sums["worker"],
        receive_s=sums["receive"],
        main_loading_s=sums["main_loading"],
        batches=sum(e.num_batches for e in epochs),
        batch_bytes=byte_sum / byte_batches if byte_batches else None,
        batch_tensors=tensors,
        workers_busy=_workers_busy(s, names),
    )


def _workers_busy(s: StageSummary, names: AdviceNames) -> float | None:
    """A worker's busy share: its CPU share of a core from the resource samples, else its own
    timed work (fetch + collate) over the stage's wall time, per worker."""
    busy = names.workers_busy(s)
    if busy is not None:
        return busy
    if not s.num_workers or s.wall_s <= 0:
        return None
    work = s.worker_s.get("fetch", 0.0) + s.worker_s.get("collate", 0.0)
    return work / (s.wall_s * s.num_workers) if work > 0 else None


def receive_bound_parts(
    s: StageSummary, causes: WaitCauses, pct: float, names: AdviceNames
) -> tuple[str, str, dict[str, Any], list[Candidate]]:
    """Title, suggestion, evidence and candidates of an input-bound finding whose ceiling is the
    main process's receive / pin (``causes.receive_bound``)."""
    per_batch = max(causes.batches, 1)
    receive_ms = 1000.0 * causes.receive_s / per_batch
    wait_ms = 1000.0 * (causes.worker_s + causes.receive_s) / per_batch
    busy = causes.workers_busy or 0.0
    title = (
        f"input-bound: {pct:.0f} % of {s.label} wall time is data wait; the main process's "
        f"receive / pin of each batch is the ceiling ({receive_ms:.0f} of {wait_ms:.0f} ms wait "
        f"per batch came after a worker had finished it; the workers were busy "
        f"{100.0 * busy:.0f} % of their time)"
    )
    advice: list[str] = []
    candidates: list[Candidate] = []
    size = ""
    if causes.batch_bytes:
        size = f" (now {causes.batch_bytes / 1e6:.0f} MB"
        size += f" in {causes.batch_tensors} tensors)" if causes.batch_tensors else ")"
    compact = names.key("compact_batches")
    if compact is not None and compact.value is False:
        advice.append(f"send compact batches: `{compact.path}=true` (now false){size}")
        candidates.append(
            Candidate(
                family="other",
                description="compact batches: uint8 images, the target maps packed in one tensor",
                override=f"{compact.path}=true",
            )
        )
    else:
        advice.append(
            "send fewer bytes per batch" + size + ": uint8 images normalised on the device, "
            "0/1 maps as uint8 or bits"
        )
    advice.append(
        "send fewer tensors per batch (each tensor a worker returns is its own shared-memory "
        "segment to receive and pin): pack them into one"
    )
    advice.append("more workers will not help: they sit idle while the main process receives")
    return title, "; ".join(advice) + ".", causes.evidence(), candidates
