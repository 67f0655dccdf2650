"""A set of rank traces analysed each on its own, then summarised side by side.

A set of rank traces (``trainperf analyze DIR`` with one file per rank, or several windows per
rank): each rank's files analysed on their own, in parallel, then summarised side by side with the
straggler named by the live clock's rule (:func:`trainperf.core.ranks.find_straggler`).

A file's rank comes from its ``distributedInfo.rank`` (torch writes it near the top of the file,
so only the head is read to group the files), else from a ``rank<N>`` in its name; in a set where
some files have a rank, a file without one is an error naming it. Files of one rank are analysed
together (one table per rank, never mixed with another rank's), so memory holds at most ``jobs``
ranks at a time.

The trace's phases cannot see a wait for another rank (the live clock's ``sync_wait``); here the
exposed communication of each rank (:mod:`~trainperf.analysis.trace.comms`) is moved out of the
phase it fell in into ``sync_wait``, so the rank that *works* longer is told from the ranks that
wait.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import msgspec

from trainperf.analysis.trace.analyze import timed_analysis
from trainperf.analysis.trace.clock_windows import run_dir
from trainperf.analysis.trace.decode import _RANK_IN_NAME
from trainperf.analysis.trace.ingest import find_trace_files
from trainperf.analysis.trace.integrity import Integrity, IntegrityProblem, clock_skew
from trainperf.analysis.trace.table import TraceError
from trainperf.analysis.trace.trace_analysis import TraceAnalysis, _Part
from trainperf.analysis.trace.trace_metrics import COMM_ONE_RANK_HINT
from trainperf.analysis.trace.window_sums import HookTimes
from trainperf.core.finding_ids import TraceFindingId
from trainperf.core.findings import Finding
from trainperf.core.ranks import STRAGGLER_MIN_S, STRAGGLER_MIN_SHARE, find_straggler
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records
from trainperf.records.schema import RunDirError

#: Bytes of a file's (decompressed) head searched for ``distributedInfo``.
HEAD_BYTES = 1 << 20
_TAIL_BYTES = 1 << 16
#: A gzip file without ``distributedInfo`` in its head is read through for its tail only up to
#: this size (compressed); a larger one takes its rank from its name.
GZIP_TAIL_SCAN_BYTES = 32 << 20
_DIST_INFO = re.compile(rb'"distributedInfo"\s*:\s*(?=\{)')


def default_jobs() -> int:
    """The cores this process may use (``os.sched_getaffinity``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as probe:
        return probe.read(2) == b"\x1f\x8b"


def _dist_rank(text: bytes) -> int | None:
    """``distributedInfo.rank`` of the JSON text ``text`` (a head or tail of a trace file)."""
    m = _DIST_INFO.search(text)
    if m is None:
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(text[m.end() :].decode("utf-8", "replace"))
    except ValueError:  # cut off by the head's end: the object is larger than the head
        return None
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _rank_in_text(path: Path) -> int | None:
    """``distributedInfo.rank`` from the file's head (where torch writes it), else its tail (a
    writer that puts the metadata after ``traceEvents``): a seek for a plain file; a gzip file is
    read through (in bounded chunks) only up to :data:`GZIP_TAIL_SCAN_BYTES` compressed."""
    try:
        gz = _is_gzip(path)
        with gzip.open(path, "rb") if gz else path.open("rb") as f:
            head = f.read(HEAD_BYTES)
            rank = _dist_rank(head)
            if rank is not None:
                return rank
            if b'"traceEvents"' not in head or b'"distributedInfo"' in head:
                return None
            if not gz:
                f.seek(max(len(head), path.stat().st_size - _TAIL_BYTES))
                tail = f.read()
            elif path.stat().st_size <= GZIP_TAIL_SCAN_BYTES:
                tail = head[-_TAIL_BYTES:]
                while chunk := f.read(HEAD_BYTES):
                    tail = (tail + chunk)[-_TAIL_BYTES:]
            else:
                return None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"cannot read: {exc}") from exc
    return _dist_rank(tail)


