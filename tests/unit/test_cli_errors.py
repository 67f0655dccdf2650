"""ocr.cli_errors: which errors are the user's to fix, and the one-line report."""

from __future__ import annotations

from pathlib import Path

import hydra
import pytest
from trainperf.lightning import PlainProgressBar

from ocr.cli_errors import EXIT_BAD_INPUT, expected_errors, is_expected, message_of
from ocr.data.annotations import AnnotationError
from ocr.errors import ConfigError, InputError, MissingPathError


def _raised(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return exc
    raise AssertionError("did not raise")


def test_our_error_types_are_expected_wherever_raised() -> None:
    assert is_expected(AnnotationError("train.json: image a.jpg, word 0001: bad point"))


def test_config_validation_is_an_input_error() -> None:
    ours = _raised(lambda: PlainProgressBar(interval_s=-1))
    assert isinstance(ours, InputError)
    assert isinstance(ours, ValueError)  # callers that catch ValueError still do
    assert is_expected(ours)
    library = _raised(lambda: int("x"))  # a ValueError that is not a validation message
    assert not is_expected(library)
    assert not is_expected(_raised(lambda: {}["k"]))  # a bug, not input


def _our_bug() -> None:
    # A plain ValueError raised from a frame in ocr/ (as a length mismatch deep in a report
    # would be): a misuse by our own code, not the user's input.
    from ocr.runtime import make_wandb_logger

    make_wandb_logger(enabled=False)


def test_plain_value_error_from_our_code_is_a_bug_with_its_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    bug = _raised(_our_bug)
    assert type(bug) is ValueError
    assert not is_expected(bug)
    with pytest.raises(ValueError, match="enabled=false"), expected_errors("ocr-x"):
        _our_bug()  # propagates: the entry point prints its traceback, exit 1
    assert capsys.readouterr().err == ""


def test_every_input_error_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    class SomeNewInputError(InputError):
        pass

    for exc in (
        InputError("a bad thing"),
        SomeNewInputError("a bad thing"),
        ConfigError("a bad thing"),
        MissingPathError("a bad thing"),
    ):
        with pytest.raises(SystemExit) as stop, expected_errors("ocr-x"):
            raise exc
        assert stop.value.code == EXIT_BAD_INPUT
        assert capsys.readouterr().err == "ocr-x: error: a bad thing\n"


def test_the_error_classes_of_the_project_are_input_errors() -> None:
    from trainperf.analysis.baseline import BaselineError
    from trainperf.analysis.run import ReportInputError
    from trainperf.analysis.trace.table import TraceError
    from trainperf.core.trial_window import TryWindowError
    from trainperf.records.command import TryInputError
    from trainperf.records.schema import RunDirError

    from ocr.data.synth import OutputFolderError
    from ocr.data.transforms import ImageLoadError
    from ocr.run_folder import RunFolderInUseError

    for cls in (
        AnnotationError,
        OutputFolderError,
        ImageLoadError,
        BaselineError,
        ReportInputError,
        RunDirError,
        TraceError,
        TryWindowError,
        TryInputError,
        RunFolderInUseError,
    ):
        assert issubclass(cls, InputError), cls


def test_path_errors_that_name_the_path_are_expected(tmp_path: Path) -> None:
    missing = _raised(lambda: open(tmp_path / "nope.txt"))  # noqa: SIM115
    assert is_expected(missing)
    assert message_of(missing) == f"{tmp_path / 'nope.txt'}: No such file or directory"
    anonymous = _raised(lambda: (_ for _ in ()).throw(FileNotFoundError("somewhere")))
    assert not is_expected(anonymous)


def test_instantiation_error_is_expected_when_its_cause_is() -> None:
    exc = _raised(
        lambda: hydra.utils.instantiate(
            {
                "_target_": "ocr.data.datamodule.ReceiptDataModule",
                "dataset_dir": "anywhere",
                "batch_size": -3,
            }
        )
    )
    assert is_expected(exc)
    assert message_of(exc) == "data.batch_size must be positive, got -3"
    bug = _raised(lambda: hydra.utils.instantiate({"_target_": "builtins.int", "x": "x"}))
    assert not is_expected(bug)


def test_dataloader_worker_traceback_is_cut_to_its_message() -> None:
    text = (
        "Caught ImageLoadError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n  File ...\n"
        "ocr.data.transforms.ImageLoadError: /d/a.jpg: cannot decode"
    )
    assert message_of(AnnotationError(text)) == "/d/a.jpg: cannot decode"


def test_expected_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as stop, expected_errors("ocr-x"):
        raise AnnotationError("a.json: bad")
    assert stop.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "ocr-x: error: a.json: bad\n"
    with pytest.raises(KeyError), expected_errors("ocr-x"):
        raise KeyError("bug")
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(AnnotationError), expected_errors("ocr-x"):
        raise AnnotationError("a.json: bad")


def test_ocr_perf_exits_2_for_input_errors_and_keeps_a_bugs_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from trainperf.cli import main as cli

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def bad_input(args: object) -> int:
        raise ConfigError("--top-k must be positive")

    def bug(args: object) -> int:
        raise ValueError("length mismatch: 3 ranks, 2 rows")  # from a frame in ocr/

    monkeypatch.setattr(cli, "_run", bad_input)
    assert cli.main(["analyze", str(tmp_path / "t.json")]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "trainperf: error: --top-k must be positive\n"
    monkeypatch.setattr(cli, "_run", bug)
    with pytest.raises(ValueError, match="length mismatch"):  # Python prints it, exit 1
        cli.main(["analyze", str(tmp_path / "t.json")])
    assert capsys.readouterr().err == ""
