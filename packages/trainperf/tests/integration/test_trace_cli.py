"""``trainperf analyze`` / ``trainperf compare`` end to end: outputs and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from trainperf.cli.main import main
from trainperf.core.clock import PHASES as CLOCK_PHASES

from trainperf_testing.synth import make_trace, write


@pytest.fixture
def traces(tmp_path: Path) -> dict[str, Path]:
    return {
        "base": write(make_trace(seed=1), tmp_path / "base.json"),
        "again": write(make_trace(seed=2), tmp_path / "again.json.gz"),
        "slow": write(make_trace(seed=3, conv_us=600), tmp_path / "slow.json"),
    }


def test_analyze_writes_json_and_markdown(
    traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json, out_md = tmp_path / "out" / "r.json", tmp_path / "r.md"
    rc = main(
        [
            "analyze",
            str(traces["base"]),
            "--top-k",
            "3",
            "--json",
            str(out_json),
            "--markdown",
            str(out_md),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Top CPU ops" in printed
    assert "data_wait" in printed  # the step breakdown speaks the phase clock's names
    assert "Data loading takes" in printed
    report = json.loads(out_json.read_text())
    assert len(report["top_cpu_ops"]) == 3
    assert set(report["phase_summary"]["train"]["phases"]) <= set(CLOCK_PHASES)
    assert set(report["steps"][0]["phases_ms"]) <= set(CLOCK_PHASES)
    assert report["findings"][0]["id"] == "data_loading"
    assert "## Findings" in out_md.read_text()


def test_analyze_gpu_fixture_directory(
    traces_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(traces_dir), "--top-k", "5"]) == 0
    printed = capsys.readouterr().out
    assert "Top device kernels" in printed
    assert "gpu idle" in printed


def test_bad_input_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], traces: dict[str, Path]
) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text(traces["base"].read_text()[:500])
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "truncated" in err
    assert main(["compare", str(traces["base"]), str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_compare_exit_codes(traces: dict[str, Path], tmp_path: Path) -> None:
    base, again, slow = traces["base"], traces["again"], traces["slow"]
    out = tmp_path / "cmp.json"
    assert (
        main(["compare", str(base), str(slow), "--fail-on-regression", "10", "--json", str(out)])
        == 1
    )
    result = json.loads(out.read_text())
    assert result["verdict"]["verdict"] == "regression"
    assert main(["compare", str(base), str(again), "--fail-on-regression", "10"]) == 0
    # without the gate a regression is reported but does not fail
    assert main(["compare", str(base), str(slow)]) == 0
    # a regression smaller than the allowed percentage passes the gate
    assert main(["compare", str(base), str(slow), "--fail-on-regression", "80"]) == 0


def test_console_script_runs(traces: dict[str, Path]) -> None:
    script = Path(sys.executable).with_name("trainperf")
    if not script.exists():
        pytest.fail(f"{script} missing: run `pip install -e .` so the console script exists")
    proc = subprocess.run(
        [
            str(script),
            "compare",
            str(traces["base"]),
            str(traces["slow"]),
            "--fail-on-regression",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "REGRESSION" in proc.stdout


def test_report_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainperf_testing.runs import epoch_record, make_run

    phases = {"data_wait": 3.0, "forward": 1.0, "backward": 1.0}
    run = make_run(tmp_path / "run", [epoch_record("train", e, phases) for e in (0, 1)])
    assert main(["report", str(run), "--markdown", str(tmp_path / "r.md")]) == 0
    assert (run / "perf" / "report.html").is_file()
    assert (tmp_path / "r.md").read_text().startswith("#")
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def test_help_lists_every_command_and_imports_nothing_heavy() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from trainperf.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'numpy', 'lightning') if m in sys.modules]\n"
        "print(out.getvalue())\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    for command in ("analyze", "compare", "baseline", "check", "report"):
        assert command in proc.stdout
    assert "HEAVY []" in proc.stdout