def rank_of(path: Path) -> tuple[int | None, str | None]:
    """A trace file's rank and where it came from (``"distributedInfo"``, ``"filename"``)."""
    rank = _rank_in_text(path)
    if rank is not None:
        return rank, "distributedInfo"
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1)), "filename"
    return None, None


def group_by_rank(files: Sequence[Path]) -> dict[int, list[Path]] | None:
    """``rank -> files`` (in order) when the files come from more than one rank; ``None`` when
    they are not a rank set (no file has a rank, or all have the same). A file without a rank
    among files with one is a :class:`TraceError` naming it."""
    ranks = {f: rank_of(f)[0] for f in files}
    known = {r for r in ranks.values() if r is not None}
    if len(known) < 2:
        return None
    missing = [f for f, r in ranks.items() if r is None]
    if missing:
        raise TraceError(
            missing[0],
            f"no rank (no distributedInfo.rank, no rank<N> in the name) among traces of ranks "
            f"{sorted(known)}: move it out of the folder or rename it with its rank",
        )
    out: dict[int, list[Path]] = {}
    for f, r in ranks.items():
        out.setdefault(int(r), []).append(f)  # type: ignore[arg-type]
    return dict(sorted(out.items()))


class RankSummary(_Part):
    """One rank's steps of one stage, per step (ms).

    Args:
        rank, stage, files: which steps.
        steps: profiled steps.
        step_ms, median_step_ms: mean and median step wall time.
        phases_ms: mean ms per phase; ``sync_wait`` is the exposed communication, taken out of
            the phase it fell in.
        gpu_busy_pct, gpu_idle_ms: device busy share and idle per step (GPU traces).
        comm_ms, comm_exposed_ms: time in collectives, and exposed, per step.
        comm_overlap_pct: overlapped share of the collectives (%).
        comm_method: ``"device"`` or ``"host"``.
    """

    rank: int
    stage: str
    files: list[str]
    steps: int
    step_ms: float
    median_step_ms: float
    phases_ms: dict[str, float]
    gpu_busy_pct: float | None = None
    gpu_idle_ms: float | None = None
    comm_ms: float | None = None
    comm_exposed_ms: float | None = None
    comm_overlap_pct: float | None = None
    comm_method: str | None = None


class StragglerView(_Part):
    """The straggler of one stage (``rank`` None: no straggler), per step (ms).

    Args:
        stage: the stage.
        rank: the rank the others wait for, or None.
        cause: the phase where it works the most beyond the others.
        excess_ms: its work (wall minus ``sync_wait``) beyond the median of the others.
        share_pct: ``excess_ms`` over the median step (%).
        cause_excess_ms: its excess in ``cause``.
        others_wait_ms: the median ``sync_wait`` of the other ranks.
        steps: steps compared (the fewest any rank has).
    """

    stage: str
    rank: int | None
    steps: int
    cause: str | None = None
    excess_ms: float | None = None
    share_pct: float | None = None
    cause_excess_ms: float | None = None
    others_wait_ms: float | None = None


