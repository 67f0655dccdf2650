"""``scripts/toolkit_check.py`` and ``examples/plain_lightning.py`` (issue 34): the plain Lightning
script with the four monitors trains 2 epochs and ``trainperf report / baseline / check`` exit 0
on its folder, here in the development venv (``make toolkit-check`` runs the same script in a venv
of the toolkit alone); and each check of the script fails when what it checks is broken."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scripts import toolkit_check
from scripts.toolkit_check import Env

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_plain_example_trains_reports_and_passes_its_gate(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "toolkit_check.py"),
            "--in-dev-venv",
            "--keep",
            str(tmp_path),
        ],
        env=dict(os.environ, WANDB_MODE="offline"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    names = (
        "lazy import",
        "plain loop",
        "typed api",
        "hf trainer",
        "plain script",
        "report",
        "baseline",
        "check",
    )
    for name in names:
        assert f"ok   {name} " in out, out[-4000:]
    for name in ("isolation", "no lightning", "distribution", "modules import"):  # toolkit venv
        assert name not in out
    assert "toolkit check passed: 8 checks" in out
    assert (tmp_path / "out" / "hf_run" / "report.html").stat().st_size > 0
    assert (tmp_path / "out" / "loop_run" / "report.html").stat().st_size > 0
    assert (tmp_path / "out" / "report.html").stat().st_size > 0
    baseline = json.loads((tmp_path / "out" / "baseline.json").read_text(encoding="utf-8"))
    assert baseline  # the figures the check compared with
    epochs = (tmp_path / "run" / "perf" / "epochs.jsonl").read_text(encoding="utf-8")
    assert sum(json.loads(line)["stage"] == "train" for line in epochs.splitlines()) == 2


def _dev(tmp_path: Path, isolated: bool = True) -> Env:
    return Env(python=Path(sys.executable), work=tmp_path, isolated=isolated)


def test_isolation_names_the_apps_modules_where_they_import(tmp_path: Path) -> None:
    problems = toolkit_check.check_isolation(_dev(tmp_path))  # the dev venv has the app
    for module in ("cv2", "hydra", "omegaconf", "shapely"):
        assert any(f"`import {module}` works here" in p for p in problems), problems


def test_distribution_names_a_source_tree_and_a_module_not_shipped(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "__init__.py").write_text("", encoding="utf-8")
    (source / "sub" / "not_shipped.py").write_text("", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    problems = toolkit_check.check_distribution(_dev(work), source=source)
    # the dev venv's trainperf is an editable install: imported from its source tree
    assert any("not from" in p and "site-packages" in p for p in problems), problems
    assert any("sub/not_shipped.py" in p and "missing" in p for p in problems), problems


def test_modules_import_names_each_module_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "lib" / "fakepkg"
    (package / "broken").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "fine.py").write_text("import json\n", encoding="utf-8")
    (package / "extra.py").write_text("import not_in_the_extras_xyz\n", encoding="utf-8")
    (package / "broken" / "__init__.py").write_text("1 / 0\n", encoding="utf-8")
    (package / "broken" / "inner.py").write_text("", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    problems = toolkit_check.check_modules_import(_dev(tmp_path, isolated=False), "fakepkg")
    assert sorted(problems) == [
        "fakepkg.broken: ZeroDivisionError: division by zero",
        "fakepkg.extra: ModuleNotFoundError: No module named 'not_in_the_extras_xyz'",
    ]


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def test_a_failing_script_is_named_with_its_exit_and_last_lines(tmp_path: Path) -> None:
    script = _script(tmp_path, 'import sys\nprint("the last words")\nsys.exit(3)\n')
    problems = toolkit_check.check_plain_script(_dev(tmp_path, isolated=False), script)
    assert problems[0] == "script.py exited 3; its last lines:"
    assert "    the last words" in problems


def test_a_run_of_one_epoch_or_without_a_monitors_file_fails(tmp_path: Path) -> None:
    one_epoch = """
        import json, pathlib, sys
        perf = pathlib.Path(sys.argv[1]) / "perf"
        perf.mkdir(parents=True)
        for name in ("resources.jsonl", "profiler.jsonl"):
            (perf / name).write_text("")
        (perf / "epochs.jsonl").write_text(json.dumps({"stage": "train", "epoch": 0}) + "\\n")
    """
    problems = toolkit_check.check_plain_script(
        _dev(tmp_path, isolated=False), _script(tmp_path, one_epoch)
    )
    assert problems == [
        f"{tmp_path / 'run' / 'perf' / 'epochs.jsonl'}: train epochs [0], expected 2"
    ]
    no_profiler = one_epoch.replace('"resources.jsonl", "profiler.jsonl"', '"resources.jsonl",')
    other = tmp_path / "other"
    other.mkdir()
    problems = toolkit_check.check_plain_script(
        _dev(other, isolated=False), _script(other, no_profiler)
    )
    assert problems == [f"{other / 'run' / 'perf'} lacks profiler.jsonl"]


def test_a_failed_step_stops_the_steps_that_need_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def check(name: str, problems: list[str]) -> toolkit_check.Check:
        def run(env: Env) -> list[str]:
            ran.append(name)
            return problems

        return run

    monkeypatch.setattr(
        toolkit_check,
        "plan",
        lambda env, script, stage: (
            [("alone", check("alone", ["broken alone"])), ("fine", check("fine", []))],
            [("first", check("first", ["broken"])), ("second", check("second", []))],
        ),
    )
    code = toolkit_check.main(["--in-dev-venv", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert ran == ["alone", "fine", "first"]  # independent checks all run; the chain stops
    assert "FAIL alone" in out
    assert "     broken alone" in out
    assert "ok   fine" in out
    assert "not run (they need first): second" in out
    assert "toolkit check FAILED (alone, first)" in out


def test_the_plain_loop_example_runs_without_lightning(tmp_path: Path) -> None:
    from scripts.toolkit_check import check_plain_loop

    env = _dev(tmp_path, isolated=False)
    assert check_plain_loop(env) == []
    assert (tmp_path / "loop_run" / "perf" / "run.json").is_file()
    script = tmp_path / "with_lightning.py"
    script.write_text("import lightning\n", encoding="utf-8")
    problems = check_plain_loop(env, script)
    assert problems
    assert "it imported ['lightning'" in "\n".join(problems)


def test_the_hf_example_runs_without_lightning_and_reports(tmp_path: Path) -> None:
    from scripts.toolkit_check import check_hf_trainer

    env = _dev(tmp_path, isolated=False)
    assert check_hf_trainer(env) == []
    info = json.loads((tmp_path / "hf_run" / "perf" / "run.json").read_text(encoding="utf-8"))
    assert info["framework"] == "hf"
    assert (tmp_path / "out" / "hf_run" / "report.html").stat().st_size > 0
    # its own baseline, recorded and then checked: the gate reads an HF folder too
    assert (tmp_path / "out" / "hf_run" / "baseline.json").stat().st_size > 0


def test_typed_api_needs_the_loop_folder_and_fails_on_a_type_error(tmp_path: Path) -> None:
    from scripts.toolkit_check import check_typed_api

    env = _dev(tmp_path, isolated=False)
    script = _script(
        tmp_path,
        """
        import trainperf
        print(f"trainperf {trainperf.__version__}")
        wrong: int = trainperf.__version__
        """,
    )
    assert check_typed_api(env, script) == [
        f"{tmp_path / 'loop_run'} is absent: this check needs the plain loop's folder"
    ]
    (tmp_path / "loop_run" / "perf").mkdir(parents=True)
    problems = check_typed_api(env, script)  # it runs; mypy reads the str and refuses it
    assert problems[0] == "mypy --strict script.py exited 1; its last lines:", problems
    assert any('expression has type "str", variable has type "int"' in p for p in problems)


def test_downstream_names_each_command_that_fails_on_a_folder(tmp_path: Path) -> None:
    from scripts.toolkit_check import downstream

    empty = tmp_path / "no_run"
    empty.mkdir()
    problems = "\n".join(downstream(_dev(tmp_path, isolated=False), empty, "empty"))
    for name in ("report", "baseline"):  # nothing recorded there: both refuse it
        assert f"trainperf {name} (empty)" in problems


def test_the_toolkit_venv_runs_in_two_stages(tmp_path: Path) -> None:
    env = _dev(tmp_path)  # as in the toolkit's venv
    names = {
        stage: [
            name
            for part in toolkit_check.plan(env, toolkit_check.EXAMPLE, stage)
            for name, _ in part
        ]
        for stage in toolkit_check.STAGES
    }
    assert names["without-lightning"] == [
        "isolation",
        "no lightning",
        "distribution",
        "lazy import",
        "plain loop",
        "typed api",
        "hf trainer",
    ]
    assert names["with-lightning"] == [
        "modules import",
        "plain script",
        "report",
        "baseline",
        "check",
    ]
    # the development venv has Lightning: the stage without it says so
    assert toolkit_check.check_no_lightning(env) == [
        "`import lightning` works here: this stage must run without Lightning"
    ]
