"""The epoch gather across DDP ranks (2 gloo ranks on CPU, one short run shared by the tests).

Rank 1 has one callback more than rank 0 (an image logger built on one rank only, as users do):
the gather must have one shape on every rank whatever each rank's callbacks, so the run finishes
and the extra callback is named for rank 1. The same run checks that every place that states a
samples/s (the run files, the loggers, ``trainperf report``'s summary, verdict and per-epoch
table, and the gate) states the one rate: samples over all ranks / the epoch's wall time.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from trainperf.records.epochs import EpochRecord

from trainperf_testing.paths import child_pythonpath
from trainperf_testing.run_lines import read_dicts

pytestmark = pytest.mark.slow

# subprocesses import the trainperf under test, not an editable install of another checkout
_PYTHONPATH = child_pythonpath()

SCRIPT = """
import os, sys, time
import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from trainperf.lightning import PerformanceProfilerCallback, ThroughputMonitorCallback


class ImageLogger(L.Callback):
    # Built on rank 1 only.
    def on_train_batch_end(self, trainer, *args):
        time.sleep(0.025)


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(0.06)  # the forward dominates: the verdict calls the stage compute-bound
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # Lightning starts rank 1 by running this script again with LOCAL_RANK=1.
    extra = [ImageLogger()] if os.environ.get("LOCAL_RANK") == "1" else []
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, num_sanity_val_steps=0,
        logger=CSVLogger(sys.argv[1], name="csv", version=""),
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        default_root_dir=sys.argv[1],
        callbacks=[PerformanceProfilerCallback(), ThroughputMonitorCallback(), *extra],
    )
    train = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    val = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    trainer.fit(Module(), DataLoader(train, batch_size=4), DataLoader(val, batch_size=4))
    print(f"rank {trainer.global_rank} finished at epoch {trainer.current_epoch}")
    # Leave without the interpreter's finalization: tearing down the DDP / Gloo objects there
    # aborted 1 launch in ~10 after a finished run ('terminate called without an active
    # exception', exit -6), destroy_process_group() or not. Output is flushed first.
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
"""
TRAIN_SAMPLES, VAL_SAMPLES = 64, 16  # over both ranks, per epoch


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=_PYTHONPATH, WANDB_MODE="offline")


def _perf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainperf.cli.main", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=180,
    )


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("ddp")
    script = run / "ddp_run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run(
        [sys.executable, str(script), str(run)],
        cwd=run,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,  # a rank left blocked in a gather would hang here
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "rank 0 finished at epoch 2" in proc.stdout
    assert "rank 1 finished at epoch 2" in proc.stdout
    assert "recording failed" not in proc.stderr, proc.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def ddp_report(ddp_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """``trainperf report`` of the run: its summary (stdout) and its Markdown."""
    out = tmp_path_factory.mktemp("report")
    markdown = out / "report.md"
    report = _perf("report", str(ddp_run), "-o", str(out / "r.html"), "--markdown", str(markdown))
    assert report.returncode == 0, report.stderr[-3000:]
    return report.stdout, markdown.read_text()


def _epochs(run: Path) -> list[dict[str, Any]]:
    return read_dicts(run / "perf" / "epochs.jsonl", EpochRecord)


def test_a_callback_on_one_rank_only_keeps_the_gather_in_shape(
    ddp_run: Path, ddp_report: tuple[str, str]
) -> None:
    """Before: gloo aborted the run (``Received data size doesn't match expected size``)."""
    records = _epochs(ddp_run)
    assert [(r["stage"], r["epoch"]) for r in records] == [
        ("val", 0),
        ("train", 0),
        ("val", 1),
        ("train", 1),
    ]
    for record in records:
        assert record["world_size"] == 2
        by_rank = record["callbacks_s_by_rank"]
        assert len(by_rank) == 2
        assert "ImageLogger" not in by_rank[0]
        if record["stage"] == "train":
            # 8 batches x 25 ms on rank 1; rank 0 waited for it.
            assert by_rank[1]["ImageLogger"] >= 8 * 0.025
            straggler = record["straggler"]
            assert straggler is not None, record["spreads"]
            assert straggler["rank"] == 1
            assert straggler["cause"] == "callbacks: ImageLogger"
    # The report's per-rank callback table names it for rank 1 only.
    assert re.search(r"^\| ImageLogger \| - \| \d+\.\d{3} \|$", ddp_report[1], re.M)
    # The ranks side by side: rank 1 has the longest callbacks (the run report read only the
    # straggler before; the per-rank min / median / max of epochs.jsonl were never shown).
    last = next(r for r in reversed(records) if r["stage"] == "train")
    spread = last["spreads"]["callbacks_time"]
    row = (
        f"| training | callbacks | {spread['min']:,.3f} | {spread['median']:,.3f} | "
        f"{spread['max']:,.3f} | 1 |"
    )
    assert row in ddp_report[1]


def test_one_samples_per_second_everywhere(
    ddp_run: Path, ddp_report: tuple[str, str], tmp_path: Path
) -> None:
    """Samples over all ranks / wall time, in the run files, the loggers, the report's summary,
    verdict and per-epoch table, and the gate. Before: the report divided one rank's samples by
    the wall time (half the rate) and printed one rank's samples beside the global rate."""
    records = _epochs(ddp_run)
    expected = {"train": TRAIN_SAMPLES, "val": VAL_SAMPLES}
    for r in records:
        assert r["samples"] == expected[r["stage"]] // 2  # this rank's (rank 0)
        assert r["global_samples"] == expected[r["stage"]]
        assert r["samples_per_sec"] == pytest.approx(r["global_samples"] / r["global_wall_s"])
    train = [r for r in records if r["stage"] == "train"]

    # The loggers: the same rate per epoch.
    with open(ddp_run / "csv" / "metrics.csv") as fh:
        rows = [row for row in csv.DictReader(fh) if row.get("throughput/train_data_wait_share")]
    logged = [float(row["throughput/train_samples_per_sec"]) for row in rows]
    assert logged == pytest.approx([r["samples_per_sec"] for r in train])

    # The report: summary (stdout), verdict and per-epoch table (Markdown).
    stdout, text = ddp_report
    steady = train[1:] or train  # the stage's figures leave its first (warm-up) epoch out
    stage_rate = sum(r["global_samples"] for r in steady) / sum(r["global_wall_s"] for r in steady)
    summary = next(line for line in stdout.splitlines() if line.startswith("│ training"))
    assert summary.rstrip(" │").endswith(f"{stage_rate:,.1f}"), summary
    assert f"{stage_rate:.1f} samples/s)" in text  # the compute-bound finding
    for r in train:
        row = f"| training | {r['epoch']} | {r['global_wall_s']:,.2f} | {TRAIN_SAMPLES} | "
        row += f"{r['samples_per_sec']:,.2f} |"
        assert row in text

    # The gate: the samples/s it compares is the same median rate.
    baseline = tmp_path / "baseline.json"
    made = _perf(
        "baseline", str(ddp_run), "-o", str(baseline), "--stage", "train", "--skip-epochs", "0"
    )
    assert made.returncode == 0, made.stderr[-3000:]
    figure = json.loads(baseline.read_text())["figures"]["samples_per_sec"]
    rates = sorted(r["samples_per_sec"] for r in train)
    assert figure["median"] == pytest.approx(sum(rates) / 2)
    verdict = tmp_path / "check.json"
    checked = _perf(
        "check",
        str(baseline),
        str(ddp_run),
        "--stage",
        "train",
        "--skip-epochs",
        "0",
        "--json",
        str(verdict),
    )
    assert checked.returncode in (0, 3), checked.stdout + checked.stderr  # pass / too little data
    rows = json.loads(verdict.read_text())["rows"]
    gated = next(row for row in rows if row["figure"] == "samples_per_sec")
    assert gated["current"] == pytest.approx(sum(rates) / 2)
