"""``scripts/structure_counts.py``'s line accounting (issue 20): the kinds of a file's lines, and
the table of modules later issues created, which must name files that exist."""

from __future__ import annotations

from pathlib import Path

from scripts.structure_counts import LATER_FEATURES, line_kinds

REPO = Path(__file__).resolve().parents[2]


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
    missing = [rel for rel in paths if not (REPO / "ocr" / rel).is_file()]
    assert missing == []
