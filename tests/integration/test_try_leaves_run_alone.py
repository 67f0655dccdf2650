"""``trainperf try`` never touches the run it measures (issue 38, point 1): after a session on a
plain Lightning script written here (a callback sleeping 80 ms a step planted as its top cause,
all four monitors, Lightning's default logger and checkpoints, its folder from argv) and on the
app (``ocr-train`` run from inside its own run folder), every file that was in the run folder
is byte-identical, the only new path is ``perf/try.jsonl``, and the report's top cause is the
same. A script that writes into its run folder by a path no trial can redirect stops the session
with the paths named, recording nothing. In a trial, our callbacks write into the trial's folder
whatever their order, and the resource sampler stops with the fit."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainperf.cli.main import main as perf_main
from trainperf.cli.trial.session import WARM_UP
from trainperf.core.trial_window import ENV_VAR, TryWindow
from trainperf.lightning import (
    PerformanceProfilerCallback,
    ProfilerCallback,
    ResourceMonitorCallback,
    ThroughputMonitorCallback,
)
from trainperf.probe.resources.monitor import THREAD_NAME
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions
from trainperf.records.files import read_records
from trainperf.records.monitoring import LifecycleRecord, ResourceSample

from ocr.data.synth import generate_dataset

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
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            time.sleep(0.08)  # the planted cause: 80 ms a step in a callback


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
        data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        trainer = L.Trainer(
            max_epochs=MAX_EPOCHS,
            default_root_dir=ROOT,
            LOGGER
            callbacks=[
                SleepyLogger(),
                PerformanceProfilerCallback(),
                ThroughputMonitorCallback(flops=False),
                ResourceMonitorCallback(interval_s=0.2, print_summary=False),
                ProfilerCallback(),  # a trace of the second epoch (epoch 1)
            ],
            accelerator="cpu",
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Regressor(), DataLoader(data, batch_size=8))
    """
)


def _hashes(root: Path) -> dict[str, str]:
    """Every path under ``root``: a file's SHA-256, ``dir`` for a folder."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


def _top_cause(run: Path, out: Path) -> tuple[str, str]:
    """The report's first finding (id, title), from ``trainperf report --json``."""
    assert perf_main(["report", str(run), "--json", str(out)]) == 0
    first = json.loads(out.read_text())["findings"][0]
    return first["id"], first["title"]


def _write_script(folder: Path, *, root: str, max_epochs: int, logger: str = "") -> None:
    text = SCRIPT.replace("MAX_EPOCHS", str(max_epochs)).replace("ROOT", root)
    (folder / "train.py").write_text(text.replace("LOGGER", logger), encoding="utf-8")


def _run(argv: list[str], cwd: Path) -> None:
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]


def _no_sample_after_the_end(trial: Path) -> None:
    """The trial's resource samples all precede its lifecycle end (the sampler stopped)."""
    samples = read_records(ResourceSample.path(trial), ResourceSample)
    records = read_records(LifecycleRecord.path(trial), LifecycleRecord)
    (end,) = [r for r in records if r.event == "end"]
    assert samples
    assert max(s.t for s in samples) <= end.t


def _try_leaves_the_run_alone(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], candidate: str, *extra: str
) -> list[Path]:
    """Run a one-pair session on ``run`` with its trials kept; assert the run folder is as it
    was but for ``perf/try.jsonl`` and its report's top cause unchanged; the trials' folders."""
    top = _top_cause(run, tmp_path / "before.json")  # (writes perf/report.html: before the hashes)
    before = _hashes(run)
    kept = tmp_path / "trials"
    argv = ["try", str(run), "--no-findings", "--candidate", candidate, "--pairs", "1"]
    code = perf_main([*argv, *extra, "--trial-dir", str(kept)])
    out = capsys.readouterr().out
    assert code == 0, out
    after = _hashes(run)
    assert {k: after.get(k) for k in before} == before  # byte-identical, none removed
    assert set(after) - set(before) == {"perf/try.jsonl"}
    assert f"Trials run in {kept}" in out
    assert "(kept)" in out
    assert _top_cause(run, tmp_path / "after.json") == top
    (session,) = kept.iterdir()
    return sorted(p for p in (session / "trials").iterdir() if p.is_dir())


