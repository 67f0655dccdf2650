"""The toolkit alone (issues 34, 39): ``trainperf`` as a user gets it, checked in a virtualenv that
holds CPU torch and only ``pip install ./packages/trainperf[report,hf]`` (no Lightning), then the
same venv with the ``lightning`` extra added (``make toolkit-check`` builds it as
``.venv-toolkit`` and runs this script with its interpreter twice: ``--stage without-lightning``,
then ``--stage with-lightning``).

Checks, each printed as one ``ok`` / ``FAIL`` line (the stage that runs each in brackets):

1. ``isolation`` [without]: the app's dependencies are absent (``import cv2``, ``hydra``,
   ``omegaconf``, ``shapely``, ``ocr`` fail); ``no lightning`` [without]: nor is Lightning;
2. ``distribution``: ``trainperf`` is imported from the interpreter's site-packages, not from a
   source tree, with every module of ``packages/trainperf/src/trainperf`` in it, and the
   ``trainperf`` command is installed beside the interpreter;
3. ``lazy import``: ``import trainperf`` leaves ``lightning``, ``rich`` and ``matplotlib`` out of
   ``sys.modules``;
4. ``modules import`` [with]: every module of the installed ``trainperf`` imports with only these
   extras (a module that needs something outside them is named with its error);
5. ``plain script`` [with]: ``examples/plain_lightning.py`` (a plain Lightning script with the four
   monitors) trains 2 epochs into a run folder;
6. ``report``, ``baseline``, ``check``: ``trainperf report RUN -o ...``, ``trainperf baseline RUN
   -o B.json --skip-epochs 0`` and ``trainperf check B.json RUN --skip-epochs 0`` exit 0;
7. ``plain loop`` [without]: ``examples/plain_loop.py`` (a plain PyTorch loop with
   ``trainperf.loop.Monitor``) trains 2 epochs without importing Lightning, and ``trainperf
   report``, ``watch``, ``baseline`` and ``check`` on its folder exit 0;
8. ``hf trainer`` [without]: ``examples/hf_trainer.py`` (a Hugging Face ``Trainer`` with
   ``trainperf.hf.PerfCallback``, a tiny BERT from its config) trains 2 epochs with an evaluation
   each without importing Lightning, and the same four commands on its folder exit 0;
9. ``typed api`` [without]: ``python -c "import trainperf; print(trainperf.__version__)"`` prints
   the installed distribution's version and the package holds ``py.typed``;
   ``examples/typed_api.py`` (the public API from ``import trainperf`` alone) runs on the plain
   loop's folder, and ``mypy --strict`` (the development venv's mypy, pointed at this venv's
   interpreter, so it reads the installed package) passes on it.

Everything runs in a temporary folder (removed at the end) with ``PYTHONPATH`` unset, so nothing
of the checkout can stand in for the installed package. Exit 0 when every check holds, 1 otherwise.

    .venv-toolkit/bin/python scripts/toolkit_check.py          # what `make toolkit-check` runs
    .venv/bin/python scripts/toolkit_check.py --in-dev-venv    # the same script and commands in
        # the development venv (the app is there: checks 1, 2 and 4 are skipped, trainperf runs as
        # `python -m trainperf.cli.main` from whatever PYTHONPATH says)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "packages" / "trainperf" / "src" / "trainperf"
EXAMPLE = REPO / "examples" / "plain_lightning.py"
LOOP_EXAMPLE = REPO / "examples" / "plain_loop.py"
HF_EXAMPLE = REPO / "examples" / "hf_trainer.py"
TYPED_EXAMPLE = REPO / "examples" / "typed_api.py"
#: The type checker for ``typed api``: the development venv's (the toolkit's venv has none).
DEV_MYPY = REPO / ".venv" / "bin" / "mypy"
#: Which checks a run makes: all (the development venv), or the toolkit venv's two stages.
STAGES = ("all", "without-lightning", "with-lightning")
#: Runs a script as ``__main__`` with ``sys.argv[1:]`` and then fails if it imported Lightning.
_NO_LIGHTNING = (
    "import runpy, sys; script = sys.argv[1]; sys.argv = sys.argv[1:]; "
    "runpy.run_path(script, run_name='__main__'); "
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
    "('lightning', 'pytorch_lightning', 'lightning_fabric')); "
    "sys.exit(f'it imported {loaded[:3]}') if loaded else None"
)
#: The app's imports, none of which the toolkit's distribution may bring in.
APP_ONLY = ("cv2", "hydra", "omegaconf", "shapely", "ocr")
#: Heavy imports ``import trainperf`` must not make (each name is loaded on first use).
NOT_ON_IMPORT = ("lightning", "rich", "matplotlib")
EPOCHS = 2
#: What each monitor of the example writes under ``RUN/perf`` (ThroughputMonitorCallback's
#: figures are in epochs.jsonl).
MONITOR_FILES = ("epochs.jsonl", "resources.jsonl", "profiler.jsonl")
TAIL_LINES = 40


@dataclass(frozen=True)
class Env:
    """Where and how the checks run."""

    python: Path
    work: Path
    isolated: bool  # a venv of the toolkit alone (False: the development venv)

    @property
    def environ(self) -> dict[str, str]:
        env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1")
        if self.isolated:
            env.pop("PYTHONPATH", None)
            # the venv is installed without bytecode (cheaper): the first import writes it
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def trainperf(self) -> list[str]:
        """The command: the installed entry point in a toolkit venv, the module otherwise."""
        if self.isolated:
            return [str(self.python.parent / "trainperf")]
        return [str(self.python), "-m", "trainperf.cli.main"]


@dataclass(frozen=True)
class Outcome:
    name: str
    problems: list[str]
    seconds: float


def run(env: Env, argv: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        cwd=env.work,
        env=env.environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _python(env: Env, code: str) -> subprocess.CompletedProcess[str]:
    return run(env, [str(env.python), "-c", textwrap.dedent(code)])


def _failed(proc: subprocess.CompletedProcess[str], what: str) -> list[str]:
    if proc.returncode == 0:
        return []
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-TAIL_LINES:]
    return [f"{what} exited {proc.returncode}; its last lines:", *("    " + t for t in tail)]


def check_isolation(env: Env) -> list[str]:
    """The modules of :data:`APP_ONLY` that import (each one a problem)."""
    proc = _python(
        env,
        f"""
        import importlib.util, json
        print(json.dumps([m for m in {list(APP_ONLY)!r} if importlib.util.find_spec(m)]))
        """,
    )
    if proc.returncode != 0:
        return _failed(proc, "the isolation probe")
    found = json.loads(proc.stdout)
    return [f"`import {m}` works here: the venv is not the toolkit alone" for m in found]


def check_no_lightning(env: Env) -> list[str]:
    """Lightning is not installed (the stage that runs the plain loop and Hugging Face alone)."""
    proc = _python(env, "import importlib.util; print(importlib.util.find_spec('lightning'))")
    if proc.returncode != 0:
        return _failed(proc, "the Lightning probe")
    if proc.stdout.strip() != "None":
        return ["`import lightning` works here: this stage must run without Lightning"]
    return []


def check_distribution(env: Env, source: Path = SOURCE) -> list[str]:
    """``trainperf`` comes from site-packages with every source module, and its command exists."""
    proc = _python(
        env,
        """
        import json, sys, sysconfig
        from pathlib import Path
        import trainperf
        root = Path(trainperf.__file__).parent
        print(json.dumps({
            "root": str(root),
            "site": sysconfig.get_paths()["purelib"],
            "modules": sorted(str(p.relative_to(root)) for p in root.rglob("*.py")),
        }))
        """,
    )
    if proc.returncode != 0:
        return _failed(proc, "the distribution probe")
    got = json.loads(proc.stdout)
    root, site = Path(got["root"]).resolve(), Path(got["site"]).resolve()
    problems = []
    if not root.is_relative_to(site):
        problems.append(f"trainperf is imported from {root}, not from {site} (editable or PATH?)")
    wanted = {str(p.relative_to(source)) for p in source.rglob("*.py")}
    missing = sorted(wanted - set(got["modules"]))
    if missing:
        problems.append(
            f"{len(missing)} source module(s) missing from the installed distribution "
            f"(a package without __init__.py?): {', '.join(missing[:10])}"
        )
    command = env.python.parent / "trainperf"
    if not command.exists():
        problems.append(f"the `trainperf` command is not installed ({command} is absent)")
    return problems


def check_lazy_import(env: Env) -> list[str]:
    """``import trainperf`` leaves :data:`NOT_ON_IMPORT` out of ``sys.modules``."""
    proc = _python(
        env,
        f"""
        import json, sys
        import trainperf
        print(json.dumps([m for m in {list(NOT_ON_IMPORT)!r} if m in sys.modules]))
        """,
    )
    if proc.returncode != 0:
        return _failed(proc, "`import trainperf`")
    return [f"`import trainperf` imported {m}" for m in json.loads(proc.stdout)]


def check_modules_import(env: Env, package: str = "trainperf") -> list[str]:
    """Every module of the installed ``package`` imports; a failure names module and error."""
    proc = _python(
        env,
        f"""
        import importlib, json, pkgutil
        root = importlib.import_module({package!r})
        bad = {{}}
        walk = pkgutil.walk_packages(root.__path__, {package + "."!r}, onerror=lambda name: None)
        for info in walk:  # a package that fails is recorded below, then not walked into
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # each failure named, not the first one only
                bad[info.name] = f"{{type(exc).__name__}}: {{exc}}"
        print(json.dumps(bad))
        """,
    )
    if proc.returncode != 0:
        return _failed(proc, "the module walk")
    return [f"{name}: {error}" for name, error in json.loads(proc.stdout).items()]


def check_plain_script(env: Env, script: Path = EXAMPLE) -> list[str]:
    """The example trains :data:`EPOCHS` epochs and each monitor writes its file."""
    problems = _failed(run(env, [str(env.python), str(script), str(env.work / "run")]), script.name)
    if problems:
        return problems
    perf = env.work / "run" / "perf"
    missing = [name for name in MONITOR_FILES if not (perf / name).is_file()]
    if missing:
        return [f"{perf} lacks {', '.join(missing)}"]
    lines = (perf / "epochs.jsonl").read_text(encoding="utf-8").splitlines()
    train = [json.loads(line) for line in lines if line.strip()]
    epochs = sorted(r["epoch"] for r in train if r.get("stage") == "train")
    if len(epochs) != EPOCHS:
        return [f"{perf / 'epochs.jsonl'}: train epochs {epochs}, expected {EPOCHS}"]
    return []


def check_report(env: Env) -> list[str]:
    html = env.work / "out" / "report.html"
    problems = _failed(
        run(env, [*env.trainperf(), "report", str(env.work / "run"), "-o", str(html)]),
        "trainperf report",
    )
    if not problems and not (html.is_file() and html.stat().st_size > 0):
        problems.append(f"trainperf report exited 0 but wrote no {html}")
    return problems


def check_baseline(env: Env) -> list[str]:
    baseline = env.work / "out" / "baseline.json"
    argv = ["baseline", str(env.work / "run"), "-o", str(baseline), "--skip-epochs", "0"]
    return _failed(run(env, [*env.trainperf(), *argv]), "trainperf baseline")


def check_gate(env: Env) -> list[str]:
    baseline = env.work / "out" / "baseline.json"
    argv = ["check", str(baseline), str(env.work / "run"), "--skip-epochs", "0"]
    return _failed(run(env, [*env.trainperf(), *argv]), "trainperf check")


def check_plain_loop(env: Env, script: Path = LOOP_EXAMPLE) -> list[str]:
    """The plain-loop example trains :data:`EPOCHS` epochs without Lightning and its folder
    reports."""
    run_dir = env.work / "loop_run"
    argv = [str(env.python), "-c", _NO_LIGHTNING, str(script), str(run_dir)]
    problems = _failed(run(env, argv), script.name)
    if problems:
        return problems
    lines = (run_dir / "perf" / "epochs.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    epochs = sorted(r["epoch"] for r in records if r.get("stage") == "train")
    if len(epochs) != EPOCHS:
        return [f"{run_dir}/perf/epochs.jsonl: train epochs {epochs}, expected {EPOCHS}"]
    return downstream(env, run_dir, "plain loop")


def check_hf_trainer(env: Env, script: Path = HF_EXAMPLE) -> list[str]:
    """The Hugging Face example trains :data:`EPOCHS` epochs, each with an evaluation, without
    Lightning, and its folder reports."""
    run_dir = env.work / "hf_run"
    argv = [str(env.python), "-c", _NO_LIGHTNING, str(script), str(run_dir)]
    problems = _failed(run(env, argv), script.name)
    if problems:
        return problems
    lines = (run_dir / "perf" / "epochs.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    stages = sorted((r.get("stage"), r.get("epoch")) for r in records)
    wanted = sorted([*(("train", e) for e in range(EPOCHS)), *(("val", e) for e in range(EPOCHS))])
    if stages != wanted:
        return [f"{run_dir}/perf/epochs.jsonl: (stage, epoch) {stages}, expected {wanted}"]
    return downstream(env, run_dir, "Hugging Face")


def check_typed_api(env: Env, script: Path = TYPED_EXAMPLE) -> list[str]:
    """``__version__`` is the distribution's and ``py.typed`` is installed; the typed example
    runs on the plain loop's folder and passes ``mypy --strict`` against the installed package."""
    proc = _python(env, "import trainperf; print(trainperf.__version__)")
    if proc.returncode != 0:
        return _failed(proc, "`import trainperf; print(trainperf.__version__)`")
    version = proc.stdout.strip()
    probe = _python(
        env,
        """
        import importlib.metadata, importlib.resources, json
        typed = importlib.resources.files("trainperf").joinpath("py.typed").is_file()
        print(json.dumps([importlib.metadata.version("trainperf"), typed]))
        """,
    )
    if probe.returncode != 0:
        return _failed(probe, "the version probe")
    dist, typed = json.loads(probe.stdout)
    problems = [] if typed else ["the installed trainperf has no py.typed"]
    if env.isolated and version != dist:  # an editable install's metadata is of its last install
        problems.append(f"trainperf.__version__ is {version!r}, the distribution says {dist!r}")
    run_dir = env.work / "loop_run"
    if not (run_dir / "perf").is_dir():
        return [*problems, f"{run_dir} is absent: this check needs the plain loop's folder"]
    ran = run(env, [str(env.python), str(script), str(run_dir)])
    problems += _failed(ran, script.name)
    if not ran.returncode and not ran.stdout.startswith(f"trainperf {version}\n"):
        problems.append(f"{script.name} printed {ran.stdout[:80]!r}, not 'trainperf {version}'")
    mypy = str(DEV_MYPY) if DEV_MYPY.exists() else shutil.which("mypy")
    if mypy is None:
        return [*problems, f"no mypy to check {script.name} with ({DEV_MYPY} is absent)"]
    cache = str(env.work / ".mypy_cache")
    argv = [mypy, "--strict", "--python-executable", str(env.python), "--cache-dir", cache]
    return problems + _failed(run(env, [*argv, str(script)]), f"mypy --strict {script.name}")


