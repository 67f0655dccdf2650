"""How an interrupted run is worded (``trainperf watch``, report): where it stopped, per rank
when the ranks disagree, and the command that resumes it from its ``last.ckpt``."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from trainperf.analysis.lifecycle import interrupted_at, last_checkpoint, resume_command
from trainperf.cli.watch import WatchState, summary_lines
from trainperf.records.files import write_run_record
from trainperf.records.monitoring import LifecycleRecord


def _end(rank: int, status: str = "interrupted", epoch: int | None = 1, batch: int = 2):
    extra = {"signal": "SIGTERM", "epoch": epoch, "batch": batch} if status == "interrupted" else {}
    return LifecycleRecord(t=1.0, event="end", rank=rank, world_size=2, status=status, **extra)  # type: ignore[arg-type]


def test_where_the_ranks_stopped() -> None:
    assert interrupted_at([_end(0), _end(1)]) == "interrupted at epoch 1, batch 2 (SIGTERM)"
    assert interrupted_at([_end(0, "finished"), _end(1, "failed")]) is None
    assert interrupted_at([_end(1, batch=3), _end(0)]) == (
        "interrupted at rank 0: epoch 1, batch 2 (SIGTERM); rank 1: epoch 1, batch 3 (SIGTERM)"
    )


def _hydra_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(
        f"- experiment=synthetic_debug\n- hydra.run.dir={run}\n- trainer.max_epochs=6\n"
    )
    argv = ["ocr-train", "experiment=synthetic_debug", f"hydra.run.dir={run}"]
    write_run_record(
        run,
        {
            "executable": sys.executable,
            "orig_argv": [sys.executable, "-m", "ocr.train", *argv[1:]],
            "argv": argv,
            "cwd": str(tmp_path),
            "hydra": {"cwd": str(tmp_path), "overrides_file": ".hydra/overrides.yaml"},
        },
    )
    return run


def test_the_resume_command_is_the_recorded_one_with_the_checkpoint(tmp_path: Path) -> None:
    run = _hydra_run(tmp_path)
    assert resume_command(run).startswith(f"no checkpoint (*.ckpt) under {run}: ")
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"x")
    assert shlex.split(resume_command(run)) == [
        sys.executable,
        "-m",
        "ocr.train",
        "experiment=synthetic_debug",
        "trainer.max_epochs=6",
        f"hydra.run.dir={run}",
        f"ckpt_path={ckpt}",
    ]


def test_watch_summary_names_the_place_and_the_resume_command(tmp_path: Path) -> None:
    run = _hydra_run(tmp_path)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    state = WatchState()
    for record in (_end(0), _end(1)):
        state.apply(record)
    reason = state.ended()
    assert reason == "interrupted (fit) at epoch 1, batch 2 (SIGTERM)"
    lines = summary_lines(state, reason, run)
    assert lines[0] == f"watch: {reason}"
    assert lines[1].startswith("  resume: ")
    assert lines[1].endswith(f"ckpt_path={run}/checkpoints/last.ckpt")


def _ckpt(path: Path, mtime_s: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    os.utime(path, (mtime_s, mtime_s))
    return path


def test_a_plain_scripts_checkpoint_of_any_name_is_found(tmp_path: Path) -> None:
    # a plain script's ModelCheckpoint: no last.ckpt, the names are its own
    run = tmp_path / "run"
    ckpts = run / "lightning_logs" / "version_0" / "checkpoints"
    _ckpt(ckpts / "epoch=0-step=20.ckpt", 1_000)
    newest = _ckpt(ckpts / "epoch=1-step=40.ckpt", 2_000)
    assert last_checkpoint(run) == newest
    said = resume_command(run)
    assert f"ckpt_path={str(newest)!r}" in said
    assert "no checkpoint" not in said
    # written within one clock tick: the later epoch and step of the name decide
    _ckpt(ckpts / "epoch=2-step=60.ckpt", 2_000)
    assert last_checkpoint(run) == ckpts / "epoch=2-step=60.ckpt"
    # a last.ckpt is preferred when there is one, even an older one
    last = _ckpt(run / "other" / "last.ckpt", 500)
    assert last_checkpoint(run) == last
    # and ocr-train's own place first
    usual = _ckpt(run / "checkpoints" / "last.ckpt", 100)
    assert last_checkpoint(run) == usual


def test_watch_names_the_plain_scripts_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    ckpt = _ckpt(run / "checkpoints" / "epoch=1-step=40.ckpt", 2_000)
    state = WatchState()
    state.apply(_end(0))
    lines = summary_lines(state, "interrupted", run)
    [resume] = [line for line in lines if line.strip().startswith("resume: ")]
    assert f"ckpt_path={str(ckpt)!r}" in resume
    assert "no last.ckpt" not in "\n".join(lines)
