"""trainperf.analysis.baseline on hand-made run directories and bench JSONs (no Trainer, no wall
clock)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainperf.analysis.baseline import (
    BASELINE_SCHEMA,
    BENCH_SCHEMA,
    BaselineError,
    load_source,
    make_baseline,
    write_baseline,
)
from trainperf.analysis.gate import check_baseline
from trainperf.cli.main import main

from trainperf_testing.baseline_runs import epoch_record, make_run


@pytest.fixture
def run(tmp_path: Path) -> Path:
    records = [epoch_record(0, hits=16, misses=24, scale=3.0)]  # cold first epoch
    records += [epoch_record(e, jitter=0.002 * e) for e in (1, 2, 3)]
    records += [epoch_record(e, stage="train", scale=2.0) for e in (0, 1, 2)]
    return make_run(tmp_path / "run", records)


def test_run_figures_skip_the_first_epoch(run: Path) -> None:
    baseline = load_source(run)
    assert baseline.to_json()["schema"] == BASELINE_SCHEMA
    assert baseline.stage == "val"
    assert baseline.epochs == [1, 2, 3]
    figures = baseline.figures
    assert figures["polygon_cache_hit_rate"].values == (1.0, 1.0, 1.0)
    assert figures["targets_ms_per_image"].median == pytest.approx(1e3 * 0.08 / 40)
    assert figures["worker_collate_ms_per_batch"].median == pytest.approx(1e3 * 0.2 / 5)
    assert figures["phase_forward_s"].median == pytest.approx(2.0 + 0.004)
    assert figures["samples_per_sec"].better == "higher"
    assert len(baseline.batch_times_s) == 15
    assert baseline.workload == {
        "samples": 40,
        "num_batches": 5,
        "batch_size": 8,
        "num_workers": 2,
        "world_size": 1,
    }
    assert baseline.machine["cpu_count"] == 2
    assert baseline.counts == {"polygon_cache_hits": 120, "polygon_cache_misses": 0}

    cold = load_source(run, skip_epochs=0)
    assert cold.figures["polygon_cache_hit_rate"].values[0] == pytest.approx(0.4)
    train = load_source(run / "perf" / "epochs.jsonl", stage="train")
    assert train.epochs == [1, 2]


def test_a_run_checks_against_its_own_baseline(run: Path, tmp_path: Path) -> None:
    path = write_baseline(make_baseline(run, name="demo"), tmp_path / "b" / "demo.json")
    baseline = load_source(path)
    assert baseline.name == "demo"
    assert baseline.figures == load_source(run).figures  # the JSON round trip keeps them
    result = check_baseline(baseline, load_source(run))
    assert result.verdict == "pass"
    assert {r.status for r in result.rows} == {"no significant change"}
    assert all(r.ratio == pytest.approx(1.0) for r in result.rows)


def test_doubled_phase_times_are_a_regression(run: Path, tmp_path: Path) -> None:
    slow = [epoch_record(e, scale=2.0) for e in range(4)]
    current = load_source(make_run(tmp_path / "slow", slow))
    result = check_baseline(load_source(run), current)
    assert result.verdict == "regression"
    status = {r.figure: r.status for r in result.rows}
    assert status["phase_forward_s"] == "regression"
    assert status["epoch_wall_s"] == "regression"
    assert status["samples_per_sec"] == "regression"
    assert status["batch_time_s (distribution)"] == "regression"
    # A phase of 5 ms that doubles moves by less than 2 % of the epoch: not a regression.
    assert status["phase_callbacks_s"] == "no significant change"
    # The other direction is an improvement, not a failure.
    assert check_baseline(current, load_source(run)).verdict == "pass"


def test_threshold_widens_to_the_baseline_spread(tmp_path: Path) -> None:
    noisy = [epoch_record(0)] + [epoch_record(e, scale=s) for e, s in ((1, 1.0), (2, 1.5))]
    baseline = load_source(make_run(tmp_path / "noisy", noisy))
    row = next(r for r in check_baseline(baseline, baseline).rows if r.figure == "phase_forward_s")
    # 3 robust sigmas: 3 * IQR / 1.349 / median = 3 * 0.5 / 1.349 / 2.5
    assert row.threshold == pytest.approx(44.48, abs=0.01)
    assert row.widened is True
    # 30 % slower than the baseline's median: within its own noise -> not a regression.
    current = load_source(
        make_run(tmp_path / "cur", [epoch_record(e, scale=1.625) for e in (0, 1)])
    )
    rows = {r.figure: r for r in check_baseline(baseline, current).rows}
    assert rows["phase_forward_s"].status == "no significant change"
    # An explicit tolerance below the spread does not narrow it.
    rows = {r.figure: r for r in check_baseline(baseline, current, 1.0).rows}
    assert rows["phase_forward_s"].status == "no significant change"


def test_hit_rate_drop_is_judged_in_points(run: Path, tmp_path: Path) -> None:
    dropped = [epoch_record(e, hits=36, misses=4) for e in range(3)]  # 90 % hits
    result = check_baseline(load_source(run), load_source(make_run(tmp_path / "d", dropped)))
    row = next(r for r in result.rows if r.figure == "polygon_cache_hit_rate")
    assert (row.status, row.threshold_unit, row.threshold) == ("regression", "pts", 2.0)
    assert result.verdict == "regression"
    loose = check_baseline(load_source(run), load_source(tmp_path / "d"), 15.0)
    row = next(r for r in loose.rows if r.figure == "polygon_cache_hit_rate")
    assert (row.status, row.threshold) == ("no significant change", 15.0)


def test_not_comparable_stage_workload_machine(run: Path, tmp_path: Path) -> None:
    baseline = load_source(run)
    train = load_source(run, stage="train")
    result = check_baseline(baseline, train)
    assert result.verdict == "not comparable"
    assert any("different stages" in note for note in result.notes)

    bigger = make_run(tmp_path / "big", [epoch_record(e, samples=80) for e in range(3)])
    result = check_baseline(baseline, load_source(bigger))
    assert result.verdict == "not comparable"
    assert any("samples 40" in note for note in result.notes)

    other = load_source(make_run(tmp_path / "other", [epoch_record(e) for e in range(3)], 64))
    result = check_baseline(baseline, other)
    assert result.verdict == "not comparable"
    assert any("cpu_count 2 vs 64" in note for note in result.notes)
    allowed = check_baseline(baseline, other, allow_other_machine=True)
    assert allowed.verdict == "pass"
    assert any(note.startswith("WARNING: different machines") for note in allowed.notes)


def test_missing_figure_is_reported_not_failed(run: Path, tmp_path: Path) -> None:
    records = [epoch_record(e) for e in range(3)]
    for record in records:
        record["worker_counts"] = {}
    result = check_baseline(load_source(run), load_source(make_run(tmp_path / "nc", records)))
    row = next(r for r in result.rows if r.figure == "polygon_cache_hit_rate")
    assert row.status == "missing"
    assert result.verdict == "pass"
    assert any("polygon_cache_hit_rate" in note for note in result.notes)


def bench(tmp_path: Path, name: str, **figures: Any) -> Path:
    doc = {
        "schema": BENCH_SCHEMA,
        "v": 1,
        "name": "cache_epoch",
        "t": 1.0,
        "machine": {"cpu_count": 2, "device": "cpu"},
        "figures": figures,
        "units": {"collate": "ms/batch"},
        "better": {"collate": "lower"},
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def test_bench_json_source(tmp_path: Path) -> None:
    base = load_source(bench(tmp_path, "a", collate=[10.0, 11.0], hit_rate=1.0, speedup_x=8.0))
    assert base.source.kind == "bench"
    assert base.figures["collate"].unit == "ms/batch"
    assert base.figures["hit_rate"].unit == "fraction"
    assert base.figures["speedup_x"].better == "higher"
    worse = load_source(bench(tmp_path, "b", collate=[30.0, 31.0], hit_rate=1.0, speedup_x=8.0))
    assert check_baseline(base, worse).verdict == "regression"
    assert check_baseline(base, base).verdict == "pass"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema": "other"}', "neither"),
        ('{"schema": "receipt-ocr/bench", "v": 1}', "non-empty 'figures'"),
        ('{"schema": "receipt-ocr/bench", "v": 1, "figures": {"x": "1"}}', "figure 'x'"),
        (
            '{"schema": "receipt-ocr/perf-baseline", "v": 9, "figures": {}}',
            "version 9",
        ),
    ],
)
def test_bad_sources_name_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=message) as info:
        load_source(path)
    assert str(path) in str(info.value)


def test_bad_run_directories(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="not a run directory"):
        load_source(tmp_path)
    with pytest.raises(BaselineError, match="no such file"):
        load_source(tmp_path / "absent")
    run = make_run(tmp_path / "r", [epoch_record(0)])
    with pytest.raises(BaselineError, match=r"no 'test' epochs \(stages present: \['val'\]\)"):
        load_source(run, stage="test")
    single = load_source(run)  # one epoch: kept, with a note
    assert single.epochs == [0]
    assert "leave none" in single.notes[0]
    (run / "perf" / "epochs.jsonl").write_text('{"schema": "receipt-ocr/perf-epoch"}\n')
    with pytest.raises(BaselineError, match="line 1 has no integer 'v'"):
        load_source(run)


def test_the_gate_loads_its_own_sides(run: Path, tmp_path: Path) -> None:
    """``trainperf.check_baseline`` with public names only: a baseline file or run folder and the
    current run as a folder or a loaded run; ``stage`` / ``skip_epochs`` reach the loading."""
    import trainperf

    out = tmp_path / "baselines" / "demo.json"
    assert main(["baseline", str(run), "-o", str(out)]) == 0
    slow = make_run(tmp_path / "slow", [epoch_record(e, scale=2.0) for e in range(4)])
    outcome = trainperf.check_baseline(out, slow)
    assert isinstance(outcome, trainperf.GateOutcome)
    assert outcome.verdict == "regression"
    assert trainperf.check_baseline(str(out), run).verdict == "pass"
    assert trainperf.check_baseline(run, trainperf.load_run(slow)).verdict == "regression"
    # the same loading as load_source's: the options apply to both run folders
    assert trainperf.check_baseline(run, slow, skip_epochs=0) == check_baseline(
        load_source(run, skip_epochs=0), load_source(slow, skip_epochs=0)
    )
    train = trainperf.check_baseline(run, run, stage="train")
    assert {r.status for r in train.rows} == {"no significant change"}
    assert train.rows[0].baseline == load_source(run, stage="train").figures["epoch_wall_s"].median
    with pytest.raises(trainperf.InputError, match="nowhere: no such file"):
        trainperf.check_baseline(tmp_path / "nowhere", run)
    with pytest.raises(BaselineError, match="not a run directory"):
        trainperf.check_baseline(out, tmp_path / "baselines")
    with pytest.raises(TypeError, match="got int"):
        trainperf.check_baseline(out, 3)  # type: ignore[arg-type]


def test_cli_exit_codes(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "baselines" / "demo.json"
    assert main(["baseline", str(run), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["schema"] == BASELINE_SCHEMA
    report = tmp_path / "check.json"
    assert main(["check", str(out), str(run), "--json", str(report)]) == 0
    assert json.loads(report.read_text())["verdict"] == "pass"
    slow = make_run(tmp_path / "slow", [epoch_record(e, scale=2.0) for e in range(3)])
    assert main(["check", str(out), str(slow)]) == 1
    assert "regression" in capsys.readouterr().out
    assert main(["check", str(out), str(slow), "--tolerance", "500"]) == 0
    assert main(["check", str(out), str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert main(["check", str(out), str(run), "--stage", "train"]) == 2
    assert "not comparable" in capsys.readouterr().err


def test_help_imports_no_torch_or_lightning() -> None:
    code = (
        "import sys\n"
        "from trainperf.cli.main import main\n"
        "try:\n    main(['check', '--help'])\nexcept SystemExit:\n    pass\n"
        "import trainperf.analysis.baseline, trainperf.analysis.gate\n"
        "import trainperf.present.gate_table\n"
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_many_epochs_need_a_significant_shift(tmp_path: Path) -> None:
    """With >= 4 epochs a side, a median shift inside the epochs' overlap is noise."""
    scales = (1.0, 1.05, 1.1, 1.0, 1.05, 1.1)  # noise allowance 15.9 % (3 IQR sigmas)
    base = load_source(
        make_run(tmp_path / "b", [epoch_record(e, scale=s) for e, s in enumerate(scales)]),
        skip_epochs=0,
    )
    # Half the epochs much slower: the median moves by 24 % (beyond 15.9 %), but the values
    # straddle the baseline's (Mann-Whitney p ~ 0.4).
    mixed = (0.95, 1.0, 1.6, 1.6, 1.6, 0.95)
    cur = load_source(
        make_run(tmp_path / "c", [epoch_record(e, scale=s) for e, s in enumerate(mixed)]),
        skip_epochs=0,
    )
    rows = {r.figure: r for r in check_baseline(base, cur, 5.0).rows}
    assert rows["phase_forward_s"].moved == "regression"
    assert rows["phase_forward_s"].status == "inconclusive"
    assert rows["phase_forward_s"].p_value is not None
    assert rows["phase_forward_s"].p_value > 0.05
    # Every epoch slower than every baseline epoch: significant.
    slow = load_source(
        make_run(tmp_path / "s", [epoch_record(e, scale=2.0 + e / 100) for e in range(6)]),
        skip_epochs=0,
    )
    rows = {r.figure: r for r in check_baseline(base, slow).rows}
    assert rows["phase_forward_s"].status == "regression"
    assert rows["phase_forward_s"].p_value is not None
    assert rows["phase_forward_s"].p_value < 0.05
