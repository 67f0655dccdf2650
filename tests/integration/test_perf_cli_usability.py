"""``trainperf`` as a user meets it in a terminal: version and help, bad inputs, 80-column
tables, the comparison's wording and the Markdown output (all through a subprocess)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainperf_testing.synth import make_trace, write

REPO = Path(__file__).resolve().parents[2]
BASELINE = REPO / "tests" / "performance" / "baselines" / "synthetic_debug_val.json"
COMMANDS = ("analyze", "compare", "baseline", "check", "report", "try")


def ocr_perf(*args: str, columns: int = 120, **extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS=str(columns))
    env.pop("HYDRA_FULL_ERROR", None)
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "trainperf.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_version_and_help_list_and_describe_every_command() -> None:
    import trainperf

    # ocr-perf is the app's alias of the trainperf command: it reports the toolkit's release
    proc = ocr_perf("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"trainperf {trainperf.__version__}"
    top = ocr_perf("--help").stdout
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s+\S", top, re.MULTILINE), command
        sub = ocr_perf(command, "--help").stdout
        # a description paragraph between the usage and the arguments
        body = sub.split("\n\n")
        assert len(body) >= 3, sub
        assert not body[1].lstrip().startswith(("positional", "options")), sub


def test_report_on_a_folder_that_is_not_a_run_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    # like `trainperf report ocr` from the repository root: a perf/ package, no run files
    folder = tmp_path / "ocr"
    (folder / "perf").mkdir(parents=True)
    (folder / "perf" / "__init__.py").write_text("# source\n")
    (folder / "notes.txt").write_text("mine\n")
    before = _tree(folder)
    for args in ([str(folder)], [str(folder), "--markdown", str(folder / "r.md")]):
        proc = ocr_perf("report", *args)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        assert f"{folder}: not a run directory" in proc.stderr
        assert _tree(folder) == before


def test_analyze_a_yaml_file_says_it_is_not_a_trace(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  max_epochs: 3\n")
    proc = ocr_perf("analyze", str(config))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{config}: not a profiler trace: not JSON" in proc.stderr
    assert "truncated" not in proc.stderr
    full = ocr_perf("analyze", str(config), HYDRA_FULL_ERROR="1")
    assert full.returncode != 0
    assert "Traceback" in full.stderr
    assert "TraceError" in full.stderr
    # a truncated trace still says so
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(make_trace())[:500])
    proc = ocr_perf("analyze", str(cut))
    assert proc.returncode == 2
    assert "file looks truncated" in proc.stderr


def _slower(baseline: dict[str, Any], factor: float) -> dict[str, Any]:
    out = json.loads(json.dumps(baseline))
    for _name, fig in out["figures"].items():
        if fig["unit"] in ("s", "ms", "ms/batch", "ms/image"):
            fig["values"] = [v * factor for v in fig["values"]]
            fig["median"] *= factor
    out["batch_times_s"] = [v * factor for v in out["batch_times_s"]]
    return out


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("│")]


def test_check_at_80_columns_shows_every_status_in_full(tmp_path: Path) -> None:
    current = tmp_path / "current.json"
    doc = json.loads(BASELINE.read_text())
    current.write_text(json.dumps(_slower(doc, 1.5)))
    proc = ocr_perf("check", str(BASELINE), str(current), columns=80)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    cells = [line.split("│")[-2].strip() for line in _table_lines(proc.stdout)]
    statuses = [s for s in cells if s]  # a folded figure name continues on a blank-status line
    assert len(statuses) == len(doc["figures"]) + 1  # + the batch-time distribution
    words = r"regression|improvement|no significant change|missing|not judged"
    assert all(re.fullmatch(rf"({words}|inconclusive( \((regression|improvement)\?\))?)", s)
               for s in statuses), statuses  # fmt: skip
    assert "regression" in statuses
    # the rules that decided, under the table when the "why" column does not fit
    text = " ".join(proc.stdout.split())
    assert "batch_time_s (distribution): regression: " in text
    assert "Mann-Whitney p=" in text
    # peak_rss_gb is GiB (2**30 bytes): shown so, also from a baseline that said "GB"
    wide = ocr_perf("check", str(BASELINE), str(current), columns=160).stdout
    rss = next(line for line in wide.splitlines() if "peak_rss_gb" in line)
    assert "GiB" in rss


def _cells(text: str, column: int) -> list[str]:
    """Column ``column`` of a Rich table, folded continuation lines joined back."""
    names: list[str] = []
    for line in _table_lines(text):
        parts = line.split("│")
        number, cell = parts[1].strip(), parts[column].strip()
        if number:
            names.append(cell)
        elif names:
            names[-1] += cell
    return names


def test_analyze_at_80_columns_keeps_long_op_names_distinct(tmp_path: Path) -> None:
    doc = make_trace()
    prefix = "aten::native_batch_norm_backward_" + "x" * 40
    renames = {"aten::stack": prefix + "_first", "aten::relu": prefix + "_second"}
    for event in doc["traceEvents"]:
        event["name"] = renames.get(event.get("name"), event.get("name"))
    trace = write(doc, tmp_path / "t.json")
    proc = ocr_perf("analyze", str(trace), columns=80)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    top_cpu = proc.stdout.split("Top CPU ops by self time", 1)[1].split("Step breakdown", 1)[0]
    names = _cells(top_cpu, 2)
    assert prefix + "_first" in names
    assert prefix + "_second" in names
    assert len(set(names)) == len(names)


def test_compare_names_the_direction_observed(tmp_path: Path) -> None:
    a = write(make_trace(n_steps=10, conv_us=400, seed=1), tmp_path / "a.json")
    b = write(make_trace(n_steps=10, conv_us=380, seed=2), tmp_path / "b.json")
    proc = ocr_perf("compare", str(a), str(b), "--json", str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads((tmp_path / "c.json").read_text())["verdict"]
    assert verdict["change_pct"] < 0
    assert verdict["direction"] == "faster"
    assert verdict["p_value"] == verdict["p_faster"]
    assert "p(slower)" not in proc.stdout
    assert f"B faster: Mann-Whitney p={verdict['p_faster']:.4f}" in proc.stdout


def test_markdown_has_no_dict_reprs_and_rounded_figures(tmp_path: Path) -> None:
    trace = write(make_trace(), tmp_path / "t.json")
    md = tmp_path / "r.md"
    proc = ocr_perf("analyze", str(trace), "--markdown", str(md))
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    findings = text.split("## Findings", 1)[1]
    assert "Evidence: " in findings
    assert "{" not in findings
    assert "}" not in findings
    assert not re.search(r"\d\.\d{5,}", text), text
    printed = proc.stdout.split("Findings", 1)[1]
    assert "{" not in printed
    assert not re.search(r"\d\.\d{5,}", printed)


@pytest.mark.parametrize("columns", [80, 120])
def test_check_never_squeezes_a_column_to_nothing(tmp_path: Path, columns: int) -> None:
    proc = ocr_perf("check", str(BASELINE), str(BASELINE), columns=columns)
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("┃"))
    cells = [c.strip() for c in header.split("┃")[1:-1]]
    assert "status" in cells
    assert all(cells), header
