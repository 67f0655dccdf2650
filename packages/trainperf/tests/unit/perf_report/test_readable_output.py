"""Evidence for people and plots readable with outliers (issue 38): ``trainperf analyze``'s sync
evidence on the real H200 trace was a ~1,500-character ``key=value`` dump; the batch-time
histogram of the H200 run ran to 1,600 ms with every bar at the left; 24 epochs' tick labels ran
together."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console
from trainperf.analysis.run import load_run
from trainperf.analysis.trace import analyze_path
from trainperf.present.evidence import EVIDENCE_CHARS, evidence_text, number
from trainperf.present.report import plots
from trainperf.present.report.plots import clip_edge, thinned_ticks
from trainperf.present.trace_tables import print_analysis

from trainperf_testing.paths import TESTS_ROOT
from trainperf_testing.runs import epoch_record, make_run

# the real H200 trace, in the repo (packages/trainperf/tests/fixtures/traces)
H200_TRACE = (
    TESTS_ROOT / "fixtures" / "traces" / "dbnet_r18_640_16mixed_nvidia_h200.pt.trace.json.gz"
)


def test_numbers_are_rounded_to_three_significant_digits() -> None:
    assert number(8.513) == "8.51"
    assert number(59.69) == "59.7"
    assert number(1598.84) == "1,599"
    assert number(6400.0) == "6,400"
    assert number(0.0004) == "0.0004"


def test_evidence_is_named_rounded_with_units_and_short() -> None:
    sites = [
        {
            "hook": "[LightningModule]OCRLightningModule.optimizer_step",
            "op": "aten::item",
            "file": None,
            "per_step": 1,
            "ms_per_step": 8.513,
            "change": "a sentence of advice " * 10,  # the finding's change says it already
        }
    ] * 5
    text = evidence_text(
        {
            "gpu_busy_pct": 59.69,
            "sync_ms_per_step": 8.5333,
            "calls": {"cudaStreamSynchronize": 9, "aten::item": 525, "x": 1, "y": 2},
            "sites": sites,
            "skipped": None,
        }
    )
    assert text.startswith("gpu busy 59.7 %; sync 8.53 ms/step; ")
    assert "calls aten::item 525, cudaStreamSynchronize 9, y 2, +1 more" in text
    assert "sites OCRLightningModule.optimizer_step > aten::item (1/step, 8.51 ms/step)" in text
    assert "+2 more" in text  # 5 sites, 3 shown
    assert "advice" not in text
    assert "skipped" not in text
    assert len(text) <= EVIDENCE_CHARS


def test_analyze_renders_the_h200_sync_evidence_for_people() -> None:
    analysis = analyze_path(H200_TRACE)
    console = Console(width=160, record=True, file=io.StringIO())
    print_analysis(analysis, console)
    text = console.export_text()
    evidence = [line for line in text.splitlines() if line.strip().startswith("evidence:")]
    assert evidence
    for line in evidence:  # one wrapped line each, never the dump
        assert len(line) <= 160
    joined = " ".join(" ".join(text.split()).split("evidence: ")[1:])
    assert "file=None" not in joined
    assert "ms_per_step=" not in joined
    sync = next(f for f in analysis.findings if f.id == "host_sync")
    assert len(evidence_text(sync.evidence)) <= EVIDENCE_CHARS
    assert "OCRLightningModule.optimizer_step > aten::item" in evidence_text(sync.evidence)


def test_the_batch_time_histogram_keeps_its_body_and_counts_the_outliers_apart(
    h200_train_run: Path,
) -> None:
    run = load_run(h200_train_run)
    train = sorted(
        1000.0 * t
        for e in run.epochs
        if e.stage == "train"
        for t in e.batch_times_s or []
        if t is not None
    )
    edge = clip_edge(train)
    assert edge is not None
    assert edge < 200.0 < train[-1]  # the axis ends near the body, not at the 1,599 ms batch
    over = [t for t in train if t > edge]
    assert 0 < len(over) <= 0.05 * len(train)
    svg = plots.batch_times_plot(run)
    assert svg is not None
    # the overflow bar's legend (text as glyph paths, each label kept in an SVG comment)
    assert f"<!-- &gt; {edge:.0f} ms: {len(over)} (max 1,599) -->" in svg
    # few batches, or none beyond the fence: no clipping
    assert clip_edge([10.0, 11.0, 500.0]) is None
    assert clip_edge([float(t) for t in range(50, 100)]) is None


def test_many_epochs_get_thinned_tick_labels(tmp_path: Path) -> None:
    assert thinned_ticks(24) == 3
    assert thinned_ticks(8) == 1
    phases = {"data_wait": 0.1, "forward": 0.5}
    run = make_run(tmp_path, [epoch_record("train", e, phases) for e in range(24)])
    svg = plots.phase_plot(load_run(run))
    assert svg is not None
    # tick labels are glyph paths: count the x tick marks instead
    ticks = re.findall(r'<g id="xtick_\d+">', svg)
    assert 0 < len(ticks) <= 8
