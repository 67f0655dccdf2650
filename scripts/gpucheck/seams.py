"""The seam tests (the ones pinning Lightning / torch behaviour the toolkit relies on) on this
machine's torch and Lightning, counted from pytest's JUnit XML."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from scripts.gpucheck.runs import run_logged

SEAM_TESTS = (
    "packages/trainperf/tests/integration/test_interpose_seams.py",
    "packages/trainperf/tests/integration/test_action_routing.py",
    "packages/trainperf/tests/integration/test_lightning_profiler_traces.py",
    "packages/trainperf/tests/integration/test_trace_phases.py",
    "tests/integration/test_trace_clock_agreement.py",
)


def junit_counts(path: Path) -> dict[str, Any]:
    """Tests, failures, errors, skips and the failing test ids of a pytest JUnit XML file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures")}
    counts |= {key: sum(int(s.get(key, 0)) for s in suites) for key in ("errors", "skipped")}
    failing = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return {**counts, "failing": failing}


def seam_tests(mode: str, work: Path) -> dict[str, Any]:
    """``run``: the seam tests on this machine's torch and Lightning (JUnit counts); ``list``:
    only collect them (how many, no run)."""
    # importlib mode: the toolkit's tests and the app's share one session without their module
    # names meeting (packages/trainperf/tests has no `tests` package to shadow the app's)
    pytest_argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--import-mode=importlib",
    ]
    pytest_argv += SEAM_TESTS
    log = work / f"seams-{mode}.log"
    if mode == "list":
        rc = run_logged([*pytest_argv, "--collect-only", "-q"], log)
        ids = [line for line in log.read_text().splitlines() if "::" in line]
        return {"mode": mode, "rc": rc, "collected": len(ids), "files": list(SEAM_TESTS)}
    junit = work / "seams.xml"
    rc = run_logged([*pytest_argv, "-q", f"--junitxml={junit}"], log)
    return {"mode": mode, "rc": rc, "files": list(SEAM_TESTS), **junit_counts(junit)}
