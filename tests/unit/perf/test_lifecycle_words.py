"""How an interrupted run is worded (``trainperf watch``, report): where it stopped, per rank
when the ranks disagree, and the command that resumes it from its ``last.ckpt``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from trainperf.analysis.lifecycle import interrupted_at, resume_command
from trainperf.cli.watch import WatchState, summary_lines
from trainperf.records.files import write_run_record
from trainperf.records.kinds import LifecycleRecord


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
    assert resume_command(run).startswith("no last.ckpt under ")
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
