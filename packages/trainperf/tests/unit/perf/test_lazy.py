"""trainperf.core.lazy: a package's names imported on first use, cached, unknown ones refused."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from trainperf.core.lazy import lazy_getattr


def test_a_name_is_imported_on_first_use_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    package = types.ModuleType("fake_pkg")
    monkeypatch.setitem(sys.modules, "fake_pkg", package)
    getattr_ = lazy_getattr("fake_pkg", {"dedent": "textwrap"})
    import textwrap

    assert getattr_("dedent") is textwrap.dedent
    assert vars(package)["dedent"] is textwrap.dedent  # cached: no second lookup
    with pytest.raises(AttributeError, match="module 'fake_pkg' has no attribute 'nope'"):
        getattr_("nope")


def test_the_public_names_load_their_modules_only_when_used() -> None:
    code = (
        "import sys, trainperf\n"
        "print('trainperf.present.report.writers' in sys.modules)\n"
        "trainperf.to_html\n"
        "print('trainperf.present.report.writers' in sys.modules)\n"
        "from trainperf.present import report\n"
        "print(report.to_html is trainperf.to_html)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "True"]
