"""``trainperf try`` on a plain Lightning script (no Hydra, no config): a LightningModule written
here, ``Trainer(callbacks=[PerformanceProfilerCallback(), ThroughputMonitorCallback()])``, a
dataset sleeping in ``__getitem__`` with ``num_workers=0``. The findings' changes become runtime
knobs; more workers are recommended (interval above 1.03) with the ``DataLoader(...)`` change to
make, a no-op knob (cuDNN's autotuner on CPU) is neither recommended nor a regression, and a
knob the run cannot take (16-mixed on CPU) is "not applicable" with Lightning's reason.

And advice that reads the run, not a config: a classifier whose two persistent workers wait 5 ms
per sample (I/O, not CPU) on this 2-core machine is told to add workers, not that "more workers
will not help", and is not told to set persistent_workers, which it has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trainperf.analysis.trials import latest_session
from trainperf.cli.main import main as perf_main

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import lightning as L
    import torch
    from torch.utils.data import DataLoader, Dataset

    from trainperf.lightning import (
        PerformanceProfilerCallback,
        ThroughputMonitorCallback,
    )


    class Sleepy(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.03)  # slow decoding, in the training process without workers
            return torch.full((8,), float(i)), torch.ones(1)


    class Regressor(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)


    if __name__ == "__main__":
        trainer = L.Trainer(
            max_epochs=1,
            default_root_dir=sys.argv[1],
            callbacks=[PerformanceProfilerCallback(), ThroughputMonitorCallback(flops=False)],
            accelerator="cpu",
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Regressor(), DataLoader(Sleepy(), batch_size=4, num_workers=0))
    """
)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    app = tmp_path_factory.mktemp("plain")
    (app / "train.py").write_text(SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "train.py", "run"],
        cwd=app,
        env=dict(os.environ, WANDB_MODE="offline"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return app / "run"


def test_the_findings_changes_are_knobs_for_a_plain_script(plain_run: Path) -> None:
    from trainperf.cli.trial.candidate_options import candidates_from_findings
    from trainperf.present.report import build_report

    info = json.loads((plain_run / "perf" / "run.json").read_text())
    assert info.get("hydra") is None
    candidates = candidates_from_findings(build_report(plain_run).findings)
    workers = [c for c in candidates if c.family == "workers"]
    assert workers, [c.description for c in candidates]
    assert workers[0].override is None
    assert workers[0].knob is not None
    assert workers[0].knob.name == "dataloader.num_workers"
    assert int(workers[0].knob.value) >= 2


def test_try_measures_knobs_on_a_plain_script(
    plain_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {p.relative_to(plain_run) for p in plain_run.rglob("*")}
    code = perf_main(
        [
            "try",
            str(plain_run),
            "--no-findings",
            "--candidate",
            "knob:dataloader.num_workers=2",
            "--candidate",
            "knob:cudnn.benchmark=true",
            "--candidate",
            "knob:trainer.precision=16-mixed",
            "--pairs",
            "3",
            "--warmup",
            "2",
            "--batches",
            "6",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    records = {r.override: r for r in latest_session(plain_run)}
    workers = records["knob:dataloader.num_workers=2"]
    assert workers.status == "recommended", out
    assert workers.low is not None
    assert workers.low > 1.03
    assert workers.apply == "DataLoader(..., num_workers=2)  # the training loader"
    assert "In your code: DataLoader(..., num_workers=2)  # the training loader" in out
    noop = records["knob:cudnn.benchmark=true"]  # changes nothing on the CPU: a real A/A
    assert noop.status in ("no significant change", "inconclusive"), out
    fp16 = records["knob:trainer.precision=16-mixed"]
    assert fp16.status == "not applicable"
    assert "16-mixed on CPU" in fp16.note
    assert "Not applicable: knob:trainer.precision=16-mixed" in out  # said in the terminal
    # the run's own files are untouched: only perf/try.jsonl is new
    after = {p.relative_to(plain_run) for p in plain_run.rglob("*")}
    assert after - before == {Path("perf/try.jsonl")}


WAITING = textwrap.dedent(
    """
    import sys
    import time

    import lightning as L
    import torch
    from torch.utils.data import DataLoader, Dataset

    from trainperf.lightning import (
        PerformanceProfilerCallback,
        ResourceMonitorCallback,
        ThroughputMonitorCallback,
    )


    class Waiting(Dataset):
        def __len__(self):
            return 768

        def __getitem__(self, i):
            time.sleep(0.005)  # 5 ms of waiting (I/O) per sample, no CPU
            return torch.randn(16), i % 4


    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)


    if __name__ == "__main__":
        loader = DataLoader(Waiting(), batch_size=64, num_workers=2, persistent_workers=True)
        trainer = L.Trainer(
            max_epochs=1,
            default_root_dir=sys.argv[1],
            callbacks=[
                PerformanceProfilerCallback(),
                ThroughputMonitorCallback(flops=False),
                ResourceMonitorCallback(interval_s=0.2, worker_refresh_s=0.5, print_summary=False),
            ],
            accelerator="cpu",
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=False,
        )
        trainer.fit(Classifier(), loader)
    """
)


def test_waiting_workers_are_not_cores_in_use(tmp_path: Path) -> None:
    from trainperf.present.report import build_report

    (tmp_path / "train.py").write_text(WAITING, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "train.py", "run"],
        cwd=tmp_path,
        env=dict(os.environ, WANDB_MODE="offline"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    findings = build_report(tmp_path / "run").findings
    (finding,) = [f for f in findings if f.id == "input_bound"]
    assert "will not help" not in finding.suggestion
    assert "raise the DataLoader's num_workers (now 2)" in finding.suggestion
    assert "wait" in finding.suggestion  # why: the workers' CPU share
    workers = [c for c in finding.candidates if c.family == "workers"]
    assert workers
    assert workers[0].knob is not None
    assert int(workers[0].knob.value) > 2
    # persistent_workers=True is set in the live DataLoader: never proposed
    every = [c for f in findings for c in f.candidates]
    assert not [c for c in every if c.family == "persistent_workers"]
    assert not [f for f in findings if "persistent_workers" in f.suggestion]