class RankSetAnalysis(_Part):
    """``trainperf analyze DIR`` over a set of rank traces.

    Args:
        input: the directory.
        ranks: one row per (stage, rank), side by side.
        stragglers: per stage shared by every rank.
        findings: the straggler, and each rank's findings (titles prefixed ``rank R:``).
        integrity: every rank's problems and the clock skew between ranks.
        analyses: each rank's full analysis (``str(rank)`` -> :class:`TraceAnalysis`).
        jobs: processes used.
        total_s: seconds it took.
        version: the dict form's version (1).
    """

    input: str
    ranks: list[RankSummary]
    stragglers: list[StragglerView]
    findings: list[Finding]
    integrity: Integrity
    analyses: dict[str, TraceAnalysis]
    jobs: int
    total_s: float
    version: int = 1

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready form (``--json``): the attributes, ``integrity`` among them;
        ``version`` always present."""
        return {"version": self.version, **msgspec.to_builtins(self)}


def _analyze_rank(
    files: list[Path], top_k: int | None
) -> tuple[TraceAnalysis, HookTimes] | tuple[str, str]:
    """One rank's files in one table (runs in a worker process); bad input comes back as
    ``(path, reason)`` (a :class:`TraceError` does not survive pickling: its constructor takes
    two arguments) and is raised again by the caller."""
    try:
        return _analyze_files(files, top_k)
    except TraceError as exc:
        return exc.path, exc.reason


def _analyze_files(files: list[Path], top_k: int | None) -> tuple[TraceAnalysis, HookTimes]:
    label = str(files[0]) if len(files) == 1 else str(files[0].parent)
    return timed_analysis(files, label, top_k)


def analyze_ranks(
    groups: dict[int, list[Path]], jobs: int, top_k: int | None
) -> dict[int, tuple[TraceAnalysis, HookTimes]]:
    """Each rank's analysis (and its time per callback and hook), ``jobs`` ranks at a time."""
    if jobs <= 1:
        return {r: _analyze_files(files, top_k) for r, files in groups.items()}
    # spawn, not fork: the caller may hold threads (a progress bar, a logger); each worker holds
    # one rank's table at a time
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {r: pool.submit(_analyze_rank, files, top_k) for r, files in groups.items()}
        out = {}
        for r, future in futures.items():
            result = future.result()
            if isinstance(result[0], str):
                raise TraceError(result[0], str(result[1]))
            out[r] = result
        return out


def analyze_rank_set(
    path: str | Path, jobs: int | None = None, top_k: int | None = 20
) -> RankSetAnalysis | None:
    """The rank set at ``path`` (a directory), or None when its traces are not one (see
    :func:`group_by_rank`)."""
    t0 = time.perf_counter()
    p = Path(path)
    if not p.is_dir():
        return None
    groups = group_by_rank(find_trace_files(p))
    if groups is None:
        return None
    used = min(jobs or default_jobs(), len(groups))
    results = analyze_ranks(groups, used, top_k)
    return summarise_ranks(
        str(p),
        groups,
        {r: a for r, (a, _) in results.items()},
        {r: named for r, (_, named) in results.items()},
        used,
        time.perf_counter() - t0,
    )


def summarise_ranks(
    where: str,
    groups: dict[int, list[Path]],
    analyses: dict[int, TraceAnalysis],
    named: dict[int, HookTimes],
    jobs: int,
    total_s: float,
) -> RankSetAnalysis:
    """The side-by-side view, stragglers, findings and integrity of per-rank analyses (and
    their time per callback and hook, to name a callbacks / hooks cause)."""
    rows: list[RankSummary] = []
    stragglers: list[StragglerView] = []
    stages = sorted(
        {s for a in analyses.values() for s in a.phase_summary}, key=lambda s: (s != "train", s)
    )
    for stage in stages:
        mine = {r: _rank_row(r, stage, groups[r], a) for r, a in analyses.items()}
        present = {r: row for r, row in mine.items() if row is not None}
        rows.extend(present.values())
        if len(present) == len(analyses) and len(present) >= 2:
            by_rank = {r: named.get(r, {}).get(stage, {}) for r in present}
            stragglers.append(_straggler(stage, present, by_rank))
    findings = [f for s in stragglers if (f := _straggler_finding(s)) is not None]
    for r, a in analyses.items():
        for f in a.findings:
            findings.append(_for_rank(f, r, stragglers))
    findings.sort(key=lambda f: (f.id != TraceFindingId.STRAGGLER, -f.score))
    add_live_sync_wait(findings, live_sync_wait([f for files in groups.values() for f in files]))
    problems: list[IntegrityProblem] = [p for a in analyses.values() for p in a.integrity.problems]
    walls = [r.median_step_ms for r in rows if r.stage == "train"]
    skew = clock_skew(_step_ends(analyses), statistics.median(walls) * 1e6 if walls else 0.0)
    if skew is not None:
        problems.append(skew)
    return RankSetAnalysis(
        input=where,
        ranks=rows,
        stragglers=stragglers,
        findings=findings,
        integrity=Integrity.of(problems),
        analyses={str(r): a for r, a in analyses.items()},
        jobs=jobs,
        total_s=round(total_s, 3),
    )


