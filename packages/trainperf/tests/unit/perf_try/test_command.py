from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from trainperf.cli.main import main as perf_main
from trainperf.records.command import TryInputError, recorded_command


def _run_dir(tmp_path: Path, info: dict[str, object], overrides: list[str] | None) -> Path:
    run = tmp_path / "run"
    (run / "perf").mkdir(parents=True)
    record = {"schema": "receipt-ocr/run", "v": 1, **info}
    (run / "perf" / "run.json").write_text(json.dumps(record))
    if overrides is not None:
        (run / ".hydra").mkdir()
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return run


def test_module_launch_with_hydra_overrides(tmp_path: Path) -> None:
    overrides = ["experiment=synthetic_debug", f"hydra.run.dir={tmp_path}/run"]
    info = {
        "executable": "/venv/bin/python",
        "orig_argv": ["/venv/bin/python", "-m", "ocr.train", *overrides],
        "argv": ["/src/ocr/train.py", *overrides],
        "cwd": str(tmp_path),
        "hydra": {"overrides_file": ".hydra/overrides.yaml", "overrides": overrides},
        "lightning_module": "OCRLightningModule",
    }
    cmd = recorded_command(_run_dir(tmp_path, info, overrides))
    assert cmd.launcher == ("-m", "ocr.train")
    assert cmd.takes_overrides
    argv = cmd.argv(tmp_path / "t1", ("data.num_workers=4",))
    assert argv == [
        "/venv/bin/python",
        "-m",
        "ocr.train",
        "experiment=synthetic_debug",
        f"hydra.run.dir={tmp_path}/t1",
        "data.num_workers=4",
    ]


def test_console_script_flags_and_a_replaced_override(tmp_path: Path) -> None:
    args = ["--config-name", "big", "+data.num_workers=0", "trainer.max_epochs=3"]
    info = {
        "executable": "/venv/bin/python",
        "orig_argv": ["/venv/bin/python", "/venv/bin/my-train", *args],
        "argv": ["/venv/bin/my-train", *args],
        "cwd": str(tmp_path),
        "hydra": {
            "overrides_file": None,
            "overrides": ["+data.num_workers=0", "trainer.max_epochs=3"],
        },
    }
    cmd = recorded_command(_run_dir(tmp_path, info, None))
    assert cmd.launcher == ("/venv/bin/my-train",)
    assert cmd.flags == ("--config-name", "big")
    argv = cmd.argv(tmp_path / "t", ("data.num_workers=2",))
    assert "+data.num_workers=0" not in argv
    assert argv[-3:] == [
        "trainer.max_epochs=3",
        f"hydra.run.dir={tmp_path}/t",
        "data.num_workers=2",
    ]


def test_plain_script_is_re_run_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    info = {
        "executable": "/usr/bin/python3",
        "orig_argv": ["/usr/bin/python3", "-u", "train.py", "--lr", "0.1"],
        "argv": ["train.py", "--lr", "0.1"],
        "cwd": str(tmp_path),
    }
    cmd = recorded_command(_run_dir(tmp_path, info, None))
    assert not cmd.takes_overrides
    assert cmd.cwd == tmp_path
    # interpreter, its flags, the script and its arguments: nothing added (changes are knobs)
    assert cmd.argv(tmp_path / "t") == ["/usr/bin/python3", "-u", "train.py", "--lr", "0.1"]
    with pytest.raises(TryInputError, match="takes no config overrides"):
        cmd.argv(tmp_path / "t", ("lr=0.2",))


@pytest.mark.parametrize(
    ("orig", "argv", "why"),
    [
        (["python", "-"], ["-"], "standard input"),
        (["python"], [""], "interactive Python prompt"),
        (["python", "-ui", "train.py"], ["train.py"], "python -i"),
        (
            ["python", "-m", "ipykernel_launcher", "-f", "k.json"],
            ["/venv/ipykernel_launcher.py", "-f", "k.json"],
            "Jupyter",
        ),
        (["python", "gone.py"], ["gone.py"], "gone.py no longer exists"),
    ],
)
def test_a_command_that_cannot_be_re_run_is_exit_2_with_why(
    tmp_path: Path,
    orig: list[str],
    argv: list[str],
    why: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "train.py").write_text("")
    info = {"executable": "python", "orig_argv": orig, "argv": argv, "cwd": str(tmp_path)}
    run = _run_dir(tmp_path, info, None)
    code = perf_main(["try", str(run), "--candidate", "knob:torch.threads=1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot be re-run" in err
    assert why in err
    # -W takes a value: "ignore" is not a flag, and the script is still found
    ok = {**info, "orig_argv": ["python", "-W", "ignore", "train.py"], "argv": ["train.py"]}
    assert recorded_command(_run_dir(tmp_path / "ok", ok, None)).launcher[-1] == "train.py"


def test_run_without_a_recorded_command_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_dir(tmp_path, {"argv": ["train.py"]}, None)  # an older run.json
    code = perf_main(["try", str(run), "--candidate", "data.num_workers=2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("trainperf: error: ")
    assert "no command recorded" in err
    assert str(run / "perf" / "run.json") in err
    assert not (run / "perf" / "try.jsonl").exists()


def test_run_without_run_json_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code = perf_main(["try", str(tmp_path / "empty"), "--candidate", "a=1"])
    assert code == 2
    assert "no perf/run.json" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--budget", "ten"], "duration"), (["--pairs", "0"], ">= 1")],
)
def test_bad_options_are_usage_errors(
    tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        perf_main(["try", str(tmp_path), *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_hydra_launch_folder_wins_over_a_changed_working_folder(tmp_path: Path) -> None:
    launch = tmp_path / "project"
    launch.mkdir()
    info = {
        "executable": "python",
        "orig_argv": ["python", "app.py"],
        "argv": ["app.py"],
        "cwd": str(tmp_path / "run"),  # hydra.job.chdir=true: the job ran in its output dir
        "hydra": {"overrides_file": None, "overrides": [], "cwd": str(launch)},
    }
    assert recorded_command(_run_dir(tmp_path, info, None)).cwd == launch


def test_no_candidate_at_all_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = {
        "executable": "python",
        "orig_argv": ["python", "app.py"],
        "argv": ["app.py"],
        "cwd": str(tmp_path),
        "hydra": {"overrides_file": None, "overrides": []},
    }
    run = _run_dir(tmp_path, info, None)
    # the findings of this (empty) run propose nothing and no --candidate was given
    assert perf_main(["try", str(run)]) == 2
    assert "nothing to try" in capsys.readouterr().err
