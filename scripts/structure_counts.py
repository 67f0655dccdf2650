"""Counts the structural figures of the toolkit and the app from the code, printing each.

    python scripts/structure_counts.py [--root ocr] [--toolkit packages/trainperf/src/trainperf]
                                       [--json] [--list] [--blame] [--before REV]

- **Layout** of the toolkit (issue 34): the entries at its top (``__pycache__`` and the
  ``py.typed`` marker aside; at most :data:`MAX_TOP_ENTRIES`) and the base names two of its
  modules share (a package counts by its folder's name; :data:`SHARED_BASE_NAMES` may repeat).
- **Any-dict slots**: function parameters and return annotations in the toolkit typed as a
  string-keyed dict / mapping whose values are ``Any`` (``dict[str, Any]``, ``Mapping[str, Any]``,
  ``MutableMapping[str, Any]``, also inside ``| None``, ``list[...]`` and the like).
- **Schema names**: every string literal starting with one of :data:`SCHEMA_PREFIXES` in the app
  and the toolkit (code, not docstrings or comments), and how often each is spelled.
- **Import cycles**: strongly connected components of the import graph of the app and of the
  toolkit. Every import counts: inside functions and under ``if TYPE_CHECKING:`` too (deferring
  an import, or importing it for the type checker only, hides a cycle; it does not remove it).
- **Largest files** of both and the toolkit's line count, split into code, docstring, comment and
  blank lines, and into the modules that issues 21, 22, 24 and 25 created
  (:data:`LATER_FEATURES`, filed with issue 20 and built after its reshaping; paths in the
  toolkit since issue 34 moved it) and the rest. What those issues added to modules they share
  with the rest counts in the rest, unless ``--blame`` is given: then each line of the rest whose
  last writer (``git blame -w -M -C``) is one of :data:`LATER_COMMITS` is credited to that
  issue. A line of any other commit, a cut or a refactoring that rewrote a later issue's line
  included, stays in the rest. ``--before REV`` prints the toolkit's lines at a revision
  (e00c818: when issue 20 was filed), wherever it lived then (:data:`TOOLKIT_PATHS`).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

#: The toolkit's package folder (relative to the repository root).
TOOLKIT = "packages/trainperf/src/trainperf"
#: Where the toolkit lived at any revision (relative to the repository root): before issue 34 it
#: was ``ocr/perf`` and the Lightning callbacks; ``--before`` counts whichever exist at ``REV``.
TOOLKIT_PATHS = ("ocr/perf", "ocr/lightning_modules/callbacks", TOOLKIT)
#: At most this many entries at the toolkit's top (its layers, the framework adapters side by side
#: since issue 39 (``lightning``, ``loop``, ``hf``), ``frameworks`` (their knowledge as data, below
#: them), ``errors.py`` and ``__init__``).
MAX_TOP_ENTRIES = 14
#: Base names more than one of the toolkit's modules may have (each layer has its own).
SHARED_BASE_NAMES = frozenset({"__init__", "cli", "errors"})
#: String literals that are schema names (current and legacy record tags).
SCHEMA_PREFIXES = ("trainperf/", "receipt-ocr/")
_MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}
#: The toolkit modules each later issue created (paths in :data:`TOOLKIT`), by issue number. A
#: module issue 34 split in two (the probe and the verdict's rule) is credited with both halves.
LATER_FEATURES: dict[int, tuple[str, tuple[str, ...]]] = {
    21: (
        "traces at any size and across ranks",
        (
            *(
                f"analysis/trace/{name}.py"
                for name in (
                    "scan",
                    "spill",
                    "windowed",
                    "window_sums",
                    "memory_timeline",
                    "field_sums",
                    "short_names",
                    "rankset",
                    "comms",
                    "integrity",
                )
            ),
            "present/rank_tables.py",
        ),
    ),
    22: (
        "silent slowdowns named with their cause",
        (
            "probe/growth_scan.py",
            "analysis/memory_growth/attributes.py",
            "probe/recompiles.py",
            "analysis/recompile_rules.py",
            "analysis/memory_growth/process.py",
            "analysis/memory_growth/workers.py",
            "probe/sync_debug.py",
            "analysis/trace/stacks.py",
            "lightning/epoch_scan.py",
        ),
    ),
    24: (
        "a run you can watch and read",
        ("cli/watch.py", "present/live.py", "lightning/live_line.py"),
    ),
    25: (
        "trainperf try for any Lightning script",
        ("core/knobs.py", "lightning/knobs_apply.py"),
    ),
}


#: Commits of those issues (short hashes, by issue) that wrote into modules they share with the
#: rest: the features' own commits, named by their messages (``git show --stat HASH``); a commit
#: that served two issues, or whose issue is unclear, is not listed.
LATER_COMMITS: dict[int, str] = {
    21: "404e60f2 1cc68536 7f3afd22 4e1e7db5 8cf79ead f2c726d2 ed731a6b ac174358 a9c9a276"
    " 6843492b 10db7b6e 3f7332f1 efc65280 8f8b2183 5ad8dbaf 7406a1b5 3631cf94 bb02ef15",
    22: "8b7e2339 3587e810 295c7eb0 4d02f857 770138ff 22c81f84 d2809568 2115779c da6a7d40"
    " c6aed1f2 dcec0021 c0e0554e 002aa2d2",
    24: "4a85ef6f 2376a13c 3e0182e3 202c0472 8f7395bf",
    25: "154f32c9 9e61e49d bad452a6 c0d9d1b1",
}


def _is_any_dict(node: ast.AST | None) -> bool:
    """Whether an annotation contains ``dict[str, Any]`` / ``Mapping[str, Any]`` anywhere."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return False
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Subscript):
            continue
        base = sub.value
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
        if name not in _MAPPINGS or not isinstance(sub.slice, ast.Tuple):
            continue
        elts = sub.slice.elts
        if len(elts) == 2:
            value = elts[1]
            vname = value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", None)
            if vname == "Any":
                return True
    return False


