"""``scripts/structure_counts.py``'s line accounting (issue 20): the kinds of a file's lines, and
the table of modules later issues created (which must name files that exist), and the git blame
that credits later issues' commits; the toolkit's layout (issue 34): at most ``MAX_TOP_ENTRIES``
entries at its top, no two modules with the same base name beyond ``__init__``, ``cli`` and
``errors``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from scripts import structure_counts
from scripts.structure_counts import (
    LATER_COMMITS,
    LATER_FEATURES,
    MAX_TOP_ENTRIES,
    TOOLKIT,
    blamed_later_lines,
    is_shim,
    line_kinds,
    shared_base_names,
    toolkit_lines_at,
    top_entries,
)

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / TOOLKIT


def test_line_kinds_tell_code_docstrings_comments_and_blanks_apart(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        '"""Module doc,\n\nover three lines."""\n'
        "\n"
        "# a comment\n"
        "def f(x: int) -> int:\n"
        '    """One line."""\n'
        '    text = """not a docstring"""\n'
        "    return x  # trailing comments stay code\n"
    )
    kinds = line_kinds(source)
    assert kinds == {"doc": 4, "blank": 1, "comment": 1, "code": 3}


def test_every_module_credited_to_a_later_issue_exists() -> None:
    paths = [rel for _, rels in LATER_FEATURES.values() for rel in rels]
    assert len(paths) == len(set(paths))
    missing = [rel for rel in paths if not (KIT / rel).is_file()]
    assert missing == []


def test_the_toolkit_has_at_most_max_top_entries_at_its_top() -> None:
    top = top_entries(KIT)
    assert "__pycache__" not in top
    assert len(top) <= MAX_TOP_ENTRIES, top


def test_no_two_toolkit_modules_share_a_base_name() -> None:
    assert shared_base_names(KIT) == {}


def test_shared_base_names_count_packages_by_their_folder(tmp_path: Path) -> None:
    # the check can fail: a package `report/` beside a module `report.py`, two `load.py`
    root = tmp_path / "kit"
    for folder in ("a", "a/report", "b", "b/__pycache__"):
        (root / folder).mkdir(parents=True)
    for name in ("__init__", "a/__init__", "a/report/__init__", "b/__init__", "b/cli", "a/cli"):
        (root / f"{name}.py").write_text("")
    for name in ("a/load", "b/load", "b/report", "b/errors", "a/errors", "b/__pycache__/x"):
        (root / f"{name}.py").write_text("")
    (root / "a" / "data").mkdir()  # not a package: its name is no module's
    (root / "b" / "data.py").write_text("")
    (root / "py.typed").write_text("")  # the typing marker is not a top entry
    assert shared_base_names(root) == {
        "load": ["a/load.py", "b/load.py"],
        "report": ["a/report", "b/report.py"],
    }
    assert top_entries(root) == ["__init__.py", "a", "b"]


_SHIM = (
    '"""Moved to :mod:`kit.a.load`."""\n\n'
    "from trainperf.core.moved import moved_module\n\n"
    '__getattr__ = moved_module(__name__, "kit.a.load")\n'
)


def test_a_shim_keeps_its_old_base_name_without_counting(tmp_path: Path) -> None:
    # an old path kept for one release (trainperf.core.moved) beside the module it moved to
    root = tmp_path / "kit"
    for folder in ("a", "b", "old"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "a" / "load.py").write_text('"""Loads."""\n\ndef load() -> None: ...\n')
    (root / "b" / "load.py").write_text(_SHIM)
    (root / "old" / "__init__.py").write_text(_SHIM.replace("kit.a.load", "kit.a"))
    (root / "a" / "old.py").write_text('"""Not a shim: it does more."""\n\nX = 1\n' + _SHIM)
    assert is_shim(root / "b" / "load.py")
    assert not is_shim(root / "a" / "old.py")
    assert shared_base_names(root) == {}
    (root / "b" / "load.py").write_text(_SHIM + "\nEXTRA = 1\n")  # no longer only a shim
    assert shared_base_names(root) == {"load": ["a/load.py", "b/load.py"]}


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_blame_credits_only_the_listed_commits_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "pkg"
    (root / "perf").mkdir(parents=True)
    _git(tmp_path, "init", "-q")
    module = root / "perf" / "m.py"
    module.write_text("a = 1\nb = 2\nc = 3\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    first = _git(tmp_path, "rev-parse", "HEAD")
    module.write_text("a = 1\nb = 2\nc = 3\nd = 4\ne = 5\n")
    _git(tmp_path, "commit", "-qam", "second")
    second = _git(tmp_path, "rev-parse", "HEAD")
    monkeypatch.setattr(structure_counts, "LATER_COMMITS", {21: second[:8], 22: "0" * 8})
    assert blamed_later_lines(root, [Path("perf/m.py")]) == {21: 2}
    monkeypatch.setattr(structure_counts, "LATER_COMMITS", {25: second[:7]})  # any prefix length
    assert blamed_later_lines(root, [Path("perf/m.py")]) == {25: 2}
    assert toolkit_lines_at(root, first, ("perf",)) == 3
    assert toolkit_lines_at(root, "HEAD", ("perf",)) == 5
    # the toolkit's old and new homes: whichever existed at the revision
    assert toolkit_lines_at(tmp_path, "HEAD", ("pkg/perf", "pkg/elsewhere")) == 5


def test_a_revision_git_does_not_know_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "pkg"
    (root / "perf").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    _git(tmp_path, "init", "-q")
    with pytest.raises(SystemExit) as exit_info:
        structure_counts.main(
            ["--root", str(root), "--toolkit", str(root), "--before", "no-such-rev"]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: git ls-tree in" in err
    assert "no-such-rev" in err
    assert "Traceback" not in err


def _in_git_checkout() -> bool:
    probe = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True)
    return probe.returncode == 0


def test_the_report_prints_the_layout_and_both_cycle_counts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    assert structure_counts.main([]) == 0
    out = capsys.readouterr().out
    assert f"entries at the top of {TOOLKIT}/: " in out
    assert "import cycles in ocr/: 0" in out
    assert f"import cycles in {TOOLKIT}/: 0" in out


@pytest.mark.skipif(
    not _in_git_checkout() and os.environ.get("CI") != "true",
    reason="not a git checkout (an export): the listed commits cannot be looked up",
)
def test_every_listed_later_commit_is_in_this_history() -> None:
    hashes = [c for commits in LATER_COMMITS.values() for c in commits.split()]
    assert len(hashes) == len(set(hashes))
    unknown = [
        c
        for c in hashes
        if subprocess.run(
            ["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=REPO, capture_output=True
        ).returncode
    ]
    assert unknown == []
