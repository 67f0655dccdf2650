"""Output that survives logs: with stdout a pipe and ``COLUMNS`` unset (a batch job's log, CI),
the commands' tables keep every status / outcome word and figure name whole on its row, and
``--json -`` puts parseable JSON alone on stdout (the tables go to stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BASELINE = REPO_ROOT / "tests" / "performance" / "baselines" / "synthetic_debug_val.json"


def _perf(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    src = REPO_ROOT / "packages" / "trainperf" / "src"  # this tree's toolkit, not an installed one
    env.update(PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(src)]), TERM="dumb")
    return subprocess.run(
        [sys.executable, "-m", "trainperf.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_check_keeps_each_status_on_its_row_and_json_parses() -> None:
    table = _perf("check", str(BASELINE), str(BASELINE))
    assert table.returncode == 0, table.stderr
    as_json = _perf("check", str(BASELINE), str(BASELINE), "--json", "-")
    assert as_json.returncode == 0, as_json.stderr
    rows = json.loads(as_json.stdout)["rows"]
    assert rows
    lines = table.stdout.splitlines()
    for row in rows:
        assert any(row["figure"] in line and row["status"] in line for line in lines), (
            row["figure"],
            table.stdout,
        )
    assert "verdict" in as_json.stderr  # the human table went to stderr


def test_analyze_keeps_names_and_findings_whole_and_json_parses(traces_dir: Path) -> None:
    trace = str(traces_dir / "gpu_resnet50_2021.pt.trace.json.gz")
    table = _perf("analyze", trace)
    assert table.returncode == 0, table.stderr
    as_json = _perf("analyze", trace, "--json", "-")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["findings"]
    for finding in report["findings"]:
        assert any(finding["title"] in line for line in table.stdout.splitlines()), finding
    assert max(len(line) for line in table.stdout.splitlines()) > 80  # not cut at 80 columns


def test_report_json_states_the_headline_and_the_stages(tmp_path: Path) -> None:
    from trainperf_testing.runs import CONFIG, epoch_record, make_run

    phases = {"data_wait": 3.0, "forward": 1.0, "metric": 0.1}
    run = make_run(
        tmp_path / "run", [epoch_record("val", e, phases) for e in range(2)], config=CONFIG
    )
    out = _perf("report", str(run), "--json", "-")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert "Verdict" in out.stderr  # the terminal summary, beside the JSON
    assert doc["headline"].startswith("input-bound: ")
    assert doc["findings"][0]["id"] == "input_bound"
    assert doc["stages"]["val"]["shares_pct"]["data_wait"] > 70
    assert doc["stages"]["val"]["samples_per_sec"] > 0