def live_sync_wait(trace_paths: Sequence[str | Path]) -> dict[str, float] | None:
    """The live clock's ``sync_wait`` of the run that holds the traces (the nearest directory
    above them with ``perf/epochs.jsonl``), over its train epochs, in ms per batch: this
    (the recording) rank's and the ranks' min / median / max. None without such a run or
    without DDP epochs; an unreadable record is no error (the trace stands on its own)."""
    files = [Path(p).resolve() for p in trace_paths]
    run = run_dir(files, EpochRecord) if files else None
    if run is None:
        return None
    try:
        records = read_records(EpochRecord.path(run), EpochRecord)
    except (RunDirError, OSError, ValueError):
        return None
    mine = [r for r in records if r.stage.trace_name == "train" and r.num_batches]
    if not mine:
        return None
    batches = sum(r.num_batches for r in mine)
    out = {
        "ms_per_batch": round(
            1e3 * sum(r.phases_s.get("sync_wait", 0.0) for r in mine) / batches, 3
        )
    }
    spread = [r.spreads.get("sync_wait_time") for r in mine]
    if all(s is not None for s in spread):
        for key in ("min", "median", "max"):
            values = [s.get(key) for s in spread if s is not None]
            if all(isinstance(v, float | int) for v in values):
                out[f"ranks_{key}_ms"] = round(1e3 * sum(values) / batches, 3)  # type: ignore[arg-type]
    return out


def add_live_sync_wait(findings: Sequence[Finding], live: dict[str, float] | None) -> None:
    """Put the live clock's ``sync_wait`` beside each communication finding's figures."""
    if live is None:
        return
    for f in findings:
        if f.id in (TraceFindingId.COMMUNICATION_BOUND, TraceFindingId.STRAGGLER):
            f.evidence["live_sync_wait"] = live


def _rank_row(rank: int, stage: str, files: list[Path], a: TraceAnalysis) -> RankSummary | None:
    ps = a.phase_summary.get(stage)
    if ps is None or not ps.steps:
        return None
    walls = [s.wall_ms for s in a.steps if s.stage == stage]
    phases = {p: share.mean_ms for p, share in ps.phases.items()}
    comm = next((c for c in a.communication if c.stage == stage), None)
    row = RankSummary(
        rank=rank,
        stage=stage,
        files=[f.name for f in files],
        steps=ps.steps,
        step_ms=ps.mean_wall_ms,
        median_step_ms=round(statistics.median(walls), 3) if walls else ps.mean_wall_ms,
        phases_ms=phases,
    )
    if comm is not None:
        for p, v in comm.exposed_phases_ms.items():
            phases[p] = round(max(phases.get(p, 0.0) - v, 0.0), 3)
        phases["sync_wait"] = comm.exposed_ms_per_step
        row.comm_ms = comm.ms_per_step
        row.comm_exposed_ms = comm.exposed_ms_per_step
        row.comm_overlap_pct = comm.overlap_pct
        row.comm_method = comm.method
    else:
        phases["sync_wait"] = 0.0
    if ps.gpu is not None:
        idle = ps.gpu["idle"]
        row.gpu_idle_ms = idle.mean_ms
        row.gpu_busy_pct = round(100.0 - (idle.pct or 0.0), 2)
    return row


