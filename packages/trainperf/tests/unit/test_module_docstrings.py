"""Every toolkit module opens with a docstring whose first line says its one job.

The first line is PEP 257's summary: on the opening quotes' line, a sentence ending in a period,
short enough to stay on that line, and followed by a blank line (or the end of the docstring), so
the summary is that line alone. The checker runs on planted sources first (each way a docstring
can fail), then on every module of the installed package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import trainperf

KIT = Path(trainperf.__file__).resolve().parent
#: Longest summary: it fits on the opening quotes' line within the 100-column limit.
MAX_SUMMARY = 97


def docstring_problems(source: str) -> list[str]:
    """What is wrong with the module docstring of ``source`` (empty: nothing)."""
    doc = ast.get_docstring(ast.parse(source), clean=False)
    if doc is None:
        return ["no module docstring"]
    lines = doc.split("\n")
    summary = lines[0].strip()
    if not summary:
        return ["the first line is empty (the summary must start on the opening quotes' line)"]
    problems = []
    if len(lines) > 1 and lines[1].strip():
        problems.append("the summary runs on past its first line (a blank line must follow it)")
    if not summary.endswith("."):
        problems.append("the summary is not a sentence ending in a period")
    if len(summary) > MAX_SUMMARY:
        problems.append(f"the summary is {len(summary)} characters (at most {MAX_SUMMARY})")
    return problems


def kit_modules() -> list[str]:
    return sorted(str(p.relative_to(KIT)) for p in KIT.rglob("*.py"))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = 1\n", "no module docstring"),
        ('"""\nStarts on the next line."""\n', "the first line is empty"),
        ('"""A summary, it seems.\nBut it goes on."""\n', "runs on past its first line"),
        ('"""No period at the end"""\n', "not a sentence ending in a period"),
        ('"""' + "word " * 20 + 'end."""\n', "characters (at most"),
    ],
)
def test_the_check_fails_each_bad_docstring(source: str, expected: str) -> None:
    problems = docstring_problems(source)
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_the_check_passes_a_summary_line_and_its_body() -> None:
    assert (
        docstring_problems('"""One job, said once.\n\nThe details after a blank line.\n"""\n') == []
    )
    assert docstring_problems('"""One line is enough."""\n') == []


def test_every_module_says_its_one_job_on_its_first_line() -> None:
    modules = kit_modules()
    assert "__init__.py" in modules, f"walked the wrong tree: {KIT}"
    assert len(modules) > 100, f"walked the wrong tree: {KIT}"
    failing = {
        rel: problems
        for rel in modules
        if (problems := docstring_problems((KIT / rel).read_text()))
    }
    assert failing == {}, "\n".join(f"{rel}: {'; '.join(p)}" for rel, p in failing.items())
