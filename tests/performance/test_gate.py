"""The regression gate on the committed baseline (made by ``ocr-perf baseline`` from a real
``synthetic_debug`` run, see ``benchmarks/baseline_doc.py``): it checks clean against itself,
fails on planted regressions and refuses bad input. No wall clock is measured here."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ocr.perf.baseline import BASELINE_SCHEMA, check_baseline, load_source
from ocr.perf.cli import main

BASELINE = Path(__file__).parent / "baselines" / "synthetic_debug_val.json"


@pytest.fixture
def baseline() -> dict[str, Any]:
    return load_source(BASELINE)


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def scaled(doc: dict[str, Any], factor: float, prefix: str) -> dict[str, Any]:
    """A copy with every figure named ``prefix...`` (and the batch times) times ``factor``."""
    out = copy.deepcopy(doc)
    for name, figure in out["figures"].items():
        if name.startswith(prefix):
            figure["values"] = [v * factor for v in figure["values"]]
            figure["median"] *= factor
    out["batch_times_s"] = [t * factor for t in out["batch_times_s"]]
    return out


def test_committed_baseline_comes_from_a_real_run(baseline: dict[str, Any]) -> None:
    assert baseline["schema"] == BASELINE_SCHEMA
    assert (baseline["source"]["kind"], baseline["stage"], baseline["skip_epochs"]) == (
        "run",
        "val",
        1,
    )
    # synthetic_debug's validation split: 40 receipts, batches of 8, two workers.
    assert baseline["workload"]["samples"] == 40
    assert baseline["workload"]["num_batches"] == 5
    assert baseline["workload"]["num_workers"] == 2
    figures = baseline["figures"]
    for name in (
        "epoch_wall_s",
        "phase_forward_s",
        "phase_data_wait_s",
        "batch_median_s",
        "samples_per_sec",
        "worker_collate_ms_per_batch",
        "targets_ms_per_image",
    ):
        assert figures[name]["median"] > 0, name
    # Deterministic: from the second validation epoch on every lookup hits.
    assert figures["polygon_cache_hit_rate"]["values"] == [1.0] * len(baseline["epochs"])
    assert baseline["counts"].get("polygon_cache_misses", 0) == 0
    assert len(baseline["batch_times_s"]) == 5 * len(baseline["epochs"])


def test_baseline_passes_against_itself(tmp_path: Path) -> None:
    out = tmp_path / "self.json"
    assert main(["check", str(BASELINE), str(BASELINE), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["verdict"] == "pass"
    assert all(row["status"] == "ok" for row in result["rows"])


def test_doubled_phase_times_fail_the_gate(
    baseline: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = scaled(scaled(baseline, 2.0, "phase_"), 2.0, "epoch_wall_s")
    # Beyond any epoch-to-epoch spread the committed baseline could have: a planted 10x.
    slow = scaled(slow, 5.0, "phase_forward_s")
    path = write(tmp_path, "slow.json", slow)
    assert main(["check", str(BASELINE), str(path)]) == 1
    out = capsys.readouterr().out
    assert "regression" in out
    assert "phase_forward_s" in out
    rows = {r["figure"]: r for r in check_baseline(baseline, slow)["rows"]}
    assert rows["phase_forward_s"]["status"] == "regression"
    assert rows["batch_time_s (distribution)"]["status"] == "regression"
    # The same change the other way round is an improvement: the gate passes.
    assert check_baseline(slow, baseline)["verdict"] == "pass"


def test_cache_hit_rate_drop_fails_the_gate(baseline: dict[str, Any], tmp_path: Path) -> None:
    cold = copy.deepcopy(baseline)
    figure = cold["figures"]["polygon_cache_hit_rate"]
    figure["values"] = [0.5] * len(figure["values"])
    figure["median"] = 0.5
    assert main(["check", str(BASELINE), str(write(tmp_path, "cold.json", cold))]) == 1


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
    bench = {
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
    assert load_source(out)["figures"]["persistent.collate_speedup_x"]["better"] == "higher"
    assert main(["check", str(out), str(source)]) == 0
    bench["figures"]["persistent.collate_speedup_x"] = 2.0
    assert main(["check", str(out), str(write(tmp_path, "worse.json", bench))]) == 1
