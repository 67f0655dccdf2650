"""A fake clock and a recorded command for the try session's tests (no real trials)."""

from __future__ import annotations

from pathlib import Path

from trainperf.records.command import RecordedCommand
from trainperf.records.run_record import EvalCommand


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


#: An app's evaluation command as it records it (the receipt app's: ocr-test and its H-mean).
EVALUATE = EvalCommand(
    name="app-test",
    launcher=["-m", "app.test"],
    overrides=["checkpoint_path={checkpoint}"],
    drop_keys=["callbacks"],
    quality=r"H-mean: ([0-9.]+)",
    quality_name="H-mean",
)


def _command(
    tmp_path: Path,
    hydra: bool = True,
    module: str = "OCRLightningModule",
    evaluation: EvalCommand | None = EVALUATE,
) -> RecordedCommand:
    return RecordedCommand(
        run_dir=tmp_path / "run",
        executable="python",
        launcher=("-m", "app"),
        flags=(),
        overrides=("x=1",),
        cwd=tmp_path,
        takes_overrides=hydra,
        module_class=module,
        evaluation=evaluation,
    )
