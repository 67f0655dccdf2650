"""The typed public API from a user's script: `python typed_api.py RUN [BASELINE]`.

Loads a run folder, judges it, builds its report, prints the findings by id, analyses its
profiler traces and checks it against a baseline (a baseline JSON or another run folder; the
run itself when none is given), all from `import trainperf`. `mypy --strict` passes on it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trainperf


def by_id(findings: list[trainperf.Finding]) -> dict[str, trainperf.Finding]:
    """The first finding of each id (the list is ranked: the first is the most recoverable)."""
    out: dict[str, trainperf.Finding] = {}
    for finding in findings:
        out.setdefault(finding.id, finding)
    return out


class FewEpochs:
    """A rule of our own: the run recorded fewer than three training epochs, so its verdict rests
    on little evidence (it reads only the context: no earlier finding)."""

    name = "myteam:few_epochs"
    emits = frozenset({"myteam:few_epochs"})
    reads: frozenset[str] = frozenset()
    supersedes: frozenset[str] = frozenset()

    def evaluate(self, ctx: trainperf.VerdictContext) -> list[trainperf.Finding]:
        train = ctx.train
        if train is None or train.epochs >= 3:
            return []
        return [
            trainperf.Finding(
                id="myteam:few_epochs",
                severity="info",
                score=0.0,
                title=f"only {train.epochs} training epoch(s) were judged",
                evidence={"epochs": train.epochs},
                threshold={"epochs": 3},
                suggestion="record three or more epochs before trusting the ranking",
            )
        ]


def show_trace(analysis: trainperf.TraceAnalysis) -> None:
    """The trace's slowest host op and data-loading share, from the typed analysis."""
    share = analysis.dataloader_time_pct
    print(f"trace: {analysis.summary.n_steps} steps, data loading {share:.1f} %")
    if analysis.top_cpu_ops:
        top = analysis.top_cpu_ops[0]
        print(f"  slowest host op: {top.name} ({top.self_ms:.3f} ms self, {top.calls} calls)")
    for finding in analysis.findings:
        if finding.id == trainperf.TraceFindingId.DATA_LOADING:
            print(f"  the trace says: {finding.title}")


def main(run_dir: Path, baseline: Path) -> int:
    print(f"trainperf {trainperf.__version__}")
    run: trainperf.RunData = trainperf.load_run(run_dir)
    report: trainperf.Report = trainperf.build_report(run)
    verdict: list[trainperf.Finding] = trainperf.judge(run)
    print(f"{len(verdict)} finding(s), the report ranks the same {len(report.findings)}")
    for fid, finding in by_id(verdict).items():
        print(f"  {fid}: {finding.severity}, {finding.title}")
    rules: list[trainperf.Rule[trainperf.VerdictContext]] = [
        *trainperf.VERDICT_RULES.default(),
        FewEpochs(),
    ]
    own = by_id(trainperf.judge(run, rules=rules)).get("myteam:few_epochs")
    if own is not None:
        print(f"our own rule: {own.title}")
    input_bound = by_id(verdict).get(trainperf.FindingId.INPUT_BOUND)
    if input_bound is not None:
        print(f"input-bound: {input_bound.suggestion}")
    traces = run_dir / "profiler_traces"
    if traces.is_dir():
        show_trace(trainperf.trace_analysis(traces, top_k=5))
        seed: dict[str, object] = trainperf.analyze_trace(traces, top_k=5)
        print(f"  top_cpu_ops (op_name, time_us): {seed['top_cpu_ops']}")
    outcome: trainperf.GateOutcome = trainperf.check_baseline(baseline, run)
    print(f"gate: {outcome.verdict} ({len(outcome.rows)} figures)")
    markdown: str = trainperf.to_markdown(report)
    return 0 if markdown.startswith("# ") else 1


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: typed_api.py RUN [BASELINE]")
    given = Path(sys.argv[1])
    sys.exit(main(given, Path(sys.argv[2]) if len(sys.argv) > 2 else given))
