"""The public API as a user types it: ``examples/typed_api.py`` (everything from ``import
trainperf``) passes ``mypy --strict`` against the package's own annotations (its ``py.typed``),
and runs on a run folder a plain loop with a planted slow ``__getitem__`` writes here: the
verdict names the input wait, the trace analysis sees it, the gate passes the run against
itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import trainperf
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainperf.loop import Monitor
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "typed_api.py"
#: The folder that holds the ``trainperf`` this test imports: mypy, run by this interpreter,
#: finds the package on the same search path as an installed package (its py.typed decides).
SOURCE_ROOT = Path(trainperf.__file__).resolve().parents[1]


class SlowItems(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Eight features per sample, each ``__getitem__`` sleeping ``sleep_s`` (the planted cause)."""

    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.sleep_s)
        return torch.randn(8), torch.randn(1)


@pytest.fixture(scope="module")
def input_bound_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three epochs of a tiny model whose batches take 4 x 5 ms to load; epoch 1 profiled."""
    run = tmp_path_factory.mktemp("typed") / "run"
    net = nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(SlowItems(16, 0.005), batch_size=4)
    schedule = ProfileSchedule(epochs=[1], active=2, warmup=1)
    trace = TraceOptions(activities=["cpu"], profile_memory=False, record_shapes=False)
    with Monitor(run, net, opt, live=False, profile=schedule, trace=trace) as mon:
        for _ in range(3):
            for x, y in mon.train(loader):
                loss = nn.functional.mse_loss(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                for x, _y in mon.validate(loader):
                    net(x)
    return run


def _mypy(*files: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` on ``files`` from ``cwd`` (no project config there), with the imported
    trainperf's folder first on the search path."""
    env = dict(os.environ, PYTHONPATH=str(SOURCE_ROOT))
    argv = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cwd / ".mypy_cache")]
    return subprocess.run(
        [*argv, *map(str, files)], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def test_the_script_passes_mypy_strict_and_the_types_are_real(tmp_path: Path) -> None:
    """The example passes; a script misusing the API (a ``str`` version as an ``int``, a list of
    findings as a dict) fails on exactly those lines: trainperf's annotations were read, not
    replaced by ``Any`` (a package without ``py.typed`` is an ``import-untyped`` error)."""
    wrong = tmp_path / "wrong_use.py"
    wrong.write_text(
        "import trainperf\n"
        "version: int = trainperf.__version__\n"
        "def ids(run: trainperf.RunData) -> dict[str, str]:\n"
        "    return trainperf.build_report(run).findings\n",
        encoding="utf-8",
    )
    proc = _mypy(SCRIPT, Path(wrong.name), cwd=tmp_path)
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[0:2] for e in errors] == [
        [wrong.name, "2"],
        [wrong.name, "4"],
    ], proc.stdout + proc.stderr
    assert 'expression has type "str", variable has type "int"' in errors[0]
    assert '"list[Finding]", expected "dict[str, str]"' in errors[1]


def test_the_script_runs_on_a_run_folder(input_bound_run: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(input_bound_run)],
        env=dict(os.environ, PYTHONPATH=str(SOURCE_ROOT)),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"trainperf {trainperf.__version__}"
    # the planted cause: the verdict's input_bound (ranked first), the trace's data_loading
    ids = [line.split(":")[0].strip() for line in lines if line.startswith("  ")]
    assert ids[0] == trainperf.FindingId.INPUT_BOUND
    assert any(line.startswith("input-bound: ") for line in lines)
    assert any(line.startswith("trace: 2 steps, data loading") for line in lines)
    assert any(line.startswith("  the trace says: ") for line in lines)
    assert any(line.startswith("  top_cpu_ops (op_name, time_us): [('") for line in lines)
    assert lines[-1].startswith("gate: pass (")