def test_try_on_a_plain_script_leaves_its_run_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_script(tmp_path, root="sys.argv[1]", max_epochs=2)
    _run([sys.executable, "train.py", "run"], tmp_path)
    run = tmp_path / "run"
    assert (run / "profiler_traces" / "epoch_1.json").is_file()
    assert list(run.glob("lightning_logs/version_0/checkpoints/*.ckpt"))
    top = _top_cause(run, tmp_path / "planted.json")
    assert top[0] == "callback_overhead"
    assert "SleepyLogger.on_train_batch_end" in top[1]
    # 2 + 8 batches: each trial reaches epoch 1, the profiled one, as the run did
    trials = _try_leaves_the_run_alone(
        run, tmp_path, capsys, "knob:cudnn.benchmark=true", "--warmup", "2", "--batches", "8"
    )
    assert len(trials) == 3  # the uncounted warm-up run, then the pair
    for trial in trials:  # what the trials wrote went to their own folders
        assert (trial / "profiler_traces" / "epoch_1.json").is_file()
        assert (trial / "perf" / "profiler.jsonl").is_file()
        _no_sample_after_the_end(trial)


def test_a_script_writing_into_its_run_by_a_fixed_path_stops_the_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    logger = f"logger=L.pytorch.loggers.CSVLogger({str(run)!r}),"  # experiment made before setup
    _write_script(tmp_path, root=repr(str(run)), max_epochs=1, logger=logger)
    _run([sys.executable, "train.py"], tmp_path)
    before = _hashes(run)
    argv = ["try", str(run), "--no-findings", "--candidate", "knob:cudnn.benchmark=true"]
    code = perf_main([*argv, "--pairs", "1", "--warmup", "1", "--batches", "2"])
    err = capsys.readouterr().err
    assert code == 2
    # the session's first trial, the uncounted warm-up run, is checked like any other
    assert f"trial 1 ({WARM_UP}) changed the run folder it measures" in err
    assert "new: lightning_logs/version_1" in err
    after = _hashes(run)
    assert "perf/try.jsonl" not in after  # nothing recorded
    assert {k: after.get(k) for k in before} == before  # what was there is intact


TINY_APP = [
    "callbacks.model_summary=null",
    "experiment=synthetic_debug",
    "data.synthetic=null",
    "data.canvas_size=128",
    "data.batch_size=4",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
    "trainer.num_sanity_val_steps=0",
    "trainer.log_every_n_steps=1",
    "trainer.max_epochs=1",
    "callbacks=monitoring",
]


def test_try_on_the_app_leaves_its_run_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "synth"
    generate_dataset(data, splits={"train": 8, "val": 4, "test": 4}, seed=3)
    run = tmp_path / "run"
    run.mkdir()
    # run from inside its own folder: a trial's relative writes would land in it
    argv = [sys.executable, "-m", "ocr.train", *TINY_APP, f"data.dataset_dir={data}"]
    _run([*argv, f"hydra.run.dir={run}"], run)
    assert (run / "checkpoints" / "last.ckpt").is_file()
    trials = _try_leaves_the_run_alone(
        run,
        tmp_path,
        capsys,
        "trainer.benchmark=true",
        "--warmup",
        "0",
        "--batches",
        "2",
        "--no-warm-up",  # one pair of the app is enough here (the plain script runs the warm-up)
    )
    assert [(t / "perf" / "epochs.jsonl").is_file() for t in trials] == [True, True]


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_in_a_trial_every_callback_writes_into_the_trials_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, trial = tmp_path / "run", tmp_path / "trial"
    monkeypatch.setenv(ENV_VAR, TryWindow(2, 10, trial, owner=os.getppid()).to_env())  # epoch 1
    monitor = ResourceMonitorCallback(interval_s=0.05, print_summary=False)
    profiler = ProfilerCallback(
        schedule=ProfileSchedule(epochs=(0,), warmup=1, active=2),
        trace=TraceOptions(activities=("cpu",), output_dir=str(run / "traces")),  # absolute
    )
    trainer = L.Trainer(
        max_epochs=3,
        default_root_dir=run,
        accelerator="cpu",
        # ours that open no window set up first: they must know the trial all the same
        callbacks=[monitor, profiler, PerformanceProfilerCallback(), ThroughputMonitorCallback()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = TensorDataset(torch.randn(40, 4))
    trainer.fit(_Tiny(), DataLoader(data, batch_size=4))
    ended = time.time()
    assert trainer.global_step == 12
    assert not run.exists() or not any(run.rglob("*"))  # nothing of ours in the run's folder
    assert (trial / "traces" / "epoch_0.json").is_file()  # the absolute folder, in the trial
    for name in ("profiler", "resources", "epochs", "lifecycle", "run"):
        assert list((trial / "perf").glob(f"{name}.json*")), name
    # the sampler stopped with the fit: no thread, no sample after it
    assert THREAD_NAME not in {t.name for t in threading.enumerate()}
    count = len(read_records(ResourceSample.path(trial), ResourceSample))
    time.sleep(0.3)  # six sampling intervals
    samples = read_records(ResourceSample.path(trial), ResourceSample)
    assert len(samples) == count
    assert max(s.t for s in samples) <= ended
    _no_sample_after_the_end(trial)