def downstream(env: Env, run_dir: Path, label: str) -> list[str]:
    """The commands that read a run folder, on ``run_dir`` (a folder an adapter other than
    Lightning's wrote): ``report``, ``watch`` (the run has ended: it exits 0), ``baseline`` and
    ``check`` of the run against its own baseline; each must exit 0."""
    out = env.work / "out" / run_dir.name
    out.mkdir(parents=True, exist_ok=True)
    baseline = out / "baseline.json"
    commands = [
        ("report", ["report", str(run_dir), "-o", str(out / "report.html")]),
        ("watch", ["watch", str(run_dir), "--json", "--stale-after", "5"]),
        ("baseline", ["baseline", str(run_dir), "-o", str(baseline), "--skip-epochs", "0"]),
        ("check", ["check", str(baseline), str(run_dir), "--skip-epochs", "0"]),
    ]
    problems: list[str] = []
    for name, argv in commands:
        problems += _failed(run(env, [*env.trainperf(), *argv]), f"trainperf {name} ({label})")
    return problems


Check = Callable[[Env], list[str]]


def plan(
    env: Env, script: Path, stage: str = "all"
) -> tuple[list[tuple[str, Check]], list[tuple[str, Check]]]:
    """(independent checks, the chain from the plain script on: each needs the one before) of
    ``stage`` (:data:`STAGES`)."""
    alone: list[tuple[str, Check]] = []
    if stage != "with-lightning":
        alone = [
            ("lazy import", check_lazy_import),
            ("plain loop", check_plain_loop),
            ("typed api", check_typed_api),  # on the plain loop's folder
            ("hf trainer", check_hf_trainer),
        ]
        if env.isolated:  # the development venv has the app, an editable install and every extra
            alone = [
                ("isolation", check_isolation),
                ("distribution", check_distribution),
                *alone,
            ]
            if stage == "without-lightning":
                alone.insert(1, ("no lightning", check_no_lightning))
    if env.isolated and stage != "without-lightning":
        alone.append(("modules import", check_modules_import))
    chain: list[tuple[str, Check]] = []
    if stage != "without-lightning":
        chain = [
            ("plain script", lambda e: check_plain_script(e, script)),
            ("report", check_report),
            ("baseline", check_baseline),
            ("check", check_gate),
        ]
    return alone, chain


