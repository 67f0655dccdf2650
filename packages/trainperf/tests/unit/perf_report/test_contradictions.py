"""A report never contradicts itself (issue 38): the H200 run folder and a demo-like run rendered
and checked pair by pair (:mod:`trainperf_testing.consistency`); the plain Lightning script
with a try record is ``tests/integration/test_report_contradictions.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainperf.core.stage import Stage
from trainperf.present.report import build_report, to_markdown
from trainperf.records.files import RecordWriter
from trainperf.records.monitoring import ProfilerWindow
from trainperf.records.try_record import TryRecord

from trainperf_testing.consistency import check_consistent, renderings
from trainperf_testing.runs import CONFIG, epoch_record, make_run

SESSION = "2026-11-28T01:00:00+00:00"


def test_the_h200_report_agrees_with_itself_and_its_verdict_is_short(
    h200_train_run: Path, tmp_path: Path
) -> None:
    run = tmp_path / "train"
    shutil.copytree(h200_train_run, run)
    report = build_report(run)
    sentence = check_consistent(report, max_words=45)
    assert sentence.startswith("sync-bound: the GPU is idle 40 % of the training step")
    # its try session measured one change, inside the noise: the sentence says so, as the table
    assert "no measured change beat the noise (1 of 6 measured)" in sentence
    md = to_markdown(report)
    # the window lists a trace the copied folder lacks: said, not "rerun with the profiler"
    assert "profiler_traces/epoch_3.json.gz, not in this folder" in md
    # the validation-only input-bound (53 % of validation, 4 % of the run) is no longer a
    # critical below four warnings: info, after every larger figure
    val = next(f for f in report.findings if f.id == "input_bound" and f.stage == "val")
    assert val.severity == "info"
    assert "scalar reads (aten::item) in the window's summary are not syncs" in md


def _window(run: Path) -> None:
    writer = RecordWriter(ProfilerWindow.path(run))
    writer.write(
        ProfilerWindow(
            stage=Stage.TRAIN,
            epoch=1,
            trigger="epochs",
            reason="epoch 1 in schedule.epochs",
            steps=3,
            traces=["profiler_traces/epoch_1.json"],
            batches=(0, 3),
            overhead_s={"export": 0.4, "analysis": 0.1},
        )
    )
    writer.close()


def _tries(run: Path, changes: list[tuple[str, str, float | None, int]]) -> None:
    writer = RecordWriter(TryRecord.path(run))
    for change, status, median, pairs in changes:
        writer.write(
            TryRecord(
                session=SESSION,
                kind="candidate",
                override=change,
                description=change,
                family="test",
                alters_computation=False,
                eval_time=False,
                status=status,
                pairs=pairs,
                median=median,
                low=None if median is None else median - 0.02,
                high=None if median is None else median + 0.02,
                note="" if pairs else "the budget ran out before its first pair",
            )
        )
    writer.close()


def demo_like_run(root: Path) -> Path:
    """The demo's shape: training dominated by compute with some data wait and checkpoints, a
    validation stage waiting on data most of its (short) time, a profiler window whose trace
    was not kept, the app's config."""
    train = {"data_wait": 1.2, "forward": 3.0, "backward": 3.5, "optimizer": 0.6, "checkpoint": 1.0}
    val = {"data_wait": 0.7, "forward": 0.2, "postprocess": 0.3, "metric": 0.1}
    epochs = [
        record
        for e in range(3)
        for record in (
            epoch_record("train", e, train, worker_s={"fetch": 2.0, "collate": 1.0}),
            epoch_record("val", e, val, worker_s={"fetch": 0.5}),
        )
    ]
    config = {**CONFIG, "callbacks": {"profiler": {"enabled": True, "schedule": {"epochs": [1]}}}}
    run = make_run(root, epochs, config=config, run_info={"cpu_count": 4})
    _window(run)
    return run


def test_a_demo_like_run_agrees_with_itself_before_and_after_try(tmp_path: Path) -> None:
    run = demo_like_run(tmp_path / "demo")
    report = build_report(run)
    sentence = check_consistent(report)
    assert "no change measured yet (trainperf try RUN_DIR)" in sentence  # no session: true
    assert "the profiler window(s) recorded profiler_traces/epoch_1.json" in to_markdown(report)
    changes = [c.override for f in report.findings for c in f.candidates if c.override]
    assert len(changes) >= 2, changes
    _tries(
        run,
        [
            (changes[0], "regression", 0.93, 4),
            (changes[1], "recommended", 1.12, 4),
            ("knob:untried=1", "untried", None, 0),
        ],
    )
    tried = build_report(run)
    sentence = check_consistent(tried)
    # by what it recovers of the run: 1.12x of the short validation stage is about 1 %
    assert f"best measured change: {changes[1]} 1.12x, 1 % of the run" in sentence
    texts = renderings(tried)
    assert "Measured changes" in texts["markdown"]


def test_the_checker_catches_each_contradiction(tmp_path: Path) -> None:
    """The checks fail on the statements they guard against (a checker that passes everything
    proves nothing)."""
    import pytest

    from trainperf_testing import consistency

    run = demo_like_run(tmp_path / "demo")
    _tries(run, [("x=1", "regression", 0.9, 3)])
    report = build_report(run)
    check_consistent(report)
    swapped = list(reversed(report.findings))
    report.findings = swapped
    real_ranked = consistency.ranked
    try:  # a producer whose order the page trusted: critical no longer first
        consistency.ranked = lambda r: r.findings  # type: ignore[assignment]
        with pytest.raises(AssertionError):
            check_consistent(report)
    finally:
        consistency.ranked = real_ranked
    with pytest.raises(AssertionError):
        check_consistent(report, max_words=5)
    assert consistency.HISTORY.search("a rule since corrected")
    assert consistency.HISTORY.search("the rule before issue 31")
    assert not consistency.HISTORY.search("(Lightning issues 21232, 20995)")
