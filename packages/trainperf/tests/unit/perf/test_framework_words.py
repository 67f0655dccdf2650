"""Advice and ``try`` in each framework's own words (issue 39): the run records its framework
and app in ``perf/run.json`` (``FrameworkInfo``, written here through the records module as the
adapters write it), and a finding's change is written for that run: ``Trainer(precision=...)``
for Lightning, ``torch.autocast(...)`` for a plain loop, ``TrainingArguments(bf16=True)`` for
Hugging Face, the app's own key as an override; an older folder keeps today's wording.
``trainperf try`` refuses, before any trial, a knob the run's framework cannot apply, with why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from trainperf.analysis.run import load_run
from trainperf.cli.main import main as perf_main
from trainperf.cli.trial.candidate_options import applicable, parse_candidate
from trainperf.frameworks.spellings import HF, LIGHTNING, LOOP, framework_info
from trainperf.present.report import build_report
from trainperf.records.files import read_run_record
from trainperf.records.framework_info import FrameworkInfo, Setting

from trainperf_testing.gpu_samples import CONFIG, GPU, HOST, _samples
from trainperf_testing.runs import epoch_record, make_run

# A CPU training stage that waits for input in the main process (no workers).
INPUT_BOUND = {"data_wait": 6.0, "forward": 1.0, "backward": 1.0, "optimizer": 0.5}


def _info(framework: FrameworkInfo | None, **more: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"cpu_count": 8, **more}
    if framework is not None:
        info["framework"] = msgspec.to_builtins(framework)
    return info


def _gpu_changes(root: Path, framework: FrameworkInfo | None, config: Any = None) -> set[str]:
    """The descriptions of every candidate of a 16-mixed GPU run whose optimizer loops on the
    host (fp16_scaler, optimizer_host_bound)."""
    epochs = [
        epoch_record("train", e, HOST, gpu_phases=GPU, device="cuda", batches=100, num_workers=8)
        for e in range(2)
    ]
    info = _info(
        framework, cuda_devices=["NVIDIA A100-SXM4-80GB"], precision="16-mixed", cpu_count=16
    )
    make_run(root, epochs, config=config, resources=_samples(55.0), run_info=info)
    return {c.description for f in build_report(root).findings for c in f.candidates}


def _input_changes(root: Path, framework: FrameworkInfo | None, config: Any = None) -> set[str]:
    epochs = [epoch_record("train", e, INPUT_BOUND, num_workers=0) for e in range(3)]
    make_run(root, epochs, config=config, run_info=_info(framework))
    found = [f for f in build_report(root).findings if f.id == "input_bound"]
    assert found, [f.id for f in build_report(root).findings]
    return {c.description for c in found[0].candidates} | {
        c.change or "" for c in found[0].candidates
    }


def _has(changes: set[str], text: str) -> bool:
    return any(text in c for c in changes)


def test_a_plain_lightning_run_is_advised_in_lightnings_words(tmp_path: Path) -> None:
    lightning = framework_info(LIGHTNING, version="2.6.0", values={"precision": "16-mixed"})
    changes = _gpu_changes(tmp_path / "gpu", lightning)
    assert _has(changes, '`Trainer(precision="bf16-mixed")` (now 16-mixed)')
    assert _has(changes, "`torch.optim.AdamW(..., fused=True) in configure_optimizers")
    workers = _input_changes(tmp_path / "input", lightning)
    assert _has(workers, "DataLoader worker processes: `DataLoader(num_workers=")
    assert _has(workers, "` (now 0)")  # the workers the run showed (its epochs' records)
    assert not _has(workers | changes, "TrainingArguments")


def test_a_plain_loop_is_advised_in_torchs_words(tmp_path: Path) -> None:
    loop = framework_info(LOOP, values={"workers": 0})
    changes = _gpu_changes(tmp_path / "gpu", loop)
    assert _has(changes, "`torch.autocast(device_type, dtype=torch.bfloat16) around forward")
    assert _has(changes, "`torch.optim.AdamW(..., fused=True)`")
    assert not _has(changes, "Trainer(")
    assert not _has(changes, "configure_optimizers")
    workers = _input_changes(tmp_path / "input", loop)
    assert _has(workers, "`DataLoader(num_workers=")
    assert _has(workers, "(now 0)")


def test_a_run_that_names_only_its_framework_reads_as_that_framework(tmp_path: Path) -> None:
    """An adapter may record ``"framework": "loop"`` alone: the registered spellings apply."""
    epochs = [epoch_record("train", e, INPUT_BOUND, num_workers=0) for e in range(3)]
    make_run(tmp_path, epochs, run_info={"cpu_count": 8, "framework": "loop"})
    assert read_run_record(tmp_path).framework_info == LOOP
    changes = {c.description for f in build_report(tmp_path).findings for c in f.candidates}
    assert _has(changes, "`DataLoader(num_workers=")
    assert load_run(tmp_path).framework == LOOP


def test_a_hugging_face_run_is_advised_in_training_arguments(tmp_path: Path) -> None:
    changes = _gpu_changes(tmp_path / "gpu", framework_info(HF))
    assert _has(changes, "`TrainingArguments(bf16=True)`")
    assert _has(changes, '`TrainingArguments(optim="adamw_torch_fused")`')
    assert not _has(changes, "Trainer(precision")
    workers = _input_changes(tmp_path / "input", framework_info(HF))
    assert _has(workers, "`TrainingArguments(dataloader_num_workers=")


def test_an_app_run_is_advised_in_its_own_config_keys(tmp_path: Path) -> None:
    app = FrameworkInfo(
        name="ocr-train",
        literals="override",
        config={**CONFIG, "hydra": {"precision": "ignored"}},
        config_label="the app's job config",
        config_skip=["hydra"],
        job_name="train",
    )
    root = tmp_path / "app"
    changes = _gpu_changes(root, framework_info(LIGHTNING))
    # the app recorded through the records module, beside the Lightning adapter's record
    make_run(root, run_info={"app": msgspec.to_builtins(app)})
    report = build_report(root)
    overrides = {c.override for f in report.findings for c in f.candidates}
    assert {"trainer.precision=bf16-mixed", "+model.optimizer.fused=true"} <= overrides
    assert report.run.config is not None
    assert "hydra" not in report.run.config  # the config library's own section (config_skip)
    assert report.name.source == "the app's job name"
    assert changes  # the same run without the app: the framework's words
    workers = _input_changes(tmp_path / "input", None, config=CONFIG)
    assert _has(workers, "data.num_workers=")  # the app's key, as an override


def test_an_older_folder_keeps_todays_wording(tmp_path: Path) -> None:
    changes = _gpu_changes(tmp_path, None)
    assert _has(changes, "the Trainer's precision bf16-mixed")
    assert _has(changes, "fused=True in configure_optimizers")
    run = load_run(tmp_path)
    assert run.framework is not None
    assert run.framework.name == "lightning"  # every older folder was the callbacks'
    assert not run.framework.settings


def test_try_refuses_what_the_framework_cannot_apply_with_why() -> None:
    hf = framework_info(HF)
    precision = parse_candidate("knob:trainer.precision=bf16-mixed")
    workers = parse_candidate("knob:dataloader.num_workers=4")
    kept, refused = applicable([precision, workers], hf)
    assert kept == [workers]
    (line,) = [r.line for r in refused]
    assert line.startswith("cannot try knob:trainer.precision=bf16-mixed on this hf run")
    assert "TrainingArguments are fixed before the callback runs" in line
    # Lightning's adapter applies every knob; an older folder (no record) refuses nothing
    assert applicable([precision, workers], framework_info(LIGHTNING)) == ([precision, workers], [])
    assert applicable([precision], None) == ([precision], [])
    # an override is the app's own key: applied wherever the command re-runs
    override = parse_candidate("trainer.precision=bf16-mixed")
    assert applicable([override], hf) == ([override], [])


def test_trainperf_try_says_plainly_what_it_cannot_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = framework_info(LOOP)
    info = {
        "executable": "python",
        "orig_argv": ["python", "train.py"],
        "argv": ["train.py"],
        "cwd": str(tmp_path),
        "framework": msgspec.to_builtins(loop),
    }
    (tmp_path / "train.py").write_text("print('never run')\n")
    make_run(tmp_path / "run", run_info=info)
    assert read_run_record(tmp_path / "run").framework_info == loop
    code = perf_main(
        ["try", str(tmp_path / "run"), "--candidate", "knob:trainer.precision=bf16-mixed"]
    )
    assert code == 2  # nothing left to try: no trial ran
    err = capsys.readouterr().err
    assert "cannot try knob:trainer.precision=bf16-mixed on this loop run" in err
    assert "autocast is in its own code" in err


def test_a_recorded_setting_spells_a_value_in_its_frameworks_literals() -> None:
    app = FrameworkInfo(
        name="app",
        literals="override",
        settings=[Setting(family="workers", change="data.loader.workers={value}")],
    )
    assert app.spell("workers", 4) == "data.loader.workers=4"
    assert app.spell("pin_memory", True) is None
    assert LOOP.spell("pin_memory", True) == "DataLoader(pin_memory=True)"
    assert HF.spell("precision", "16-mixed") == "TrainingArguments(fp16=True)"
    assert LIGHTNING.spell("precision", "bf16-mixed") == 'Trainer(precision="bf16-mixed")'


def test_a_config_apps_trial_command_comes_from_its_launch_record(tmp_path: Path) -> None:
    """How a trial's output is redirected and what it leaves out are data of run.json's launch
    entry (``hydra``); an older entry without them means what it always did."""
    from trainperf.records.command import recorded_command

    launch = {"cwd": str(tmp_path), "overrides": ["a=1", "out.dir=x", "sweep.n=2"]}
    base = {"executable": "python", "orig_argv": ["python", "app.py"], "argv": ["app.py"]}
    (tmp_path / "app.py").write_text("")
    new = {**launch, "output_override": "out.dir={dir}", "drop_keys": ["out.dir", "sweep"]}
    make_run(tmp_path / "new", run_info={**base, "hydra": new})
    argv = recorded_command(tmp_path / "new").argv(tmp_path / "t", changes=("b=2",))
    assert argv == ["python", "app.py", "a=1", f"out.dir={tmp_path / 't'}", "b=2"]
    make_run(tmp_path / "old", run_info={**base, "hydra": launch})
    argv = recorded_command(tmp_path / "old").argv(tmp_path / "t")
    assert argv[-1] == f"hydra.run.dir={tmp_path / 't'}"  # what an older entry meant
    assert "out.dir=x" in argv


def test_a_refused_candidate_is_recorded_not_applicable_with_why_and_never_tried(
    tmp_path: Path,
) -> None:
    """The session records what the framework refused, with the adapter's reason, and runs no
    trial for it (a fake clock: nothing is run)."""
    from trainperf.cli.trial.session import TryOptions, TrySession
    from trainperf.records.command import RecordedCommand

    command = RecordedCommand(
        run_dir=tmp_path / "run",
        executable="python",
        launcher=("train.py",),
        flags=(),
        overrides=(),
        cwd=tmp_path,
        takes_overrides=False,
    )
    channels = parse_candidate("knob:model.channels_last=true")
    _, refused = applicable([channels], framework_info(LOOP))
    session = TrySession(
        command,
        [channels],
        TryOptions(100, 3),
        tmp_path / "trials",
        refused={r.candidate: r.reason for r in refused},
    )
    (record,) = session.run()
    assert record.status == "not applicable"
    assert record.override == "knob:model.channels_last=true"
    assert "plain loop" in record.note
    assert record.pairs == 0
    assert not any((tmp_path / "trials").iterdir())  # no trial folder: nothing ran
