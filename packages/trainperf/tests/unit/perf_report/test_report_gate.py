"""The report's baseline section on a comparison with too little data: it says so, and the
verdict ranks no regression (the issue's 2-epoch baseline against an identical rerun)."""

from __future__ import annotations

from pathlib import Path

from trainperf.analysis.run import load_run
from trainperf.present.report import build_report, to_markdown

from trainperf_testing.runs import CONFIG, epoch_record, make_run

VAL = {"data_wait": 0.5, "forward": 2.0, "metric": 0.2, "callbacks": 0.05}


def two_epoch_run(root: Path, slower: float = 1.0) -> Path:
    """Two val epochs (the first is skipped by the gate: one is left to judge)."""
    epochs = [
        epoch_record("val", 0, {k: 3 * v for k, v in VAL.items()}),
        epoch_record("val", 1, {k: v * slower for k, v in VAL.items()}),
    ]
    return make_run(root, epochs, config=CONFIG, run_info={"cpu_count": 2})


def test_insufficient_baseline_comparison_is_said_not_ranked(tmp_path: Path) -> None:
    base = two_epoch_run(tmp_path / "base")
    # 58 % slower in its one kept epoch: before the rule, a "regression" ranked with score 58.
    run = two_epoch_run(tmp_path / "run", slower=1.58)
    report = build_report(load_run(run, baseline=base))
    assert report.run.baseline is not None
    assert report.run.baseline.verdict == "insufficient data"
    ids = [f.id for f in report.findings]
    assert "baseline_regression" not in ids
    info = next(f for f in report.findings if f.id == "baseline_insufficient_data")
    assert (info.severity, info.score) == ("info", 0.0)
    assert "epoch_wall_s" in info.evidence["unjudged_figures"]
    md = to_markdown(report)
    assert "Baseline base: verdict: insufficient data." in md
    assert "**insufficient data**" not in md
    assert "Too little data to judge, so this is neither a pass nor a regression" in md
    assert "| inconclusive (regression?) |" in md
    assert "| regression |" not in md
