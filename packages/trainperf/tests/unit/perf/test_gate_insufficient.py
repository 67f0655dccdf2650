"""The gate answers "insufficient data" (exit 3, never 1) when a side has too few epochs or
batches to judge, and still finds a planted slowdown with enough of them. Hand-made run folders
(``epochs.jsonl`` as the performance callbacks write it); no wall clock is measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainperf.analysis.baseline import MIN_BATCHES, load_source, make_baseline
from trainperf.analysis.gate import check_baseline
from trainperf.cli.main import EXIT_INSUFFICIENT_DATA, main

from trainperf_testing.baseline_runs import epoch_record, make_run


def two_epoch_run(root: Path, targets_scale: float = 1.0) -> Path:
    """A 2-epoch run: the first (cold) epoch is skipped, one is kept (0 % spread)."""
    records = [epoch_record(0, scale=3.0), epoch_record(1)]
    # The false alarm: an identical rerun whose worker target time moved by +57.9 %.
    records[1]["worker_s"]["targets"] *= targets_scale
    return make_run(root, records)


def test_two_epoch_baseline_against_identical_rerun_is_insufficient_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base_run = two_epoch_run(tmp_path / "base")
    rerun = two_epoch_run(tmp_path / "rerun", targets_scale=1.579)
    out = tmp_path / "baselines" / "b.json"
    assert main(["baseline", str(base_run), "-o", str(out)]) == 0
    recorded = capsys.readouterr().out
    assert "insufficient data" in recorded  # said when the baseline is recorded, too

    report = tmp_path / "check.json"
    code = main(["check", str(out), str(rerun), "--json", str(report)])
    assert code == EXIT_INSUFFICIENT_DATA == 3
    printed = capsys.readouterr().out
    assert "verdict: insufficient data" in printed
    assert "1 val epoch(s) after skipping 1" in printed
    result = json.loads(report.read_text())
    assert result["verdict"] == "insufficient data"
    statuses = {r["figure"]: r for r in result["rows"]}
    # Moved beyond the 10 % tolerance, but not called a regression.
    assert statuses["targets_ms_per_image"]["status"] == "inconclusive"
    assert statuses["targets_ms_per_image"]["moved"] == "regression"
    assert not any(r["status"] == "regression" for r in result["rows"])
    # Without the rule this exact pair was a regression (exit 1): the rows moved.
    assert statuses["targets_ms_per_image"]["ratio"] == pytest.approx(1.579)


def test_either_side_too_small_is_insufficient(tmp_path: Path) -> None:
    enough = load_source(make_run(tmp_path / "ok", [epoch_record(e) for e in range(4)]))
    single = load_source(two_epoch_run(tmp_path / "single"))
    for base, cur, side in ((enough, single, "current run"), (single, enough, "baseline")):
        result = check_baseline(base, cur)
        assert result.verdict == "insufficient data"
        assert [r.split(" has ")[0] for r in result.insufficient] == [f"the {side}"]
    # Two kept epochs of 3 batches: a spread exists, but 6 batches are too few to test.
    few = [epoch_record(e) for e in range(3)]
    for rec in few:
        rec["num_batches"] = 3
        rec["batch_times_s"] = rec["batch_times_s"][:3]
    short = load_source(make_run(tmp_path / "few", few))
    result = check_baseline(short, short)
    assert result.verdict == "insufficient data"
    assert len(result.insufficient) == 2
    assert f"needs at least {MIN_BATCHES}" in result.insufficient[0]
    # Not comparable stays the stronger answer (a different stage says nothing either way).
    train = load_source(make_run(tmp_path / "t", [epoch_record(0, stage="train")]), stage="train")
    assert check_baseline(single, train).verdict == "not comparable"


def test_planted_30_percent_slowdown_with_enough_epochs_is_a_regression(
    tmp_path: Path,
) -> None:
    jitter = (1.0, 1.02, 0.99, 1.01, 1.0, 0.98)  # a 4 % epoch-to-epoch spread
    base_run = make_run(tmp_path / "base", [epoch_record(e, scale=s) for e, s in enumerate(jitter)])
    slow_run = make_run(
        tmp_path / "slow", [epoch_record(e, scale=1.3 * s) for e, s in enumerate(jitter)]
    )
    same_run = make_run(
        tmp_path / "same", [epoch_record(e, scale=s) for e, s in enumerate(reversed(jitter))]
    )
    out = tmp_path / "b.json"
    assert main(["baseline", str(base_run), "-o", str(out)]) == 0
    assert main(["check", str(out), str(slow_run)]) == 1
    result = check_baseline(make_baseline(base_run), load_source(slow_run))
    assert result.verdict == "regression"
    assert result.insufficient == []
    rows = {r.figure: r for r in result.rows}
    assert rows["phase_forward_s"].status == "regression"
    assert (rows["phase_forward_s"].p_value or 1.0) < 0.05
    assert rows["batch_time_s (distribution)"].status == "regression"
    # The same amount of data without the slowdown passes.
    assert main(["check", str(out), str(same_run)]) == 0


def test_help_documents_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "3 insufficient data" in text
