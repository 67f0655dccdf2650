"""The old import paths issue 40's renames keep for one release (:mod:`trainperf.core.moved`): every
shim module of the package is found and imported, every old name it serves warns with a
``DeprecationWarning`` naming the new path and is the very same object as the new path's, and no
module of the project itself imports an old path (the package's own code imports only the new
ones)."""

from __future__ import annotations

import ast
import importlib
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import trainperf
from trainperf.core import moved

#: The folder holding the ``trainperf`` package.
SRC = Path(trainperf.__file__).resolve().parents[1]
#: The repository: the folder above this test holding ``packages/trainperf`` (or, in the toolkit
#: alone, the toolkit's own folder).
REPO = next(
    (p for p in Path(__file__).resolve().parents if (p / "packages" / "trainperf").is_dir()),
    SRC.parent,
)
#: Where the project's own code lives (tests too, this file aside: it imports old paths by name);
#: folders missing in this checkout are skipped.
OWN_CODE = (
    "packages/trainperf/src",
    "packages/trainperf/tests",
    "src",
    "tests",
    "ocr",
    "examples",
    "scripts",
    "benchmarks",
)


def is_shim(path: Path) -> bool:
    """Whether the module at ``path`` is only an old path: a docstring, imports and ``__getattr__
    = moved_module(...)`` (the shape :mod:`trainperf.core.moved` documents)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    body = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom)]
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return (
        len(body) == 1
        and isinstance(body[0], ast.Assign)
        and [getattr(t, "id", None) for t in body[0].targets] == ["__getattr__"]
        and isinstance(body[0].value, ast.Call)
        and getattr(body[0].value.func, "id", None) == "moved_module"
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _shim_files() -> list[Path]:
    return sorted(p for p in (SRC / "trainperf").rglob("*.py") if is_shim(p))


def _shims() -> dict[str, str]:
    """Every shim of the package imported, so that :data:`trainperf.core.moved.SHIMS` holds all
    of them (a module renaming a name in place, which is no shim file, registers on import too)."""
    for path in _shim_files():
        importlib.import_module(_module_name(path))
    return dict(moved.SHIMS)


def _served(old: str, new: str) -> Iterator[tuple[str, str]]:
    """(old name, new name) for each name the shim ``old`` serves from ``new``."""
    renamed = moved.RENAMED[old]
    yield from renamed.items()
    if old in moved.MOVED_NAMES:  # a module that stays, some names moved away: only those
        yield from ((name, name) for name in sorted(moved.MOVED_NAMES[old]))
        return
    if old == new:
        return  # a name renamed in a module that stays: only the renamed names
    target = importlib.import_module(new)
    own = vars(importlib.import_module(old))
    public = getattr(target, "__all__", None) or _defined(target)
    for name in public:
        if name in own or name in renamed or isinstance(getattr(target, name), types.ModuleType):
            continue
        yield name, name


def _defined(module: types.ModuleType) -> list[str]:
    """The public names ``module``'s own source defines at its top (not those it imports)."""
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def test_every_shim_file_is_registered_and_points_at_a_module_that_exists() -> None:
    files = _shim_files()
    assert files, "no shim found: the walk over the package's files is broken"
    shims = _shims()
    for path in files:
        assert _module_name(path) in shims, path
    for old, new in shims.items():
        assert importlib.import_module(new).__name__ == new, old


@pytest.mark.parametrize("old", sorted(_shims()))
def test_each_old_name_warns_and_is_the_new_object(old: str) -> None:
    new = moved.SHIMS[old]
    shim = importlib.import_module(old)
    target = importlib.import_module(new)
    served = list(_served(old, new))
    if not served:  # a package kept only so that its moved modules' old paths resolve
        assert hasattr(shim, "__path__"), f"{old} serves no name of {new}"
        assert any(other.startswith(old + ".") for other in moved.SHIMS), old
    for old_name, new_name in served:
        with pytest.warns(DeprecationWarning, match=rf"{new}\.{new_name}\b") as caught:
            value = getattr(shim, old_name)
        assert value is getattr(target, new_name), (old, old_name)
        assert moved.REMOVED_IN in str(caught[0].message)
    assert not hasattr(shim, "no_such_name_anywhere")


