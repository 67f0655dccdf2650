from __future__ import annotations

import os
from pathlib import Path

import pytest
from trainperf.core.trial_window import ENV_VAR, TryWindow, TryWindowError


def test_round_trip_through_the_variable(tmp_path: Path) -> None:
    window = TryWindow(3, 12, tmp_path / "t1", frozenset({"val", "loggers"}))
    text = window.to_env()
    assert TryWindow.parse(text) == window
    assert TryWindow.from_env({ENV_VAR: text}) == window
    assert window.total_batches == 15


def test_absent_variable_is_a_normal_run() -> None:
    assert TryWindow.from_env({}) is None


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("warmup=1;batches=2", "perf_dir"),
        ("warmup=x;batches=2;perf_dir=/t", "integers"),
        ("warmup=1;batches=0;perf_dir=/t", "batches >= 1"),
        ("warmup=1;batches=2;perf_dir=/t;keep=val,gpu", "gpu"),
        ("warmup", "key=value"),
    ],
)
def test_malformed_window_names_the_part(text: str, names: str) -> None:
    with pytest.raises(TryWindowError, match=names):
        TryWindow.parse(text)


def test_the_owner_travels_with_the_window(tmp_path: Path) -> None:
    window = TryWindow(1, 2, tmp_path, owner=4321)
    assert "owner=4321" in window.to_env()
    assert TryWindow.parse(window.to_env()) == window
    with pytest.raises(TryWindowError, match="owner must be a process id"):
        TryWindow.parse(f"warmup=1;batches=2;perf_dir={tmp_path};owner=me")


def test_only_an_ancestor_owner_is_ocr_perf_try(tmp_path: Path) -> None:
    assert TryWindow(1, 2, tmp_path, owner=os.getppid()).opened_by_ocr_perf_try()
    assert not TryWindow(1, 2, tmp_path).opened_by_ocr_perf_try()  # exported by hand
    assert not TryWindow(1, 2, tmp_path, owner=os.getpid()).opened_by_ocr_perf_try()  # no ancestor


def test_the_announcement_names_the_variable_and_what_it_does(tmp_path: Path) -> None:
    text = TryWindow(2, 5, tmp_path / "t", frozenset({"val"})).announcement()
    assert text.startswith(f"{ENV_VAR} is set (")
    assert "It stops after 7 training batches, saves no checkpoint, logs to no logger" in text
    assert "validation" not in text  # kept on
    assert str(tmp_path / "t") in text
