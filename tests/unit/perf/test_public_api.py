"""``import trainperf``: every public name resolves to the object its module defines, the version
has one source (``trainperf.__version__``, which the distribution reads), the built wheel carries
``py.typed``, the core names load nothing heavy, and docs/toolkit/api.md shows every name."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import trainperf

REPO = Path(__file__).resolve().parents[3]
DIST = REPO / "packages" / "trainperf"
API_DOC = REPO / "docs" / "toolkit" / "api.md"
#: Public names bound when the package is imported (not loaded on first use).
EAGER = {"__version__", "perf_phase", "InputError"}


def test_every_public_name_resolves_to_its_modules_object() -> None:
    lazy: dict[str, str] = trainperf._LAZY
    assert set(trainperf.__all__) == set(lazy) | EAGER
    for name, module in lazy.items():
        home = __import__(module, fromlist=[name])
        assert getattr(trainperf, name) is getattr(home, name), name
    assert trainperf.FindingId.INPUT_BOUND == "input_bound"
    assert issubclass(trainperf.InputError, Exception)


def test_the_version_has_one_source() -> None:
    assert isinstance(trainperf.__version__, str)
    assert [int(part) for part in trainperf.__version__.split(".")] >= [0, 2, 0]
    project = tomllib.loads((DIST / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "trainperf.__version__"}
    assert project["tool"]["setuptools"]["package-data"]["trainperf"] == ["py.typed"]
    from trainperf.cli.main import _parser

    # `trainperf --version` reads the same
    version = next(a for a in _parser()._actions if a.dest == "version")
    assert version.version == f"%(prog)s {trainperf.__version__}"  # type: ignore[attr-defined]


def test_the_wheel_carries_py_typed_and_the_version(tmp_path: Path) -> None:
    """The distribution as pip builds it (a copy of it: the build leaves ``build/`` and an
    ``egg-info`` beside the sources)."""
    source = tmp_path / "trainperf"
    shutil.copytree(
        DIST, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*argv, "-q", str(source), "-w", str(tmp_path / "w")], check=True, timeout=300)
    (wheel,) = (tmp_path / "w").glob("trainperf-*.whl")
    assert wheel.name.startswith(f"trainperf-{trainperf.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "trainperf/py.typed" in names
    assert "trainperf/analysis/trace/documented.py" in names


def test_the_core_names_load_nothing_heavy() -> None:
    code = (
        "import sys, trainperf\n"
        "trainperf.__version__, trainperf.Finding, trainperf.FindingId, trainperf.Rule\n"
        "trainperf.function_rule, trainperf.TraceFindingId, trainperf.AlertName\n"
        "print(sorted(m for m in ('lightning', 'rich', 'matplotlib', 'torch.profiler')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_api_page_shows_every_public_name() -> None:
    text = API_DOC.read_text(encoding="utf-8")
    missing = [name for name in trainperf.__all__ if f"trainperf.{name}" not in text]
    assert missing == []