def _straggler(
    stage: str, rows: dict[int, RankSummary], named: dict[int, dict[str, dict[str, float]]]
) -> StragglerView:
    """:func:`~trainperf.core.ranks.find_straggler` over the ranks' steps: per-step means times
    the fewest steps any rank has (the rule's thresholds are in seconds of the compared window)."""
    ranks = sorted(rows)
    n = min(rows[r].steps for r in ranks)
    # find_straggler indexes by position: ranks here are their positions in ``ranks``
    wall_s = [rows[r].step_ms * n / 1e3 for r in ranks]
    phases_s = [{p: v * n / 1e3 for p, v in rows[r].phases_ms.items()} for r in ranks]
    named_s = [
        {g: {k: v * n / 1e3 for k, v in per.items()} for g, per in named.get(r, {}).items()}
        for r in ranks
    ]
    found = find_straggler(wall_s, phases_s, named_s)
    if found is None:
        return StragglerView(stage=stage, rank=None, steps=n)
    return StragglerView(
        stage=stage,
        rank=ranks[found.rank],
        steps=n,
        cause=found.cause,
        excess_ms=round(found.excess_s * 1e3 / n, 3),
        share_pct=round(100.0 * found.share, 2),
        cause_excess_ms=round(found.cause_excess_s * 1e3 / n, 3),
        others_wait_ms=round(found.others_wait_s * 1e3 / n, 3),
    )


def _straggler_finding(s: StragglerView) -> Finding | None:
    if s.rank is None:
        return None
    return Finding(
        id=TraceFindingId.STRAGGLER,
        severity="warning",
        score=s.share_pct or 0.0,
        source="trace",
        stage=s.stage,
        title=(
            f"straggler: rank {s.rank} holds the other ranks back in {s.stage}; cause: "
            f"{s.cause} (+{s.cause_excess_ms:.3g} ms/step)"
        ),
        evidence={
            "rank": s.rank,
            "cause": s.cause,
            "excess_ms_per_step": s.excess_ms,
            "cause_excess_ms_per_step": s.cause_excess_ms,
            "others_sync_wait_ms_per_step": s.others_wait_ms,
            "steps": s.steps,
        },
        threshold={
            "work_excess_pct_of_step": 100 * STRAGGLER_MIN_SHARE,
            "work_excess_s": STRAGGLER_MIN_S,
        },
        suggestion=(
            f"rank {s.rank} spends {s.cause_excess_ms:.3g} ms per step more than the median rank "
            f"in {s.cause}, while the others wait {s.others_wait_ms:.3g} ms per step for it in "
            "communication: look at what differs on that rank (its data shard and batch sizes, "
            "work only it does: logging, checkpointing, evaluation) before tuning communication."
        ),
    )


def _for_rank(f: Finding, rank: int, stragglers: list[StragglerView]) -> Finding:
    """A rank's finding in the set's list: its title names the rank; a wait in communication
    on a rank that is not the straggler names the rank it waits for."""
    suggestion = f.suggestion.replace(COMM_ONE_RANK_HINT, "")
    waits_for = next((s for s in stragglers if s.rank is not None and s.rank != rank), None)
    if f.id == TraceFindingId.COMMUNICATION_BOUND and waits_for is not None:
        suggestion = (
            f"rank {rank} mostly waits for rank {waits_for.rank} ({waits_for.cause}): fix the "
            "straggler first. " + suggestion
        )
    return dataclasses.replace(
        f,
        title=f"rank {rank}: {f.title}",
        suggestion=suggestion,
        evidence={**f.evidence, "rank": rank},
    )


def _step_ends(analyses: dict[int, TraceAnalysis]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for r, a in analyses.items():
        origin = a.summary.origin_ns
        # only collectives make ranks end their steps together
        synced = any(c.stage == "train" and c.calls for c in a.communication)
        if origin is None or not synced:
            continue
        out[r] = {
            s.step: origin + round(s.start_ms * 1e6) + s.wall_ns
            for s in a.steps
            if s.stage == "train"
        }
    return out
