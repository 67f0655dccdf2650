"""The verdict's compute-bound finding says how far the run is from the machine's measured
limit, suggests compute changes only with headroom, and says so when there is none; the
throughput section shows GFLOP/s and MFU. Hand-made run folders (``perf/run.json`` carries the
``"flops"`` object ThroughputMonitorCallback writes)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from trainperf.present.report import build_report, print_summary, to_markdown
from trainperf.present.report.findings_section import headline
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import RecordWriter
from trainperf.records.try_record import TryRecord

from trainperf_testing.runs import CONFIG, epoch_record, make_run

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
    # how far from the limit is said once, in the title; the change says what it leaves
    assert "at 10 % of this host's measured peak" in f.title
    assert "measured peak" not in f.suggestion
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


TRAIN = {"data_wait": 0.2, "forward": 2.0, "backward": 3.0, "optimizer": 0.5}


def test_the_verdict_opens_with_one_sentence_and_says_each_change_once(tmp_path: Path) -> None:
    run = compute_bound_run(tmp_path, peak=1e11)
    writer = RecordWriter(EpochRecord.path(run))  # training epochs beside the validation ones
    for e in range(2):
        writer.write(msgspec.convert(epoch_record("train", e, TRAIN), EpochRecord))
    writer.close()
    report = build_report(run)
    assert {f.stage for f in report.findings if f.id == "compute_bound"} == {"train", "val"}
    sentence = headline(report)
    assert sentence.startswith("compute-bound: ")
    # the change and what it could recover follow; compute-bound's headroom is unknown
    assert "of this host's measured peak; change: " in sentence
    assert "what a change recovers here is unknown; no change measured yet" in sentence
    assert ". " not in sentence  # one sentence (a change's code may hold dots)
    assert sentence.endswith(".")
    md = to_markdown(report)
    # the second compute-bound finding points at the first instead of repeating its paragraph
    assert md.count("x headroom to that peak") == 1
    assert "   Change: as #1" in md
    # the winner of the run's `trainperf try` session is named in the sentence
    tried = RecordWriter(TryRecord.path(run))
    tried.write(
        TryRecord(
            session="2026-11-24T12:00:00Z",
            kind="candidate",
            override="model.channels_last=true",
            description="channels-last",
            family="memory_format",
            alters_computation=False,
            eval_time=False,
            status="recommended",
            pairs=4,
            median=1.25,
            low=1.09,
            high=1.51,
        )
    )
    tried.close()
    console = Console(width=80, record=True, file=io.StringIO())
    print_summary(build_report(run), console)
    text = console.export_text()
    # a change no finding proposed (the candidate is a knob here): named by its speed-up alone
    assert "; best measured change: model.channels_last=true 1.25x.\n" in text


def test_the_compute_advice_names_only_changes_the_run_does_not_already_make(
    tmp_path: Path,
) -> None:
    """The demo trains channels-last; its verdict told it to "try torch.compile and
    channels_last" all the same. The words now follow the candidates."""
    _, plain = finding(compute_bound_run(tmp_path / "plain", peak=1e11))
    assert "channels_last" in plain.suggestion
    assert "torch.compile" in plain.suggestion
    config = {**CONFIG, "model": {**CONFIG["model"], "channels_last": True, "compile": True}}
    info = {"cpu_count": 2, "torch_threads": 2}
    root = make_run(
        tmp_path / "on",
        [epoch_record("val", e, VAL) for e in range(2)],
        config=config,
        run_info=info,
    )
    _, on = finding(root)
    assert "channels_last" not in on.suggestion
    assert "torch.compile" not in on.suggestion
    assert "torch threads" not in on.suggestion  # compute already uses both cores
    assert "make it cheaper" in on.suggestion
    assert not {c.family for c in on.candidates} & {"channels_last", "compile", "threads"}
