"""The live sync detector: torch's sync-debug warnings traced to the user's line.

This machine has no CUDA, so the warning torch issues in ``warn`` mode is issued here by hand from
inside a library function (as a sync inside ``torch/_tensor.py`` would be): the detector must
charge it to this file's line that made the call, count it per step, and let other warnings pass.
"""

from __future__ import annotations

import inspect
import os
import sysconfig
import warnings

import pytest
from trainperf.probe.sync_debug import SYNC_WARNING, SyncDetector, sync_lines_finding


def _library_function() -> object:
    """A function whose code claims to live in the standard library (as torch's own Python
    does in site-packages) and issues the sync warning from there."""
    src = "import warnings\ndef tensor_format(msg):\n    warnings.warn(msg, UserWarning)\n"
    path = os.path.join(sysconfig.get_paths()["stdlib"], "fake_tensor_module.py")
    ns: dict[str, object] = {}
    exec(compile(src, path, "exec"), ns)
    return ns["tensor_format"]


_LIB = _library_function()


def print_tensor_in_step() -> None:
    _LIB(SYNC_WARNING)  # type: ignore[operator]


def user_step() -> None:
    for _ in range(6):
        warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)  # the line to name


_LINE = inspect.getsourcelines(user_step)[1] + 2


def test_lines_named_per_step() -> None:
    det = SyncDetector()
    assert det.start(force=True)
    for _ in range(4):
        user_step()
    lines = det.stop(steps=4)
    assert det._catch is None  # not catching warnings
    assert len(lines) == 1
    line = lines[0]
    assert line.file == __file__
    assert line.line == _LINE
    assert line.function == "user_step"
    assert line.calls == 24
    assert line.per_step == 6.0
    assert "warnings.warn(SYNC_WARNING" in line.code
    f = sync_lines_finding(lines, 4, "train")
    assert f is not None
    assert f"{__file__}:{_LINE} user_step" in f.title
    assert f.evidence["lines"][0]["per_step"] == 6.0
    # every blocking call the live mode saw (it cannot tell a wait from an idle GPU)
    assert f.evidence["blocking_calls_per_step"] == 6.0


def test_other_warnings_pass_and_state_is_restored() -> None:
    before = warnings.showwarning
    det = SyncDetector()
    det.start(force=True)
    with pytest.warns(DeprecationWarning, match="unrelated"):
        warnings.warn("unrelated", DeprecationWarning, stacklevel=1)
    lines = det.stop(steps=1)
    assert lines == []
    assert warnings.showwarning is before
    assert det.stop(steps=1) == []  # stopping twice is harmless


def test_sync_inside_a_library_is_charged_to_the_calling_line() -> None:
    det = SyncDetector()
    det.start(force=True)
    print_tensor_in_step()
    lines = det.stop(steps=1)
    want = inspect.getsourcelines(print_tensor_in_step)[1] + 1
    assert [(ln.function, ln.line, ln.calls) for ln in lines] == [("print_tensor_in_step", want, 1)]


def test_few_syncs_no_finding() -> None:
    det = SyncDetector()
    det.start(force=True)
    warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)
    lines = det.stop(steps=10)
    assert lines
    assert sync_lines_finding(lines, 10, None) is None


def test_without_cuda_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    det = SyncDetector()
    assert det.start() is False
    assert det._catch is None  # not catching warnings
    assert det.stop(steps=3) == []