def _timed(name: str, check: Check, env: Env) -> Outcome:
    start = time.perf_counter()
    problems = check(env)
    outcome = Outcome(name, problems, time.perf_counter() - start)
    status = "ok  " if not problems else "FAIL"
    print(f"{status} {name:<15} {outcome.seconds:6.1f} s", flush=True)
    for line in problems:
        print(f"     {line}", flush=True)
    return outcome


def run_checks(env: Env, script: Path = EXAMPLE, stage: str = "all") -> list[Outcome]:
    alone, chain = plan(env, script, stage)
    outcomes = [_timed(name, check, env) for name, check in alone]
    for name, check in chain:
        outcomes.append(_timed(name, check, env))
        if outcomes[-1].problems:
            skipped = [n for n, _ in chain[len(outcomes) - len(alone) :]]
            if skipped:
                print(f"     not run (they need {name}): {', '.join(skipped)}")
            break
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="the interpreter of the venv to check (default: this one)",
    )
    parser.add_argument(
        "--in-dev-venv",
        action="store_true",
        help="the development venv: skip the isolation and distribution checks",
    )
    parser.add_argument("--script", type=Path, default=EXAMPLE, help="the plain script to run")
    parser.add_argument(
        "--stage",
        choices=STAGES,
        default="all",
        help="the checks of the toolkit venv without Lightning (the plain loop and Hugging Face "
        "examples), of it with the lightning extra added, or all (default)",
    )
    parser.add_argument("--keep", type=Path, help="work here and keep the files (default: a temp)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="toolkit-check-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    # not resolved: a venv's bin/python is a link to the base interpreter, and only the link's
    # path knows the venv
    env = Env(python=args.python.absolute(), work=work.resolve(), isolated=not args.in_dev_venv)
    where = "the toolkit's venv" if env.isolated else "the development venv"
    print(f"toolkit check in {where}: {env.python}", flush=True)
    try:
        outcomes = run_checks(env, args.script.resolve(), args.stage)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    failed = [o.name for o in outcomes if o.problems]
    total = sum(o.seconds for o in outcomes)
    if failed:
        print(f"toolkit check FAILED ({', '.join(failed)}) in {total:.1f} s")
        return 1
    print(f"toolkit check passed: {len(outcomes)} checks in {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
