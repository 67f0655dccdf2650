"""Issue 31's CPU acceptance: a plain script (no Hydra) whose Dataset does ~10 ms of numpy work
per sample in the training process (``num_workers=0``), with the monitoring callbacks attached as
a plain script attaches them. The verdict's sentence names input loading and ``num_workers``
(it once opened with "compute-bound"), and no finding of the same report says that more workers
cannot help (a CPU-saturation finding once did, beside the one that proposed them)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trainperf.present.report import build_report
from trainperf.present.report.findings_section import headline

from trainperf_testing.paths import child_pythonpath

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import lightning as L
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    from trainperf.lightning import (
        PerformanceProfilerCallback,
        ResourceMonitorCallback,
        ThroughputMonitorCallback,
    )


    class Decoded(Dataset):
        def __len__(self):
            return 48

        def __getitem__(self, i):
            rng = np.random.default_rng(i)
            image = rng.random((3, 32, 32), dtype=np.float32)
            start = time.perf_counter()
            while time.perf_counter() - start < 0.010:  # ~10 ms of numpy work per sample
                image = np.sqrt(image * image + 1e-3).astype(np.float32)
            return torch.from_numpy(image), torch.tensor([float(i % 2)])


    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 1),
            )

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.body(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)


    if __name__ == "__main__":
        trainer = L.Trainer(
            max_epochs=2,
            default_root_dir=sys.argv[1],
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            callbacks=[
                PerformanceProfilerCallback(),
                ThroughputMonitorCallback(flops=False),
                ResourceMonitorCallback(interval_s=0.2, print_summary=False),
            ],
        )
        trainer.fit(Net(), DataLoader(Decoded(), batch_size=4, num_workers=0))
    """
)


def test_plain_cpu_script_verdict_names_input_loading_and_num_workers(tmp_path: Path) -> None:
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
    report = build_report(tmp_path / "run")
    sentence = headline(report)
    assert sentence.startswith("input-bound: "), sentence
    assert "data wait" in sentence
    assert "num_workers" in sentence
    first = report.findings[0]
    assert first.id == "input_bound"
    assert first.stage == "train"
    assert any(c.family == "workers" for c in first.candidates)
    for f in report.findings:
        for text in (f.title, f.suggestion):
            assert "cannot add speed" not in text, f.id
            assert "will not help" not in text, f.id
    compute = [f for f in report.findings if f.id == "compute_bound"]
    assert all(f.recoverable_from == "unknown" for f in compute)
