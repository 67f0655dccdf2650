"""A report never contradicts itself (issue 38), on a plain Lightning script (no Hydra) with a
5 ms callback planted, the profiler on, and a ``trainperf try`` record written through the
records module (as ``try`` writes it, without running ``try``): the verdict agrees with the
"Measured changes" table, the profiler section with its own window list (also once the folder
is copied without its traces), and critical comes before warning in size order. The same checks
on the H200 folder and a demo-like run: ``tests/unit/perf_report/test_contradictions.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trainperf.present.report import build_report, to_markdown
from trainperf.present.report.findings_section import short_title
from trainperf.records.files import RecordWriter
from trainperf.records.try_record import TryRecord

from trainperf_testing.consistency import check_consistent
from trainperf_testing.paths import child_pythonpath

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainperf.lightning import (
        PerformanceProfilerCallback,
        ProfilerCallback,
        ResourceMonitorCallback,
        ThroughputMonitorCallback,
    )


    class SleepyLogger(L.Callback):
        def on_train_batch_end(self, *args):
            time.sleep(0.005)


    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(16, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.body(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)


    if __name__ == "__main__":
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(96, 16, generator=g), torch.randn(96, 1, generator=g))
        trainer = L.Trainer(
            max_epochs=2,
            default_root_dir=sys.argv[1],
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            callbacks=[
                SleepyLogger(),
                PerformanceProfilerCallback(),
                ThroughputMonitorCallback(flops=False),
                ResourceMonitorCallback(interval_s=0.2, print_summary=False),
                ProfilerCallback(),
            ],
        )
        trainer.fit(Net(), DataLoader(data, batch_size=4, num_workers=0))
    """
)


def _train(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    env = dict(os.environ, WANDB_MODE="offline")
    env["PYTHONPATH"] = child_pythonpath()
    proc = subprocess.run(
        [sys.executable, "train.py", "run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp_path / "run"


def _record(change: str, status: str, median: float, low: float, high: float) -> TryRecord:
    return TryRecord(
        session="2026-11-28T02:00:00+00:00",
        kind="candidate",
        override=change,
        description=change,
        family="test",
        alters_computation=False,
        eval_time=False,
        status=status,
        pairs=5,
        ratios=(median,) * 5,
        median=median,
        low=low,
        high=high,
    )


def test_a_tried_plain_script_report_agrees_with_itself(tmp_path: Path) -> None:
    run = _train(tmp_path)
    report = build_report(run)
    assert report.run.profiler_windows, "the profiler recorded no window"
    check_consistent(report)
    top = report.findings[0]
    assert top.id == "callback_overhead", top.title
    assert "SleepyLogger" in top.title
    # a try session as `trainperf try` writes it: one change inside the noise, one regression,
    # one small but real gain (a change no finding proposed, as --candidate measures)
    records = [
        _record("knob:cudnn.benchmark=true", "inconclusive", 1.01, 0.97, 1.05),
        _record("knob:torch.threads=1", "regression", 0.91, 0.88, 0.94),
        _record("knob:torch.matmul_precision=high", "recommended", 1.04, 1.031, 1.06),
    ]
    writer = RecordWriter(TryRecord.path(run))
    for r in records:
        writer.write(r)
    writer.close()
    tried = build_report(run)
    sentence = check_consistent(tried)
    # the largest cause still leads, and the best measured change is named apart
    assert tried.findings[0].id == "callback_overhead"
    assert sentence.startswith(short_title(top.title))
    assert "best measured change: knob:torch.matmul_precision=high 1.04x" in sentence
    assert "no change measured" not in to_markdown(tried).lower()
    # copied without its traces: the profiler section says the file is missing, not "rerun"
    copy = tmp_path / "copy"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("profiler_traces"))
    copied = build_report(copy)
    check_consistent(copied)
    assert "not in this folder" in to_markdown(copied)
