"""SIGTERM and SIGINT stop a training run as an interruption: at the end of the current batch,
with ``last.ckpt`` written, every rank ``interrupted`` in ``perf/lifecycle.jsonl`` (with epoch
and batch), exit 128 + signal, ``trainperf watch`` saying where and how to resume, and a resumed
run that completes the records.

The run is a script written here: its step at epoch 1, batch 1 writes a marker file and waits
(up to a minute) until the signal has arrived, so the signal lands mid-epoch at a known batch
whatever the machine's load; nothing here measures a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records
from trainperf.records.monitoring import LifecycleRecord

from trainperf_testing.paths import child_pythonpath

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path

    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lightning.pytorch.callbacks import ModelCheckpoint
    from trainperf.lightning import InterruptCheckpoint, PerformanceProfilerCallback

    ROOT, CKPT = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else None)
    DEVICES = int(os.environ.get("TEST_DEVICES", "1"))
    STALL_BATCH = int(os.environ.get("TEST_STALL_BATCH", "1"))


    class Stalls(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)
            self.signalled = False

        def on_train_start(self):
            previous = signal.getsignal(signal.SIGINT)  # InterruptCheckpoint's

            def note(signum, frame):
                self.signalled = True
                previous(signum, frame)

            signal.signal(signal.SIGINT, note)

        def training_step(self, batch, batch_idx):
            if CKPT is None and self.current_epoch == 1 and batch_idx == STALL_BATCH:
                (ROOT / f"stalled{self.global_rank}").touch()
                for _ in range(1200):  # until the signal has arrived
                    if self.trainer.received_sigterm or self.signalled:
                        break
                    time.sleep(0.05)
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)


    if __name__ == "__main__":
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(8 * DEVICES, 4, generator=g), torch.randn(8 * DEVICES, 1))
        trainer = L.Trainer(
            default_root_dir=ROOT,
            accelerator="cpu",
            devices=DEVICES,
            strategy="ddp" if DEVICES > 1 else "auto",
            max_epochs=3,
            logger=False,
            enable_model_summary=False,
            enable_progress_bar=False,
            num_sanity_val_steps=0,
            callbacks=[
                PerformanceProfilerCallback(),
                # TEST_PLAIN: a plain script's own ModelCheckpoint (Lightning's naming)
                ModelCheckpoint(dirpath=ROOT / "checkpoints", save_on_exception=True)
                if os.environ.get("TEST_PLAIN")
                else InterruptCheckpoint(dirpath=ROOT / "checkpoints", filename="last"),
            ],
        )
        trainer.fit(Stalls(), DataLoader(data, 2), ckpt_path=CKPT)
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    """
)


def _env(devices: int, stall_batch: int = 1, plain: bool = False) -> dict[str, str]:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1", TEST_DEVICES=str(devices))
    env["TEST_STALL_BATCH"] = str(stall_batch)
    env.pop("TEST_PLAIN", None)
    if plain:
        env["TEST_PLAIN"] = "1"
    env["PYTHONPATH"] = child_pythonpath()
    return env