def any_dict_slots(files: list[Path]) -> list[str]:
    """``path:line function(slot)`` for each Any-valued dict parameter or return annotation."""
    found: list[str] = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            every += [a for a in (args.vararg, args.kwarg) if a is not None]
            for arg in every:
                if _is_any_dict(arg.annotation):
                    found.append(f"{path}:{node.lineno} {node.name}({arg.arg})")
            if _is_any_dict(node.returns):
                found.append(f"{path}:{node.lineno} {node.name}(return)")
    return found


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                ids.add(id(value))
    return ids


def schema_spellings(
    files: list[Path], prefixes: tuple[str, ...] = SCHEMA_PREFIXES
) -> Counter[str]:
    """How often each string literal starting with one of ``prefixes`` is spelled in ``files``'
    code (docstrings left out)."""
    counts: Counter[str] = Counter()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docs:
                value = node.value
                text = value.decode("latin-1") if isinstance(value, bytes) else value
                if isinstance(text, str) and text.startswith(prefixes):
                    counts[text] += 1
    return counts


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.Module, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """Modules of ``modules`` that ``module`` imports, anywhere: at module level, inside
    functions and under ``if TYPE_CHECKING:`` (deferring an import, or importing it for the type
    checker only, hides a cycle of dependencies; it does not remove it). ``from pkg import sub``
    depends on ``pkg.sub`` (not on ``pkg``) when ``sub`` is a module."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    out.add(sub)
                elif target in modules:
                    out.add(target)
    return out


#: Entries at the toolkit's top that are not code: the bytecode cache, the PEP 561 typing marker.
NOT_CODE = frozenset({"__pycache__", "py.typed"})


def top_entries(root: Path) -> list[str]:
    """The names at the top of package folder ``root`` (:data:`NOT_CODE` left out), sorted."""
    return sorted(p.name for p in root.iterdir() if p.name not in NOT_CODE)


def is_shim(path: Path) -> bool:
    """Whether the module at ``path`` is an old import path kept for one release
    (``trainperf.core.moved``): nothing but a docstring, imports and ``__getattr__ =
    moved_module(...)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    shim = False
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["__getattr__"]
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "moved_module"
        ):
            shim = True
            continue
        return False
    return shim


