"""A real A/A for ``trainperf try``: a tiny plain Lightning script (an MLP on in-memory tensors,
on the CPU, no app code) recorded once, then ``trainperf try`` with a change that changes
nothing (the DataLoader's ``num_workers`` set to the value it has). Used once by
``tests/integration/test_try_aa.py`` and repeatedly by ``benchmarks/try_calibration.py --real``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from trainperf.analysis.trials import latest_session
from trainperf.cli.main import main as perf_main
from trainperf.records.try_record import TryRecord

#: The change that changes nothing: the script's loader already has ``num_workers=0``.
SAME_VALUE = "knob:dataloader.num_workers=0"

SCRIPT = textwrap.dedent(
    """
    import sys

    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainperf.lightning import PerformanceProfilerCallback, ThroughputMonitorCallback


    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
            )

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)


    if __name__ == "__main__":
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(1280, 64), torch.randint(0, 10, (1280,)))
        trainer = L.Trainer(
            max_epochs=1,
            default_root_dir=sys.argv[1],
            callbacks=[PerformanceProfilerCallback(), ThroughputMonitorCallback(flops=False)],
            accelerator="cpu",
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
        )
        trainer.fit(Tiny(), DataLoader(data, batch_size=32, num_workers=0))
    """
)


def record_run(folder: Path) -> Path:
    """Write the script into ``folder``, run it once; its run folder."""
    (folder / "train.py").write_text(SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "train.py", "run"],
        cwd=folder,
        env=dict(os.environ, WANDB_MODE="offline"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the tiny script failed: {proc.stderr[-4000:]}")
    return folder / "run"


def aa_session(run: Path, pairs: int = 3, budget: str = "5m") -> TryRecord:
    """One ``trainperf try`` session of :data:`SAME_VALUE` on ``run``: its record."""
    code = perf_main(
        [
            "try",
            str(run),
            "--no-findings",
            "--candidate",
            SAME_VALUE,
            "--pairs",
            str(pairs),
            "--budget",
            budget,
            "--warmup",
            "3",
            "--batches",
            "20",
        ]
    )
    if code != 0:
        raise RuntimeError(f"trainperf try exited {code}")
    (record,) = latest_session(run)
    return record
