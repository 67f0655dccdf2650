"""``build_report``: a loaded run in, one :class:`Report` out.

``build_report``: a loaded run (:func:`trainperf.analysis.run.load_run`) in, one :class:`Report`
out. Pure: the run folder was read when the run was loaded; building and writing the report read
no file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainperf.analysis.gpu_wait import StageWait
from trainperf.analysis.run import RunData, load_run
from trainperf.analysis.stages import StageSummary
from trainperf.analysis.verdict import VerdictContext, context_of, stages_of, verdict_of
from trainperf.core.findings import Finding
from trainperf.core.rules import Rule
from trainperf.core.stage import Stage
from trainperf.present.report.run_name import RunName, run_name


@dataclass
class Report:
    """Everything the page, the Markdown and the terminal summary show.

    ``run`` is the loaded run (its trace analysis, baseline comparison, ``trainperf try``
    session and interruption included); ``stages`` its per-stage summaries (the profiler's own
    cost on a line of its own); ``findings`` are ranked (first = the change that could recover
    the most); ``gpu_waits`` splits each CUDA stage's phases into own work and waiting for the
    GPU.
    """

    run: RunData
    name: RunName
    stages: dict[Stage, StageSummary]
    findings: list[Finding]
    gpu_waits: dict[Stage, StageWait] = field(default_factory=dict)


def build_report(
    run: RunData | str | os.PathLike[str],
    *,
    rules: Sequence[Rule[VerdictContext]] | None = None,
) -> Report:
    """The report of a loaded ``run``: its stages summarised and judged by ``rules`` (the
    verdict's default list when ``None``: :data:`trainperf.analysis.verdict.VERDICT_RULES`; no
    file read). A path
    is loaded first (:func:`~trainperf.analysis.run.load_run` without a baseline: to compare with
    one, load the run with it), which raises
    :class:`~trainperf.analysis.run.ReportInputError` for a missing run directory or a malformed
    file."""
    if not isinstance(run, RunData):
        run = load_run(run)
    # warm-up epochs left out, the profiler's cost on its own line; the waits the verdict read
    ctx = context_of(run, stages_of(run))
    return Report(
        run=run,
        name=run_name(run),
        stages=ctx.stages,
        findings=verdict_of(ctx, rules),
        gpu_waits=ctx.waits,
    )
