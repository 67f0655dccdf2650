"""The regression gate on the committed baseline (made by ``trainperf baseline`` from a real
``synthetic_debug`` run, see ``benchmarks/baseline_doc.py``): it checks clean against itself,
fails on planted regressions and refuses bad input. No wall clock is measured here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from msgspec.structs import replace
from trainperf.analysis.baseline import (
    BASELINE_SCHEMA,
    Baseline,
    Figure,
    Source,
    load_source,
    write_baseline,
)
from trainperf.analysis.gate import GateRow, check_baseline
from trainperf.cli.main import main
from trainperf.present.gate_table import COLUMNS, row_cells
from trainperf.records.schema import current_schema

from trainperf_testing.baseline_runs import epoch_record, make_run

BASELINE = Path(__file__).parent / "baselines" / "synthetic_debug_val.json"


@pytest.fixture
def baseline() -> Baseline:
    return load_source(BASELINE)


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def scaled(source: Baseline, factor: float, prefix: str) -> Baseline:
    """A copy with every figure named ``prefix...`` (and the batch times) times ``factor``."""
    figures = {
        name: replace(fig, values=tuple(v * factor for v in fig.values))
        if name.startswith(prefix)
        else fig
        for name, fig in source.figures.items()
    }
    times = [t * factor for t in source.batch_times_s]
    return replace(source, figures=figures, batch_times_s=times)


def test_committed_baseline_comes_from_a_real_run(baseline: Baseline) -> None:
    # written before the toolkit's move (a receipt-ocr/ schema name): read as today's
    assert current_schema(json.loads(BASELINE.read_text())["schema"]) == BASELINE_SCHEMA
    assert (baseline.source.kind, baseline.stage, baseline.skip_epochs) == ("run", "val", 1)
    # synthetic_debug's validation split: 40 receipts, batches of 8, two workers.
    assert baseline.workload["samples"] == 40
    assert baseline.workload["num_batches"] == 5
    assert baseline.workload["num_workers"] == 2
    figures = baseline.figures
    for name in (
        "epoch_wall_s",
        "phase_forward_s",
        "phase_data_wait_s",
        "batch_median_s",
        "samples_per_sec",
        "worker_collate_ms_per_batch",
        "targets_ms_per_image",
    ):
        assert (figures[name].median or 0.0) > 0, name
    # Deterministic: from the second validation epoch on every lookup hits.
    assert figures["polygon_cache_hit_rate"].values == (1.0,) * len(baseline.epochs)
    assert baseline.counts.get("polygon_cache_misses", 0) == 0
    assert len(baseline.batch_times_s) == 5 * len(baseline.epochs)
    # the JSON written back is the JSON read
    assert Baseline.from_json(baseline.to_json(), "again") == baseline


def test_baseline_passes_against_itself(tmp_path: Path) -> None:
    out = tmp_path / "self.json"
    assert main(["check", str(BASELINE), str(BASELINE), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["verdict"] == "pass"
    assert all(row["status"] == "no significant change" for row in result["rows"])


def test_doubled_phase_times_fail_the_gate(
    baseline: Baseline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = scaled(scaled(baseline, 2.0, "phase_"), 2.0, "epoch_wall_s")
    # Beyond any epoch-to-epoch noise the committed baseline could have: a planted 10x.
    slow = scaled(slow, 5.0, "phase_forward_s")
    path = write_baseline(slow, tmp_path / "slow.json")
    assert main(["check", str(BASELINE), str(path)]) == 1
    out = capsys.readouterr().out
    assert "regression" in out
    assert "phase_forward_s" in out
    rows = {r.figure: r for r in check_baseline(baseline, slow).rows}
    assert rows["phase_forward_s"].status == "regression"
    assert rows["batch_time_s (distribution)"].status == "regression"
    # The same change the other way round is an improvement: the gate passes.
    assert check_baseline(slow, baseline).verdict == "pass"


def test_cache_hit_rate_drop_fails_the_gate(baseline: Baseline, tmp_path: Path) -> None:
    figure = baseline.figures["polygon_cache_hit_rate"]
    cold = replace(
        baseline,
        figures={
            **baseline.figures,
            "polygon_cache_hit_rate": Figure(figure.unit, figure.better, (0.5,) * 3),
        },
    )
    assert main(["check", str(BASELINE), str(write_baseline(cold, tmp_path / "cold.json"))]) == 1


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truncated = tmp_path / "truncated.json"
    truncated.write_text(BASELINE.read_text()[:200])
    assert main(["check", str(BASELINE), str(truncated)]) == 2
    assert str(truncated) in capsys.readouterr().err
    other = json.loads(BASELINE.read_text())
    other["machine"]["cpu_count"] = 128
    path = write(tmp_path, "other.json", other)
    assert main(["check", str(BASELINE), str(path)]) == 2
    assert "different machines" in capsys.readouterr().err
    assert main(["check", str(BASELINE), str(path), "--allow-other-machine"]) == 0


def test_baseline_from_a_bench_json(tmp_path: Path) -> None:
    bench: dict[str, Any] = {
        "schema": "receipt-ocr/bench",
        "v": 1,
        "name": "cache_epoch",
        "t": 0.0,
        "machine": {"cpu_count": 2, "device": "cpu"},
        "stage": "val",
        "figures": {
            "fast+cache/persistent.collate_ms_per_batch": [12.0, 13.0],
            "fast+cache/persistent.hit_rate": [1.0, 1.0],
            "persistent.collate_speedup_x": 6.5,
        },
        "units": {"fast+cache/persistent.collate_ms_per_batch": "ms/batch"},
    }
    source = write(tmp_path, "bench.json", bench)
    out = tmp_path / "baselines" / "bench.json"
    assert main(["baseline", str(source), "-o", str(out)]) == 0
    assert load_source(out).figures["persistent.collate_speedup_x"].better == "higher"
    assert main(["check", str(out), str(source)]) == 0
    bench["figures"]["persistent.collate_speedup_x"] = 2.0
    assert main(["check", str(out), str(write(tmp_path, "worse.json", bench))]) == 1


# -- more epochs never blind the gate ------------------------------------------------------------
#
# Run folders written by the test (``perf/epochs.jsonl`` as the performance callbacks write it),
# not real Trainer runs: a 13-epoch run per case, four cases and several seeds would take minutes
# on the 2 shared cores, and their wall times would move with the machine's load (a test that
# flakes under load is a defect). The noise model, seeded:
#
# * a validation epoch is 5 batches of STEP_S (the module's own step: forward 85 %, data wait 8 %,
#   metric 4 %, callbacks 2 %, unattributed 1 %), the DataLoader workers' time beside it;
# * machine noise: every epoch has one speed factor ~ N(1, 2 %) applied to all its times (an epoch
#   is slow as a whole on a shared machine), every batch its own factor ~ N(1, 5 %);
# * the first epoch is cold (x3) and skipped by the gate;
# * "noisy" epochs (the issue's two in twelve) run at x1.45;
# * the slowdown: the module sleeps SLEEP_S in every step (forward), +20 % of a step.

STEP_S = 0.100
SLEEP_S = 0.020
_SPLIT = {
    "forward": 0.85,
    "data_wait": 0.08,
    "metric": 0.04,
    "callbacks": 0.02,
    "unattributed": 0.01,
}


def noisy_epoch(
    epoch: int, factor: float, rng: np.random.Generator, sleep_s: float
) -> dict[str, Any]:
    batches = STEP_S * factor * rng.normal(1.0, 0.05, size=5)
    phases = {name: float(share * batches.sum()) for name, share in _SPLIT.items()}
    phases["forward"] += 5 * sleep_s
    times = (batches + sleep_s).tolist()
    wall = float(sum(times))
    record = epoch_record(epoch)  # the shape the callbacks write; its figures replaced below
    record.update(
        wall_s=wall,
        phases_s=phases,
        batch_times_s=times,
        batch_stats={"median": float(np.median(times)), "p95": float(np.quantile(times, 0.95))},
        samples_per_sec=record["samples"] / wall,
        worker_s={part: 5 * ms / 1e3 * factor for part, ms in (("fetch", 6.0), ("collate", 4.0))}
        | {"targets": 40 * 0.5 / 1e3 * factor},
    )
    return record


def noisy_run(
    root: Path, kept: int, seed: int, *, sleep_s: float = 0.0, noisy: tuple[int, ...] = ()
) -> Path:
    """A run folder of ``kept`` + 1 validation epochs (the first cold); epochs ``noisy`` x1.45."""
    rng = np.random.default_rng(seed)
    records = [noisy_epoch(0, 3.0, rng, sleep_s)]
    for epoch in range(1, kept + 1):
        factor = float(rng.normal(1.0, 0.02)) * (1.45 if epoch in noisy else 1.0)
        records.append(noisy_epoch(epoch, factor, rng, sleep_s))
    return make_run(root, records)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("kept", "noisy"), [(3, ()), (12, (4, 9))], ids=["3-epoch", "12-epoch"])
def test_more_epochs_never_blind_the_gate(
    tmp_path: Path, seed: int, kept: int, noisy: tuple[int, ...]
) -> None:
    """The issue's case: a steady +20 % (20 ms sleep per 100 ms step) passed against a 12-epoch
    baseline holding two +45 % epochs (thresholds widened to the max - min spread) while a
    3-epoch baseline caught it. Both must catch it, and an unchanged rerun must pass both."""
    base = load_source(noisy_run(tmp_path / "base", kept, seed, noisy=noisy))
    slow = load_source(
        noisy_run(tmp_path / "slow", kept, 100 + seed, sleep_s=SLEEP_S, noisy=(2, 7)[: len(noisy)])
    )
    again = load_source(
        noisy_run(tmp_path / "again", kept, 200 + seed, noisy=(3, 11)[: len(noisy)])
    )

    result = check_baseline(base, slow)
    rows = {r.figure: r for r in result.rows}
    assert result.verdict == "regression", rows["epoch_wall_s"]
    assert rows["epoch_wall_s"].status == "regression"
    assert rows["phase_forward_s"].status == "regression"
    assert rows["batch_time_s (distribution)"].status == "regression"

    rerun = check_baseline(base, again)
    assert rerun.verdict == "pass", [r for r in rerun.rows if r.status == "regression"]


# -- the table never contradicts itself ----------------------------------------------------------


def in_memory(figures: dict[str, Figure], epochs: int, batch_s: float = 0.1) -> Baseline:
    """A run-kind source with ``epochs`` kept epochs of 5 batches each (enough data to judge)."""
    return Baseline(
        source=Source("run", "memory"),
        stage="val",
        skip_epochs=1,
        epochs=list(range(1, epochs + 1)),
        workload={},
        machine={},
        figures=figures,
        batch_times_s=[batch_s] * (5 * epochs),
        batches=5 * epochs,
    )


def shown(row: GateRow) -> tuple[float, float, float]:
    """(change, band down, band up) as the table prints them."""
    cells = dict(zip(COLUMNS, row_cells(row), strict=True))
    change = float(cells["change"].split()[0])
    band = cells["band"].rsplit(" ", 1)[0]
    if band.startswith("+-"):
        up = float(band[2:])
        return change, -up, up
    down, up = (float(edge) for edge in band.split(" / "))
    return change, down, up


def assert_consistent(row: GateRow) -> None:
    """The status agrees with the change and band beside it, as printed."""
    if row.status in ("missing", "not judged") or row.change is None:
        return
    change, down, up = shown(row)
    outside = change > up or change < down
    if row.status == "no significant change":
        assert not outside, (row_cells(row), row)
    if row.status in ("regression", "improvement") or row.moved is not None:
        assert outside, (row_cells(row), row)
        worse = (change > up) == (row.better == "lower")
        assert (row.moved or row.status) == ("regression" if worse else "improvement")


def test_the_issue_rows_show_the_band_and_rule_they_were_judged_by() -> None:
    """The issue's two rows: worker_collate -27.5 % called an improvement beside a shown 33.1 %
    (the band is multiplicative: its lower edge is -24.9 %), and phase_data_wait -13.0 % called
    ok beside 12.8 % (held by the unshown 2 %-of-the-epoch floor)."""
    steady = (1.0, 1.0, 1.0)
    base = in_memory(
        {
            "epoch_wall_s": Figure("s", "lower", steady),
            "worker_collate_ms_per_batch": Figure("ms/batch", "lower", (20.0,) * 3),
            "phase_data_wait_s": Figure("s", "lower", (0.15,) * 3),
        },
        3,
    )
    cur = in_memory(
        {
            "epoch_wall_s": Figure("s", "lower", steady),
            "worker_collate_ms_per_batch": Figure("ms/batch", "lower", (20.0 * 0.725,) * 3),
            "phase_data_wait_s": Figure("s", "lower", (0.15 * 0.87,) * 3),
        },
        3,
    )
    rows = {r.figure: r for r in check_baseline(base, cur, 12.8).rows}
    loose = {r.figure: r for r in check_baseline(base, cur, 33.1).rows}

    collate = dict(zip(COLUMNS, row_cells(loose["worker_collate_ms_per_batch"]), strict=True))
    assert (collate["change"], collate["band"]) == ("-27.5 %", "-24.9 / +33.1 %")
    assert "outside the band" in collate["why"]
    # a part of the epoch's time (DataLoader work) moved while the epoch did not: the epoch
    # judges it (trainperf.analysis.gate)
    assert collate["status"] == "inconclusive (improvement?)"
    assert "epoch_wall_s +0.0 % is no significant change" in collate["why"]

    wait = dict(zip(COLUMNS, row_cells(rows["phase_data_wait_s"]), strict=True))
    # 2 % of a 1 s epoch = 0.02 s, wider than 12.8 % of 0.15 s: the band is in seconds
    assert wait["band"] == "+-0.020 s"
    assert wait["change"] == "-0.019 s"  # -0.0195 s: -13 % of 0.15 s
    assert wait["status"] == "no significant change"
    assert "phase floor: 2 % of the epoch wall = 0.02 s" in wait["why"]
    for row in (*rows.values(), *loose.values()):
        assert_consistent(row)


@pytest.mark.parametrize("seed", range(20))
def test_no_status_contradicts_its_row(seed: int) -> None:
    """Random figures (times, rates, fractions, small phases), epochs and tolerances: every
    printed row's status agrees with its printed change and band."""
    rng = np.random.default_rng(seed)
    n_base, n_cur = (int(n) for n in rng.integers(2, 9, size=2))

    def figures(n: int, shift: float) -> dict[str, Figure]:
        def series(center: float, noise: float) -> tuple[float, ...]:
            return tuple(float(v) for v in center * shift * rng.normal(1.0, noise, size=n))

        return {
            "epoch_wall_s": Figure("s", "lower", series(1.0, 0.05)),
            "phase_forward_s": Figure("s", "lower", series(0.6, float(rng.uniform(0, 0.3)))),
            "phase_metric_s": Figure("s", "lower", series(0.01, 0.2)),
            "phase_data_wait_s": Figure("s", "lower", series(0.15, 0.1)),
            "samples_per_sec": Figure("samples/s", "higher", series(40.0 / shift**2, 0.1)),
            "polygon_cache_hit_rate": Figure(
                "fraction", "higher", tuple(float(v) for v in rng.uniform(0.8, 1.0, size=n))
            ),
        }

    shift = float(rng.choice([0.7, 0.9, 1.0, 1.1, 1.13, 1.3]))
    tolerance = float(rng.choice([1.0, 5.0, 10.0, 12.8, 33.1]))
    result = check_baseline(
        in_memory(figures(n_base, 1.0), n_base), in_memory(figures(n_cur, shift), n_cur), tolerance
    )
    assert result.rows
    for row in result.rows:
        assert_consistent(row)


def test_the_verdict_is_plain_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``verdict: pass`` in the terminal, never Markdown asterisks (the report's paragraph is
    tested with the report)."""
    assert main(["check", str(BASELINE), str(BASELINE)]) == 0
    out = capsys.readouterr().out
    assert "verdict: pass" in out
    assert "*" not in out
