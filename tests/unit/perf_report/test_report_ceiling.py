"""The verdict's compute-bound finding says how far the run is from the machine's measured
limit, suggests compute changes only with headroom, and says so when there is none; the
throughput section shows GFLOP/s and MFU. Hand-made run folders (``perf/run.json`` carries the
``"flops"`` object ThroughputMonitorCallback writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ocr.perf.report import build_report, to_markdown
from tests.unit.perf_report.runs import CONFIG, epoch_record, make_run

# 10 batches of 4 per epoch; forward dominates (compute-bound).
VAL = {"data_wait": 0.2, "forward": 4.0, "metric": 0.1}


def compute_bound_run(root: Path, peak: float | None) -> Path:
    info: dict[str, Any] = {"cpu_count": 2}
    if peak is not None:
        info["flops"] = {
            "per_sample": {"val": 1e9, "test": 1e9, "train": 3e9},
            "example_input_shapes": [[1, 3, 384, 384]],
            "peak_flops_per_sec": peak,
            "spec_peak_flops_per_sec": None,
            "peak": {"device": "cpu", "dtype": "float32", "threads": 2},
        }
    epochs = [epoch_record("val", e, VAL) for e in range(2)]
    return make_run(root, epochs, config=CONFIG, run_info=info)


def finding(root: Path) -> Any:
    report = build_report(root)
    return report, next(f for f in report.findings if f.id == "compute_bound")


def test_headroom_keeps_the_compute_advice_and_says_how_far(tmp_path: Path) -> None:
    # 40 samples x 1 GFLOP in 4 s of forward: 10 GFLOP/s against a 100 GFLOP/s peak.
    report, f = finding(compute_bound_run(tmp_path, peak=1e11))
    assert f.evidence["compute_mfu_pct"] == 10.0
    assert f.evidence["peak_gflops_per_sec"] == 100.0
    assert "how far from the machine's limit" in f.suggestion
    assert "10 % of this host's measured peak" in f.suggestion
    assert "10.0x headroom" in f.suggestion
    assert "torch.compile" in f.suggestion  # compute changes have room to pay
    md = to_markdown(report)
    assert "Machine limit: measured peak 100 GFLOP/s (cpu float32, 2 threads" in md
    assert "| GFLOP/s | MFU % |" in md


def test_no_headroom_says_so_instead_of_compute_advice(tmp_path: Path) -> None:
    # 10 GFLOP/s achieved against a 15 GFLOP/s peak: 67 % of the limit.
    _, f = finding(compute_bound_run(tmp_path, peak=1.5e10))
    assert f.evidence["compute_mfu_pct"] == 66.7
    assert "near the machine's limit" in f.title
    assert "no headroom" in f.suggestion
    assert "torch.compile and channels_last" not in f.suggestion
    assert f.threshold["compute_headroom_mfu_pct"] == 50.0


def test_without_flops_the_finding_is_unchanged(tmp_path: Path) -> None:
    report, f = finding(compute_bound_run(tmp_path, peak=None))
    assert "compute_mfu_pct" not in f.evidence
    assert "machine's limit" not in f.suggestion
    md = to_markdown(report)
    assert "Machine limit" not in md
    assert "MFU %" not in md


def test_a_peak_measured_on_a_busy_host_is_flagged(tmp_path: Path) -> None:
    root = compute_bound_run(tmp_path, peak=1e11)
    info = json.loads((root / "perf" / "run.json").read_text())
    info["flops"]["peak"]["contended"] = True
    (root / "perf" / "run.json").write_text(json.dumps(info))
    md = to_markdown(build_report(root))
    assert "measured while the host was busy, so possibly low" in md
