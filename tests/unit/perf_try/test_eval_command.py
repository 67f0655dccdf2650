"""The eval trial is data the app passes, not the toolkit's knowledge of one app: the evaluation
command and its quality pattern come from ``perf/run.json``'s ``"eval"`` (recorded at train time)
or from ``trainperf try --eval-command / --eval-quality``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from trainperf.cli.trial.cli import evaluation_from
from trainperf.cli.trial.trial_process import run_eval_trial
from trainperf.records.command import TryInputError, recorded_command
from trainperf.records.epochs import EpochRecord
from trainperf.records.run_record import EvalCommand, RunRecord

from ocr.test import EVAL_COMMAND, HMEAN_LINE

#: A foreign app's evaluation: prints its F1 and records three test batches (2 samples each).
EVALUATE_PY = f"""
import json, pathlib, sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
perf = pathlib.Path(args["hydra.run.dir"]) / "perf"
perf.mkdir(parents=True)
record = {{"schema": {EpochRecord.schema()!r}, "v": 1, "stage": "test", "wall_s": 1.0,
          "num_batches": 3, "samples": 6, "batch_times_s": [0.5, 0.25, 0.25]}}
(perf / "epochs.jsonl").write_text(json.dumps(record) + "\\n")
print("args: " + json.dumps(sys.argv[1:]))
print("F1: 0.7500")
"""

FOREIGN = EvalCommand(
    launcher=["evaluate.py"],
    overrides=["ckpt={checkpoint}"],
    drop_keys=["trainer"],
    quality=r"F1: ([0-9.]+)",
    quality_name="F1",
)


def _run_dir(tmp_path: Path, extra: dict[str, object]) -> Path:
    run = tmp_path / "run"
    (run / "perf").mkdir(parents=True)
    info = {
        "schema": RunRecord.schema(),
        "v": 1,
        "executable": sys.executable,
        "orig_argv": [sys.executable, "train.py", "lr=0.1", "trainer.max_epochs=3"],
        "argv": ["train.py", "lr=0.1", "trainer.max_epochs=3"],
        "cwd": str(tmp_path),
        "hydra": {"cwd": str(tmp_path), "overrides": ["lr=0.1", "trainer.max_epochs=3"]},
        **extra,
    }
    (run / "perf" / "run.json").write_text(json.dumps(info))
    return run


def test_a_foreign_apps_recorded_evaluation_runs_with_its_own_quality_pattern(
    tmp_path: Path,
) -> None:
    import msgspec

    (tmp_path / "evaluate.py").write_text(EVALUATE_PY)
    run = _run_dir(tmp_path, {"eval": msgspec.to_builtins(FOREIGN)})
    command = recorded_command(run)
    assert command.evaluation == FOREIGN
    ckpt = tmp_path / "last.ckpt"
    result = run_eval_trial(
        command,
        tmp_path / "trial",
        ("post.thresh=0.9",),
        ckpt,
        evaluation=FOREIGN,
        timeout=120,
    )
    assert result.error is None, result.error
    assert result.quality == 0.75
    assert result.speed == pytest.approx(8.0)  # first batch skipped: 4 samples in 0.5 s
    log = (tmp_path / "trial.log").read_text()
    args = json.loads(log.split("args: ", 1)[1].splitlines()[0])
    # the run's overrides (its trainer.* dropped), the output folder, the evaluation's, the change
    assert args == [
        "lr=0.1",
        f"hydra.run.dir={tmp_path / 'trial'}",
        f"ckpt={ckpt}",
        "post.thresh=0.9",
    ]
    wrong = msgspec.structs.replace(FOREIGN, quality=r"H-mean: ([0-9.]+)")
    missed = run_eval_trial(command, tmp_path / "trial2", (), ckpt, evaluation=wrong, timeout=120)
    assert missed.error is not None
    assert "evaluate.py gave no test-stage speed or F1" in missed.error


def test_the_command_line_gives_or_replaces_the_evaluation() -> None:
    assert evaluation_from(None, None, None) is None
    assert evaluation_from(FOREIGN, None, None) == FOREIGN
    given = evaluation_from(None, "-m app.evaluate ckpt={checkpoint} split=val", r"F1=(\S+)")
    assert given == EvalCommand(
        launcher=["-m", "app.evaluate"],
        overrides=["ckpt={checkpoint}", "split=val"],
        quality=r"F1=(\S+)",
    )
    assert given is not None
    assert given.label == "-m app.evaluate"
    # what the command line names replaces the recorded parts; the rest stays
    swapped = evaluation_from(FOREIGN, "other.py", None)
    assert swapped is not None
    assert (swapped.launcher, swapped.overrides, swapped.quality) == (
        ["other.py"],
        [],
        FOREIGN.quality,
    )
    assert swapped.drop_keys == FOREIGN.drop_keys
    with pytest.raises(TryInputError, match="--eval-command and --eval-quality name it"):
        evaluation_from(None, "-m app.evaluate", None)
    with pytest.raises(TryInputError, match="needs a group"):
        evaluation_from(FOREIGN, None, "F1: [0-9.]+")
    with pytest.raises(TryInputError, match="not a regular expression"):
        evaluation_from(FOREIGN, None, "F1: ([0-9.]+")
    with pytest.raises(TryInputError, match="names no program"):
        evaluation_from(FOREIGN, "ckpt={checkpoint}", None)


def test_the_receipt_apps_evaluation_reads_the_line_ocr_test_prints() -> None:
    import re

    line = HMEAN_LINE.format(split="val", hmean=0.71234)
    match = re.search(EVAL_COMMAND.quality, f"noise\n{line}\nrun directory: x\n")
    assert match is not None
    assert float(match.group(1)) == pytest.approx(0.7123)
    assert EVAL_COMMAND.label == "ocr-test"
