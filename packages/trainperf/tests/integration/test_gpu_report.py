"""Issue 31's acceptance on the first real GPU run (one H200, 16-mixed, AdamW not fused, NCHW):
``trainperf report`` of its run folder (``perf/*.jsonl`` and ``.hydra/``, no trace file; the
profiler window's summary in ``perf/profiler.jsonl``) must not call it compute-bound: it names
the GPU's idle share and the host's wait in ``optimizer_step``, and proposes bf16-mixed, a fused
AdamW and channels_last."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from trainperf.cli.main import main as perf_main
from trainperf.present.report import build_report, to_markdown
from trainperf.present.report.findings_section import headline


def _writable_copy(src: Path, dst: Path) -> Path:
    """``src`` copied without its read-only modes (never write into ../shared)."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    for folder, _, _ in os.walk(dst):
        os.chmod(folder, os.stat(folder).st_mode | stat.S_IWUSR)
    return dst


def test_h200_run_is_sync_bound_with_the_gpu_idle_not_compute_bound(
    h200_train_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # wide enough that the phase table's cells do not wrap, whatever COLUMNS the runner set
    monkeypatch.setenv("COLUMNS", "200")
    run = _writable_copy(h200_train_run, tmp_path / "train")
    assert perf_main(["report", str(run), "-o", str(tmp_path / "report.html")]) == 0
    printed = capsys.readouterr().out
    report = build_report(run)
    sentence = headline(report)
    assert not sentence.startswith("compute-bound")
    assert "compute_bound" not in [f.id for f in report.findings]
    # the GPU's idle share (profiler window: busy 59.7 %) and the wait in optimizer_step
    assert sentence.startswith("sync-bound: the GPU is idle 40 % of the training step")
    # the change and its bound follow; the wait's detail (optimizer_step, the GradScaler) is in
    # the findings, not the sentence
    assert "change: `trainer.precision=bf16-mixed`" in sentence
    assert len(sentence.split()) <= 45
    assert any("GradScaler" in f.title and "optimizer_step" in f.title for f in report.findings)
    assert " ".join(printed.split()).startswith("Where the time went")
    # epochs 1-3: epoch 0 is warm-up, left out of the shares
    assert "optimizer 38 % (<= 24 % waiting for the GPU)" in " ".join(printed.split())
    # the phase table says how much of the optimizer's share is waiting for the GPU
    assert "| optimizer | 11.251 s (37.9 %; <= 24 % waiting for the GPU) |" in to_markdown(report)
    first = report.findings[0]
    assert first.id == "gpu_underused"
    assert first.evidence["gpu_busy_pct"] == pytest.approx(59.7)
    assert first.recoverable_from == "bound"
    scaler = next(f for f in report.findings if f.id == "fp16_scaler")
    waiting = scaler.evidence["optimizer_waiting_ms_per_batch"]
    assert 20.0 < waiting < 30.0  # 38 ms on the host, 14 ms of GPU span per batch
    changes = {c.override for f in report.findings for c in f.candidates}
    assert {
        "trainer.precision=bf16-mixed",
        "+model.optimizer.fused=true",
        "model.channels_last=true",
    } <= changes
    # the window's summary counted 525 aten::item as syncs (the rule before issue 31)
    assert not any("175.3" in f.title for f in report.findings)
    recount = next(f for f in report.findings if f.id == "trace:host_sync")
    assert recount.evidence["blocking_calls"] == 1
    assert recount.recoverable_pct == 0.0
