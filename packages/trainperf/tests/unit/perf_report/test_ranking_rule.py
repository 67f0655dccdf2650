"""One ranking everyone can predict (issue 38): findings of planted sizes go through the verdict's
recoverable figures and severities (``assess``) with a planted ``trainperf try`` session, and come
out in the stated order and severities: critical from 20 % of the run, warning from 10 %, a
measured gain a warning from 5 %, info below; a risk to the run critical whatever its size; a
measured gain by its measured size; a measured regression or a gain inside the noise never above
a cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainperf.analysis.run import RunData
from trainperf.analysis.verdict.recoverable import assess
from trainperf.core.candidates import Candidate
from trainperf.core.findings import Finding, ranked_size, severity_for
from trainperf.present.report import Report
from trainperf.present.report.findings_section import headline
from trainperf.present.report.run_name import run_name
from trainperf.records.try_record import TryRecord

SESSION = "2026-11-28T00:00:00+00:00"


def _cause(fid: str, pct: float, *, change: str | None = None, severity: str = "info") -> Finding:
    """A cause whose rule bounded it at ``pct`` % of the run (a severity the verdict replaces)."""
    candidates = [Candidate("test", f"set {change}", override=change)] if change else []
    return Finding(
        fid,
        severity,
        pct,
        f"{fid}: {pct:g} % of the run",
        {},
        {},
        "s",
        candidates=candidates,
        recoverable_pct=pct,
        recoverable_from="bound",
    )


def _tried(change: str, status: str, median: float, low: float, high: float) -> TryRecord:
    return TryRecord(
        session=SESSION,
        kind="candidate",
        override=change,
        description=change,
        family="test",
        alters_computation=False,
        eval_time=False,
        status=status,
        pairs=5,
        median=median,
        low=low,
        high=high,
    )


def _run(tmp_path: Path, records: list[TryRecord]) -> RunData:
    run = RunData(run_dir=tmp_path, folder="planted")
    run.try_session = records
    return run


def _planted(tmp_path: Path) -> tuple[RunData, list[Finding]]:
    creep = Finding(
        "memory_creep",
        "critical",
        2.0,  # small: the run may still die of it
        "memory creep: Net.losses grows by 1 MB per epoch",
        {},
        {},
        "append loss.detach()",
    )
    compute = Finding("compute_bound", "info", 54.0, "compute-bound: 54 % of training", {}, {}, "s")
    findings = [
        _cause("checkpoint_overhead", 3.0),
        _cause("input_bound", 25.0, severity="warning"),
        _cause("module_hook_overhead", 30.0, change="hooks=off"),  # measured: a regression
        _cause("gpu_underused", 39.0, severity="warning"),
        _cause("slow_metric", 15.0, severity="critical"),
        _cause("unattributed", 7.0, severity="warning"),
        _cause("callback_overhead", 12.0),
        _cause("straggler", 9.0, change="rank=fixed"),  # measured inside the noise
        _cause("slow_postprocess", 8.0, change="post=fast"),  # measured 1.08x
        _cause("cache_misses", 6.0, change="cache=on"),  # measured 1.006x
        compute,
        creep,
    ]
    records = [
        _tried("hooks=off", "regression", 0.90, 0.85, 0.95),
        _tried("rank=fixed", "inconclusive", 1.02, 0.97, 1.08),
        _tried("post=fast", "recommended", 1.08, 1.05, 1.11),
        _tried("cache=on", "recommended", 1.006, 1.004, 1.008),
    ]
    return _run(tmp_path, records), findings


def test_planted_sizes_come_out_in_the_stated_order_and_severities(tmp_path: Path) -> None:
    run, findings = _planted(tmp_path)
    graded = assess(findings, run, {}, total_s=100.0)
    assert [(f.id, f.severity) for f in graded] == [
        ("memory_creep", "critical"),  # a risk to the run: critical and first at 2 %
        ("gpu_underused", "critical"),  # 39 % of the run
        ("input_bound", "critical"),  # 25 %
        ("slow_metric", "warning"),  # 15 %: its rule's "critical" replaced
        ("callback_overhead", "warning"),  # 12 %
        ("slow_postprocess", "warning"),  # measured 1.08x: 7.4 %, outside the deadband
        ("straggler", "info"),  # a 9 % bound (its change measured inside the noise)
        ("unattributed", "info"),  # a 7 % bound: an upper bound may recover nothing
        ("compute_bound", "info"),  # unknown headroom ranks as the 5 % deadband
        ("checkpoint_overhead", "info"),  # 3 %
        ("cache_misses", "info"),  # a measured 0.6 % gain, below every cause
        ("module_hook_overhead", "info"),  # a measured regression: 0, last
    ]
    by_id = {f.id: f for f in graded}
    assert by_id["slow_postprocess"].recoverable_from == "measured"
    assert by_id["slow_postprocess"].recoverable_pct == pytest.approx(7.4, abs=0.05)
    assert by_id["cache_misses"].recoverable_pct == pytest.approx(0.6, abs=0.05)
    assert by_id["straggler"].recoverable_from == "bound"  # inconclusive: not a measured gain
    assert by_id["module_hook_overhead"].recoverable_pct == 0.0
    # critical first and largest first agree: the largest first within each severity, and
    # every critical (the risk aside) larger than every warning, every warning than every info
    # bound (a measured 5-10 % gain is the one warning below a bound of the same size)
    for sev in ("critical", "warning", "info"):
        sizes = [ranked_size(f) for f in graded if f.severity == sev]
        assert sizes == sorted(sizes, reverse=True), sev
    lowest_critical = min(ranked_size(f) for f in graded[1:] if f.severity == "critical")
    assert lowest_critical > max(ranked_size(f) for f in graded if f.severity == "warning")
    assert all(severity_for(f) == f.severity for f in graded)


def test_the_verdict_names_the_largest_cause_and_apart_the_best_measured_change(
    tmp_path: Path,
) -> None:
    run, findings = _planted(tmp_path)
    findings = [f for f in findings if f.id != "memory_creep"]
    report = Report(run=run, name=run_name(run), stages={}, findings=assess(findings, run, {}, 1))
    sentence = headline(report)
    assert sentence.startswith("gpu_underused: 39 % of the run")
    assert "it could recover up to 39 % of the run (a bound)" in sentence
    assert "best measured change: post=fast 1.08x, 7 % of the run" in sentence
    assert len(sentence.split()) <= 40
    # no winner: the sentence says none beat the noise, and how many were measured
    run.try_session = [r for r in run.try_session if r.status != "recommended"]
    report = Report(run=run, name=run_name(run), stages={}, findings=assess(findings, run, {}, 1))
    assert "no measured change beat the noise (2 of 2 measured)" in headline(report)


@pytest.mark.parametrize(
    ("pct", "source", "severity"),
    [
        (4.9, "bound", "info"),
        (4.9, "measured", "info"),
        (5.0, "measured", "warning"),
        (9.9, "bound", "info"),
        (10.0, "bound", "warning"),
        (19.9, "measured", "warning"),
        (20.0, "bound", "critical"),
        (0.0, "measured", "info"),
    ],
)
def test_severity_edges(pct: float, source: str, severity: str) -> None:
    f = Finding(
        "x", "critical", pct, "x", {}, {}, "s", recoverable_pct=pct, recoverable_from=source
    )
    assert severity_for(f) == severity


def test_a_risk_keeps_its_rules_severity_whatever_its_size() -> None:
    small = Finding(
        "alert:nan_loss", "critical", 0.5, "NaN", {}, {}, "s", recoverable_pct=0.5,
        recoverable_from="risk",
    )  # fmt: skip
    assert severity_for(small) == "critical"
    watch = Finding(
        "host_memory_high", "warning", 40.0, "m", {}, {}, "s", recoverable_pct=40.0,
        recoverable_from="risk",
    )  # fmt: skip
    assert severity_for(watch) == "warning"


def test_the_verdict_sentence_stays_within_40_words_whatever_the_finding_says(
    tmp_path: Path,
) -> None:
    title = "slow thing: " + " ".join(f"word{i}" for i in range(60)) + "; detail (x)"
    change = " ".join(f"step{i}" for i in range(30))  # no colon to cut at
    long = Finding(
        "slow_metric",
        "info",
        30.0,
        title,
        {},
        {},
        "s",
        candidates=[Candidate("test", change)],
        recoverable_pct=30.0,
        recoverable_from="bound",
    )
    run = _run(tmp_path, [])
    run.try_note = "perf/try.jsonl could not be read: line 1: not JSON"
    contended = Finding("cpu_contention", "info", 80.0, "CPU contention: busy", {}, {}, "s")
    findings = assess([long, contended], run, {}, 1.0)
    sentence = headline(Report(run=run, name=run_name(run), stages={}, findings=findings))
    assert len(sentence.split()) <= 40, sentence
    assert sentence.startswith("slow thing: word0 word1")  # cut short, never the change
    assert "step0" in sentence
    assert "it could recover up to 30 % of the run (a bound)" in sentence
    assert "the try record could not be read" in sentence