def test_a_shim_serves_what_moved_and_a_rename_in_place_stops_at_its_names() -> None:
    # the machinery itself, on modules written here (the package's shims may change)
    moved_module = moved.moved_module
    get = moved_module("trainperf_test_old_path", "trainperf.core.moved")
    renamed = moved_module("trainperf.core.moved", "trainperf.core.moved", {"OLD_SHIMS": "SHIMS"})
    try:
        with pytest.warns(DeprecationWarning, match="trainperf.core.moved.REMOVED_IN"):
            assert get("REMOVED_IN") == moved.REMOVED_IN
        with pytest.warns(DeprecationWarning, match="trainperf.core.moved.SHIMS"):
            assert renamed("OLD_SHIMS") is moved.SHIMS
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(AttributeError):
                renamed("missing")  # no endless lookup in a module that stays
            with pytest.raises(AttributeError):
                get("__path__")
    finally:
        for old in ("trainperf_test_old_path", "trainperf.core.moved"):
            moved.SHIMS.pop(old, None)
            moved.RENAMED.pop(old, None)


def test_names_moved_out_of_a_module_that_stays_are_the_only_ones_it_serves(
    tmp_path: Path,
) -> None:
    partly = moved.moved_module("trainperf_test_stays", "trainperf.core.moved", only={"SHIMS"})
    try:
        with pytest.warns(DeprecationWarning, match="trainperf.core.moved.SHIMS"):
            assert partly("SHIMS") is moved.SHIMS
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(AttributeError):
                partly("REMOVED_IN")  # the new module has it, but it did not move from here
        source = tmp_path / "user.py"
        source.write_text(
            "from trainperf_test_stays import SHIMS\nfrom trainperf_test_stays import other\n"
        )
        found = _old_path_imports(
            source, {"trainperf_test_stays": "trainperf.core.moved"}, tmp_path
        )
        assert found == ["user.py:1 imports trainperf_test_stays.SHIMS (now trainperf.core.moved)"]
    finally:
        moved.SHIMS.pop("trainperf_test_stays", None)
        moved.RENAMED.pop("trainperf_test_stays", None)
        moved.MOVED_NAMES.pop("trainperf_test_stays", None)


def _imports(tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """(line, module, imported name or ``None``) of each absolute import in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield node.lineno, node.module, alias.name


def _old_path_imports(path: Path, shims: dict[str, str], root: Path = REPO) -> list[str]:
    """``path:line imports OLD (now NEW)`` for each import in ``path`` of an old path of
    ``shims`` (a renamed name, for a module that stays)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for line, module, name in _imports(tree):
        full = f"{module}.{name}" if name else module
        for old, new in shims.items():
            if old in moved.MOVED_NAMES:  # a name moved out of a module that stays
                hit = module == old and name in moved.MOVED_NAMES[old]
            elif old == new:
                hit = module == old and name in moved.RENAMED[old]  # a renamed name
            else:
                hit = old in (module, full) or module.startswith(old + ".")
            if hit:
                found.append(f"{path.relative_to(root)}:{line} imports {full} (now {new})")
    return found


def test_no_module_of_the_project_imports_an_old_path() -> None:
    shims = _shims()
    shim_files = set(_shim_files())
    found: list[str] = []
    seen: set[Path] = set()
    for folder in OWN_CODE:
        if not (REPO / folder).is_dir():
            continue
        for path in sorted((REPO / folder).rglob("*.py")):
            path = path.resolve()
            if path in seen or path in shim_files or path == Path(__file__).resolve():
                continue
            seen.add(path)
            found += _old_path_imports(path, shims)
    assert seen, f"no code found under {REPO}"
    assert found == []


def test_the_import_check_can_fail(tmp_path: Path) -> None:
    shims = {"trainperf.old.place": "trainperf.new.place", "trainperf.stays": "trainperf.stays"}
    moved.RENAMED["trainperf.stays"] = {"old_name": "new_name"}
    try:
        source = tmp_path / "user.py"
        source.write_text(
            "import trainperf.old.place\n"
            "from trainperf.old import place\n"
            "from trainperf.old.place import thing\n"
            "from trainperf.stays import old_name, other\n"
            "from trainperf.new.place import thing as fine\n"
            "from trainperf.stays import new_name\n"
        )
        found = _old_path_imports(source, shims, root=tmp_path)
    finally:
        moved.RENAMED.pop("trainperf.stays", None)
    assert [line.split(" ", 1)[0] for line in found] == [
        "user.py:1",
        "user.py:2",
        "user.py:3",
        "user.py:4",
    ]
    assert found[3] == "user.py:4 imports trainperf.stays.old_name (now trainperf.stays)"
