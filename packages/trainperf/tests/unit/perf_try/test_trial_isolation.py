"""Each seam that keeps a ``trainperf try`` trial out of the run it measures, alone: a plain
script's argument naming the run folder, Lightning's default root folder from the trial's
environment, where our callbacks write inside a trial, where the trials' folders go, and the
run folder's snapshot that stops a session when a trial changed it anyway."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.trainer.states import TrainerFn
from trainperf.cli.trial.run_guard import RunSnapshot, TrialTouchedRunError, trial_work_dir
from trainperf.cli.trial.trial_process import trial_env
from trainperf.core.trial_window import ENV_VAR, TryWindow
from trainperf.lightning.trial_fit import output_path, perf_root, trial_root
from trainperf.records.command import RecordedCommand, TryInputError


def _plain(tmp_path: Path, args: tuple[str, ...], run_dir: Path) -> RecordedCommand:
    return RecordedCommand(
        run_dir=run_dir,
        executable="/usr/bin/python3",
        launcher=("train.py",),
        flags=(),
        overrides=args,
        cwd=tmp_path,
        takes_overrides=False,
    )


def test_a_plain_scripts_argument_naming_the_run_folder_names_the_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # `trainperf try runs/a` given relative to where it is typed
    args = (
        "runs/a",  # the folder as the script was given it (relative to its working folder)
        f"--out={tmp_path}/runs/a/",  # --opt=VALUE, absolute, trailing slash
        "root=./runs/a",  # key=VALUE
        "--resume",
        "runs/a/last.ckpt",  # a path inside the run folder is an input: left alone
        "runs/ab",  # another folder
        "--lr",
        "0.1",
    )
    cmd = _plain(tmp_path, args, Path("runs/a"))
    trial = tmp_path / "work" / "001-A"
    assert cmd.argv(trial) == [
        "/usr/bin/python3",
        "train.py",
        str(trial),
        f"--out={trial}",
        f"root={trial}",
        "--resume",
        "runs/a/last.ckpt",
        "runs/ab",
        "--lr",
        "0.1",
    ]
    # the run's own folder (resuming the run): the command as it was
    assert cmd.argv(Path("runs/a"))[2:] == list(args)


def test_a_hydra_override_naming_the_run_folder_names_the_trials(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cmd = RecordedCommand(
        run_dir=run,
        executable="/venv/bin/python",
        launcher=("-m", "app.train"),
        flags=(),
        overrides=(f"hydra.run.dir={run}", f"trainer.default_root_dir={run}", f"ckpt={run}/a.ckpt"),
        cwd=tmp_path,
        takes_overrides=True,
    )
    trial = tmp_path / "work" / "002-B"
    assert cmd.argv(trial, ("data.num_workers=2",))[3:] == [
        f"trainer.default_root_dir={trial}",
        f"ckpt={run}/a.ckpt",  # an input inside the run folder
        f"hydra.run.dir={trial}",
        "data.num_workers=2",
    ]


def test_the_trial_environment_makes_its_folder_lightnings_default_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial = tmp_path / "trial"
    window = TryWindow(1, 2, trial)
    env = trial_env(trial, window)
    assert env["PL_TRAINER_DEFAULT_ROOT_DIR"] == str(trial)
    assert TryWindow.parse(env[ENV_VAR]).perf_dir == trial
    assert ENV_VAR not in trial_env(trial)  # an evaluation trial: no training window
    monkeypatch.setenv("PL_TRAINER_DEFAULT_ROOT_DIR", env["PL_TRAINER_DEFAULT_ROOT_DIR"])
    quiet = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False}
    # a script that names no folder wrote into its working folder: in a trial, the trial's
    assert L.Trainer(**quiet).default_root_dir == str(trial)  # type: ignore[arg-type]
    # a script that names one keeps it (its argument is redirected, or the snapshot tells)
    named = L.Trainer(default_root_dir=tmp_path / "mine", **quiet)  # type: ignore[arg-type]
    assert named.default_root_dir == str(tmp_path / "mine")


def test_our_callbacks_write_into_the_trials_folder_from_the_first_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = L.Trainer(
        default_root_dir=tmp_path / "run",
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
    )
    trial = tmp_path / "trial"
    monkeypatch.delenv(ENV_VAR, raising=False)
    trainer.state.fn = TrainerFn.FITTING
    assert trial_root(trainer) is None
    assert perf_root(trainer) == tmp_path / "run"
    assert output_path(trainer, Path("traces")) == tmp_path / "run" / "traces"
    assert output_path(trainer, tmp_path / "abs") == tmp_path / "abs"
    # in a trial, before any callback opened the window (a callback set up before ours)
    monkeypatch.setenv(ENV_VAR, TryWindow(1, 2, trial).to_env())
    assert trial_root(trainer) == trial
    assert perf_root(trainer) == trial
    assert output_path(trainer, Path("traces")) == trial / "traces"
    # an absolute folder may lie in the measured run: the trial's, by its last name
    assert output_path(trainer, tmp_path / "run" / "traces") == trial / "traces"
    # not a fit (an evaluation with the variable around): the run's own folder
    trainer.state.fn = TrainerFn.TESTING
    assert perf_root(trainer) == tmp_path / "run"


def test_the_snapshot_names_every_change_to_the_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "perf").mkdir(parents=True)
    (run / "perf" / "epochs.jsonl").write_text("{}\n")
    (run / "perf" / "profiler.jsonl").write_text("{}\n")
    (run / "old.txt").write_text("x")
    before = RunSnapshot.take(run)
    before.check("1 (unchanged)")  # nothing changed: no error
    with open(run / "perf" / "epochs.jsonl", "a") as fh:
        fh.write("{}\n")
    # the same size, written later (an overwrite): told by its modification time
    stat = (run / "perf" / "profiler.jsonl").stat()
    (run / "perf" / "profiler.jsonl").write_text("[]\n")
    os.utime(run / "perf" / "profiler.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**6))
    (run / "old.txt").unlink()
    (run / "logs" / "version_1").mkdir(parents=True)
    assert before.changes(RunSnapshot.take(run)) == [
        "new: logs",
        "new: logs/version_1",
        "removed: old.txt",
        "changed: perf/epochs.jsonl (size 3 -> 6 bytes)",
        "changed: perf/profiler.jsonl (size 3 -> 3 bytes)",
    ]
    with pytest.raises(TrialTouchedRunError) as caught:
        before.check("2 (knob:cudnn.benchmark=true)")
    message = str(caught.value)
    assert "trial 2 (knob:cudnn.benchmark=true) changed the run folder" in message
    assert "new: logs/version_1" in message
    assert "recorded nothing" in message
    assert isinstance(caught.value, TryInputError)  # one line, exit 2


def test_trial_folders_go_outside_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(TryInputError, match="inside the run folder"):
        trial_work_dir(run, run / "trials")
    with pytest.raises(TryInputError, match="inside the run folder"):
        trial_work_dir(run, run)
    given = trial_work_dir(run, tmp_path / "kept" / "here")  # made when missing
    assert given.parent == tmp_path / "kept" / "here"
    assert given.is_dir()
    assert trial_work_dir(run, tmp_path / "kept" / "here") != given  # one per session
    default = trial_work_dir(run, None)
    try:
        assert default.parent == Path(tempfile.gettempdir())
    finally:
        default.rmdir()