def shared_base_names(root: Path) -> dict[str, list[str]]:
    """Base names that more than one module or package below ``root`` has (a package counts by
    its folder's name, a module by its file's stem), each with the paths that have it; the names
    of :data:`SHARED_BASE_NAMES` are allowed to repeat, and a shim (:func:`is_shim`: an old path
    that keeps its old name for one release) is left out."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        if path.is_dir() and (path / "__init__.py").is_file():
            if is_shim(path / "__init__.py"):
                continue
            name = path.name
        elif path.is_file() and path.suffix == ".py":
            if is_shim(path):
                continue
            name = path.stem
        else:
            continue
        found.setdefault(name, []).append(path.relative_to(root).as_posix())
    return {
        name: paths
        for name, paths in found.items()
        if len(paths) > 1 and name not in SHARED_BASE_NAMES
    }


def import_cycles(root: Path) -> list[list[str]]:
    """Each import cycle (a strongly connected component of more than one module) of the package
    folder ``root``, by dotted module names, sorted (see :func:`_imports`)."""
    files = sorted(root.rglob("*.py"))
    modules = {_module_name(root, p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = _imports(tree, name, path.name == "__init__.py", set(modules))
        graph[name] = {t for t in targets if t != name}
    # Tarjan's strongly connected components.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return cycles


def line_kinds(path: Path) -> Counter[str]:
    """How many of a file's lines are ``code``, ``doc`` (docstrings), ``comment`` and ``blank``."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    kinds = [
        "blank" if not s.strip() else "comment" if s.strip().startswith("#") else "code"
        for s in lines
    ]
    tree = ast.parse(text, filename=str(path))
    docs = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in docs and isinstance(node, ast.Constant) and node.end_lineno is not None:
            for i in range(node.lineno - 1, node.end_lineno):
                kinds[i] = "doc"
    return Counter(kinds)


class GitError(Exception):
    """A git command failed: no checkout at ``--root``, or an unknown revision."""


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise GitError(f"git {args[0]} in {root}: {why[0]}")
    return done.stdout


def blamed_later_lines(root: Path, files: list[Path]) -> Counter[int]:
    """How many lines of ``files`` each issue of :data:`LATER_COMMITS` wrote last."""
    listed = [(c, issue) for issue, commits in LATER_COMMITS.items() for c in commits.split()]
    issue_of: dict[str, int | None] = {}  # full hash -> its issue (None: not listed)
    counts: Counter[int] = Counter()
    for path in files:
        out = _git(root, "blame", "--line-porcelain", "-w", "-M", "-C", "HEAD", "--", str(path))
        for line in out.splitlines():
            head = line.split(" ", 1)[0]
            if len(head) != 40 or line.count(" ") < 2:
                continue  # a header or content line, not a line's commit
            if head not in issue_of:
                issue_of[head] = next((i for c, i in listed if head.startswith(c)), None)
            issue = issue_of[head]
            if issue is not None:
                counts[issue] += 1
    return counts


def toolkit_lines_at(repo: Path, rev: str, paths: tuple[str, ...] = TOOLKIT_PATHS) -> int:
    """The toolkit's lines at git revision ``rev``: its ``.py`` files under ``paths`` (relative to
    ``repo``, a folder of a checkout) as they were at ``rev``."""
    names = _git(repo, "ls-tree", "-r", "--name-only", rev, "--", *paths).split()
    return sum(
        len(_git(repo, "show", f"{rev}:./{name}").splitlines())
        for name in names
        if name.endswith(".py")
    )


