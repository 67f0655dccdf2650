"""No import cycles in ``ocr/`` (issue 20): counted by ``scripts/structure_counts.py`` the way
its report does, imports inside functions included (deferring an import hides a cycle, it does
not remove it)."""

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


def test_the_count_sees_a_cycle_made_of_function_level_imports(tmp_path: Path) -> None:
    # the check can fail: two modules importing each other, one of them inside a function
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text("def g():\n    from pkg import a\n\n    return a\n")
    assert _structure_counts().import_cycles(pkg) == [["pkg.a", "pkg.b"]]
