"""No import cycles in ``ocr/`` (issue 20) nor in ``trainperf`` (issue 34): counted by
``scripts/structure_counts.py`` the way its report does, imports inside functions and under
``if TYPE_CHECKING:`` included (deferring an import hides a cycle, it does not remove it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _structure_counts() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "structure_counts", REPO / "scripts" / "structure_counts.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ocr_has_no_import_cycles() -> None:
    assert _structure_counts().import_cycles(REPO / "ocr") == []


def test_trainperf_has_no_import_cycles() -> None:
    toolkit = REPO / "packages" / "trainperf" / "src" / "trainperf"
    assert _structure_counts().import_cycles(toolkit) == []


def test_the_count_sees_a_cycle_made_of_function_level_imports(tmp_path: Path) -> None:
    # the check can fail: two modules importing each other, one of them inside a function
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from pkg import a\n\n    return a\n")
    assert _structure_counts().import_cycles(pkg) == [["pkg.a", "pkg.b"]]


def test_the_count_sees_a_cycle_made_of_type_checking_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import B\n\nclass A(B): ...\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.a import A\n\n"
        "class B: ...\n"
    )
    assert _structure_counts().import_cycles(pkg) == [["pkg.a", "pkg.b"]]


def test_the_count_sees_a_package_that_re_exports_a_module_importing_it(tmp_path: Path) -> None:
    # `pkg/__init__` re-exports `f` from `pkg.a`, which imports `g` from the package itself
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import f\n\ndef g():\n    return 1\n")
    (pkg / "a.py").write_text("from pkg import g\n\ndef f():\n    return g()\n")
    assert _structure_counts().import_cycles(pkg) == [["pkg", "pkg.a"]]