def _rest_files(root: Path, toolkit: list[Path]) -> list[Path]:
    """The toolkit's files outside :data:`LATER_FEATURES`, relative to ``root``."""
    credited = {rel for _, rels in LATER_FEATURES.values() for rel in rels}
    return [p.relative_to(root) for p in toolkit if str(p.relative_to(root)) not in credited]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="ocr", help="the app's package folder (default: ocr)")
    parser.add_argument(
        "--toolkit", default=TOOLKIT, help=f"the toolkit's package folder (default: {TOOLKIT})"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--list", action="store_true", help="list every Any-dict slot")
    parser.add_argument(
        "--blame",
        action="store_true",
        help="credit the rest's lines last written by LATER_COMMITS to their issues (git blame)",
    )
    parser.add_argument("--before", metavar="REV", help="also count the toolkit at git REV")
    args = parser.parse_args(argv)
    app, kit = Path(args.root), Path(args.toolkit)
    for folder in (app, kit):
        if not (folder / "__init__.py").is_file():
            parser.error(f"{folder} is not a package folder")
    app_files, toolkit = sorted(app.rglob("*.py")), sorted(kit.rglob("*.py"))
    every = app_files + toolkit
    slots = any_dict_slots(toolkit)
    schemas = schema_spellings(every)
    cycles = {str(folder): import_cycles(folder) for folder in (app, kit)}
    top = top_entries(kit)
    shared = shared_base_names(kit)
    sizes = sorted(((len(p.read_text().splitlines()), str(p)) for p in every), reverse=True)
    toolkit_lines = sum(len(p.read_text().splitlines()) for p in toolkit)
    kinds: Counter[str] = Counter()
    for p in toolkit:
        kinds += line_kinds(p)
    later = {
        issue: sum(
            len((kit / rel).read_text().splitlines()) for rel in paths if (kit / rel).is_file()
        )
        for issue, (_, paths) in LATER_FEATURES.items()
    }
    rest_lines = toolkit_lines - sum(later.values())
    result: dict[str, object] = {
        "toolkit_top_entries": top,
        "shared_base_names": shared,
        "any_dict_slots": len(slots),
        "schema_spellings": dict(sorted(schemas.items())),
        "schemas_spelled_more_than_once": sorted(k for k, n in schemas.items() if n > 1),
        "import_cycles": cycles,
        "largest_files": [{"lines": n, "path": p} for n, p in sizes[:5]],
        "toolkit_lines": toolkit_lines,
        "app_lines": sum(len(p.read_text().splitlines()) for p in app_files),
        "toolkit_line_kinds": {k: kinds[k] for k in ("code", "doc", "comment", "blank")},
        "later_issue_module_lines": {str(k): v for k, v in later.items()},
        "toolkit_lines_without_later_issue_modules": rest_lines,
    }
    blamed: Counter[int] = Counter()
    before = 0
    try:
        if args.blame:
            blamed = blamed_later_lines(kit, _rest_files(kit, toolkit))
            result["later_issue_lines_in_the_rest"] = {str(k): blamed[k] for k in LATER_COMMITS}
            result["issue_20_scope_lines"] = rest_lines - sum(blamed.values())
        if args.before:
            repo = Path(_git(kit, "rev-parse", "--show-toplevel").strip())
            before = toolkit_lines_at(repo, args.before)
            result["toolkit_lines_before"] = {args.before: before}
    except GitError as exc:
        parser.error(str(exc))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"entries at the top of {kit}/: {len(top)} (at most {MAX_TOP_ENTRIES}): {', '.join(top)}")
    allowed = ", ".join(sorted(SHARED_BASE_NAMES))
    print(f"base names shared by modules of {kit}/ (beyond {allowed}):")
    for name, paths in shared.items():
        print(f"  {name}: {', '.join(paths)}")
    print(f"  {len(shared)} in all")
    print(f"Any-dict signature slots ({kit}): {len(slots)}")
    if args.list:
        for slot in slots:
            print(f"  {slot}")
    print("schema names (spellings in code):")
    for name, n in sorted(schemas.items()):
        print(f"  {name}: {n}")
    for folder, found in cycles.items():
        print(f"import cycles in {folder}/: {len(found)}")
        for cycle in found:
            print("  " + " <-> ".join(cycle))
    print("largest files:")
    for n, name in sizes[:5]:
        print(f"  {n:5d}  {name}")
    print(f"toolkit lines ({kit}): {toolkit_lines}; app lines ({app}/): {result['app_lines']}")
    print("  by kind: " + ", ".join(f"{k} {kinds[k]}" for k in ("code", "doc", "comment", "blank")))
    for issue, (title, paths) in LATER_FEATURES.items():
        print(f"  modules created by issue {issue} ({title}, {len(paths)}): {later[issue]}")
    print(f"  the rest (what issue 20 reshaped, with what later issues added to it): {rest_lines}")
    if args.blame:
        for issue, commits in LATER_COMMITS.items():
            k, n = len(commits.split()), blamed[issue]
            print(f"    of which last written by issue {issue}'s commits ({k} listed): {n}")
        print(f"    issue 20's scope (the rest less those): {rest_lines - sum(blamed.values())}")
    if args.before:
        print(f"toolkit lines at {args.before}: {before}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