def _interrupt(
    tmp_path: Path,
    signum: signal.Signals,
    devices: int = 1,
    stall_batch: int = 1,
    plain: bool = False,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run the script until every rank stalls in epoch 1, send ``signum`` to the launching
    process, and wait for it to end."""
    script, run = tmp_path / "stalls.py", tmp_path / "run"
    script.write_text(SCRIPT)
    run.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(run)],
        cwd=tmp_path,
        env=_env(devices, stall_batch, plain),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        markers = [run / f"stalled{rank}" for rank in range(devices)]
        deadline = time.monotonic() + 240  # generous: the machine is shared
        while not all(m.exists() for m in markers) and proc.poll() is None:
            assert time.monotonic() < deadline, "the run never reached epoch 1"
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        # the records show the run in epoch 1: epoch 0 is written, nothing later
        assert [r.epoch for r in read_records(EpochRecord.path(run), EpochRecord)] == [0]
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return run, subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _watch(run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainperf.cli.main", "watch", str(run), "--stale-after", "5"],
        env=_env(1),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ends(run: Path) -> list[LifecycleRecord]:
    return [r for r in read_records(LifecycleRecord.path(run), LifecycleRecord) if r.event == "end"]


def test_sigterm_interrupts_and_the_resumed_run_completes_the_records(tmp_path: Path) -> None:
    run, proc = _interrupt(tmp_path, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout[-3000:]
    [end] = _ends(run)
    assert (end.status, end.signal, end.epoch, end.batch) == ("interrupted", "SIGTERM", 1, 2)
    ckpt = run / "checkpoints" / "last.ckpt"
    assert ckpt.is_file()

    watched = _watch(run)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    lines = watched.stdout.splitlines()
    assert "watch: interrupted (fit) at epoch 1, batch 2 (SIGTERM)" in lines, watched.stdout
    [resume] = [line for line in lines if line.strip().startswith("resume: ")]
    assert str(tmp_path / "stalls.py") in resume
    assert f"ckpt_path={str(ckpt)!r}" in resume
    reported = subprocess.run(
        [sys.executable, "-m", "trainperf.cli.main", "report", str(run)],
        env=_env(1),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"The run was interrupted at epoch 1, batch 2 (SIGTERM); {resume.strip()}" in (
        reported.stdout
    ), reported.stdout + reported.stderr

    resumed = subprocess.run(
        [sys.executable, str(tmp_path / "stalls.py"), str(run), str(ckpt)],
        cwd=tmp_path,
        env=_env(1),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    epochs = read_records(EpochRecord.path(run), EpochRecord)
    assert [(r.stage, r.epoch) for r in epochs] == [("train", 0), ("train", 1), ("train", 2)]
    assert [r.num_batches for r in epochs] == [4, 2, 4]  # epoch 1: the batches after the stop
    events = read_records(LifecycleRecord.path(run), LifecycleRecord)
    assert [(r.event, r.status) for r in events] == [
        ("start", None),
        ("end", "interrupted"),
        ("start", None),
        ("end", "finished"),
    ]


def test_sigint_stops_at_the_batch_end_with_exit_130(tmp_path: Path) -> None:
    run, proc = _interrupt(tmp_path, signal.SIGINT)
    assert proc.returncode == 128 + signal.SIGINT, proc.stdout[-3000:]
    assert "stopping after the current batch" in proc.stdout
    [end] = _ends(run)
    assert (end.status, end.signal, end.epoch, end.batch) == ("interrupted", "SIGINT", 1, 2)
    assert (run / "checkpoints" / "last.ckpt").is_file()


def test_sigterm_interrupts_every_ddp_rank(tmp_path: Path) -> None:
    run, proc = _interrupt(tmp_path, signal.SIGTERM, devices=2)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout[-3000:]
    ends = {r.rank: r for r in _ends(run)}
    assert sorted(ends) == [0, 1]
    for end in ends.values():
        assert (end.status, end.signal, end.epoch, end.batch) == ("interrupted", "SIGTERM", 1, 2)
    assert (run / "checkpoints" / "last.ckpt").is_file()
    watched = _watch(run)
    assert "watch: interrupted (fit) at epoch 1, batch 2 (SIGTERM)" in watched.stdout


def test_sigterm_in_the_last_batch_keeps_the_ended_epochs_record(tmp_path: Path) -> None:
    # the stop comes after epoch 1's last batch and end hooks: it is between epochs 1 and 2
    run, proc = _interrupt(tmp_path, signal.SIGTERM, stall_batch=3)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout[-3000:]
    [end] = _ends(run)
    assert (end.status, end.signal, end.epoch, end.batch) == ("interrupted", "SIGTERM", 2, 0)
    epochs = read_records(EpochRecord.path(run), EpochRecord)
    assert [(r.epoch, r.num_batches) for r in epochs] == [(0, 4), (1, 4)]


def test_sigterm_on_a_plain_script_says_so_and_watch_names_its_checkpoint(tmp_path: Path) -> None:
    """A plain script's own ModelCheckpoint (save_on_exception, Lightning's file names, no
    last.ckpt): the log says what happened in our words, and the resume advice names the
    checkpoint the stop saved."""
    run, proc = _interrupt(tmp_path, signal.SIGTERM, plain=True)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout[-3000:]
    ckpt = run / "checkpoints" / "epoch=1-step=6.ckpt"  # 4 batches of epoch 0, 2 of epoch 1
    assert ckpt.is_file(), sorted(p.name for p in (run / "checkpoints").iterdir())
    assert not (run / "checkpoints" / "last.ckpt").exists()
    assert "SIGTERM received at epoch 1, after batch 2: the run stops there (exit code 143)" in (
        proc.stdout
    ), proc.stdout[-3000:]
    assert f"SIGTERM: saved checkpoint {ckpt}" in proc.stdout, proc.stdout[-3000:]
    assert "was raised with message" not in proc.stdout
    watched = _watch(run)
    [resume] = [line for line in watched.stdout.splitlines() if "resume: " in line]
    assert f"ckpt_path={str(ckpt)!r}" in resume, watched.stdout
    assert "no last.ckpt" not in watched.stdout
