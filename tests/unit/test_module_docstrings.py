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

#: Modules that other helpers of issue 40 rewrite at the same time (the verdict rules, the trace
#: rules and alerts, the try / memory-growth renames): their summaries come with those rewrites.
#: Each still fails today (the test below says when one no longer does: drop it from here then).
PENDING = frozenset(
    {
        "alerts/__init__.py",
        "alerts/as_findings.py",
        "alerts/sinks.py",
        "analysis/advice.py",
        "analysis/creep.py",
        "analysis/process_growth.py",
        "analysis/tryouts.py",
        "analysis/verdict/__init__.py",
        "analysis/verdict/compute_rule.py",
        "analysis/verdict/contention_rule.py",
        "analysis/verdict/context.py",
        "analysis/verdict/gpu_rules.py",
        "analysis/verdict/input_causes.py",
        "analysis/verdict/recoverable.py",
        "analysis/verdict/slow_epoch_rule.py",
        "analysis/verdict/sources.py",
        "analysis/verdict/stage_rules.py",
        "analysis/worker_memory.py",
        "cli/tryout/candidate_options.py",
        "cli/tryout/cli.py",
        "cli/tryout/run_guard.py",
        "cli/tryout/session.py",
        "cli/tryout/trial.py",
        "lightning/base.py",
        "present/try_table.py",
        "probe/growth.py",
        "recording/epoch_report.py",
    }
)


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
    failing = {
        rel: problems
        for rel in kit_modules()
        if rel not in PENDING and (problems := docstring_problems((KIT / rel).read_text()))
    }
    assert failing == {}, "\n".join(f"{rel}: {'; '.join(p)}" for rel, p in failing.items())


def test_the_pending_list_is_not_stale() -> None:
    """Every pending module exists and still fails (once fixed, it leaves the list)."""
    modules = set(kit_modules())
    assert modules >= PENDING, sorted(PENDING - modules)
    fixed = sorted(rel for rel in PENDING if not docstring_problems((KIT / rel).read_text()))
    assert fixed == [], f"these now pass; drop them from PENDING: {fixed}"
