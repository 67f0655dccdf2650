from __future__ import annotations

from pathlib import Path

import pytest

from ocr.perf.try_window import ENV_VAR, TryWindow, TryWindowError


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
