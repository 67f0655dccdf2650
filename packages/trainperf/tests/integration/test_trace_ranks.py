"""``trainperf analyze`` over the rank traces of a real 2-rank gloo DDP run (CPU,
``ProfilerCallback`` on every rank): with a sleep planted in rank 1's ``training_step`` the
analysis names rank 1 and ``forward`` and shows rank 0's wait as communication; without it, no
straggler. The same traces, broken on purpose, give the rank set's integrity problems.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trainperf_testing.paths import child_pythonpath

pytestmark = pytest.mark.slow

# subprocesses import the trainperf under test, not an editable install of another checkout
_PYTHONPATH = child_pythonpath()

SCRIPT = """
import os, sys, time
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainperf.lightning import PerformanceProfilerCallback, ProfilerCallback, ProfileSchedule


class Module(L.LightningModule):
    def __init__(self, sleep_s):
        super().__init__()
        self.sleep_s = sleep_s
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )

    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and self.sleep_s:
            time.sleep(self.sleep_s)  # the planted straggler: rank 1's forward
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(run_dir, sleep_s):
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, num_sanity_val_steps=0,
        limit_train_batches=8, limit_val_batches=0, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=run_dir,
        callbacks=[
            PerformanceProfilerCallback(),
            ProfilerCallback(schedule=ProfileSchedule(epochs=(0,), active=6, warmup=1)),
        ],
    )
    data = TensorDataset(torch.randn(128, 16), torch.randn(128, 1))
    trainer.fit(Module(sleep_s), DataLoader(data, batch_size=8))
    print(f"rank {trainer.global_rank} done {run_dir}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # both runs in one launch (Lightning starts rank 1 once): the DDP start-up is paid once
    fit(sys.argv[1], float(sys.argv[2]))
    fit(sys.argv[3], 0.0)
    # Leave without the interpreter's finalization: tearing down the DDP / Gloo objects there
    # aborted 1 launch in ~10 after a finished run ('terminate called without an active
    # exception', exit -6), destroy_process_group() or not. Output is flushed first.
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)
"""
SLEEP_S = 0.04


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=_PYTHONPATH, WANDB_MODE="offline")


def _record(root: Path) -> tuple[Path, Path]:
    """Two runs of one launch: rank 1 sleeping ``SLEEP_S`` per step, then nobody sleeping."""
    slow, even = root / "slow", root / "even"
    slow.mkdir()
    even.mkdir()
    script = root / "ddp_ranks.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run(
        [sys.executable, str(script), str(slow), str(SLEEP_S), str(even)],
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    for run in (slow, even):
        assert f"rank 0 done {run}" in proc.stdout
        assert f"rank 1 done {run}" in proc.stdout
    return slow, even


def _analyze(trace_dir: Path, out: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainperf.cli.main",
            "analyze",
            str(trace_dir),
            "--json",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=dict(_env(), COLUMNS="200"),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _record(tmp_path_factory.mktemp("ddp_ranks"))


@pytest.fixture(scope="module")
def slow_rank_run(runs: tuple[Path, Path]) -> Path:
    return runs[0]


@pytest.fixture(scope="module")
def even_run(runs: tuple[Path, Path]) -> Path:
    return runs[1]


def test_the_slow_rank_is_named_with_its_cause_and_the_other_rank_waits_in_communication(
    slow_rank_run: Path, tmp_path: Path
) -> None:
    traces = slow_rank_run / "profiler_traces"
    assert sorted(p.name for p in traces.iterdir()) == ["epoch_0_rank0.json", "epoch_0_rank1.json"]
    stdout, doc = _analyze(traces, tmp_path / "a.json", "--jobs", "2")
    (straggler,) = doc["stragglers"]
    assert (straggler["stage"], straggler["rank"], straggler["cause"]) == ("train", 1, "forward")
    # the excess of rank 1's forward is the planted sleep (40 ms per step), within noise
    assert 0.6 * SLEEP_S * 1e3 < straggler["cause_excess_ms"] < 1.6 * SLEEP_S * 1e3
    rows = {r["rank"]: r for r in doc["ranks"]}
    # rank 0 waits for rank 1 in the gradient all-reduce: exposed communication, not backward
    assert rows[0]["comm_exposed_ms"] > 0.6 * SLEEP_S * 1e3
    assert rows[0]["phases_ms"]["sync_wait"] == rows[0]["comm_exposed_ms"]
    assert rows[0]["phases_ms"]["backward"] < 0.5 * rows[0]["comm_exposed_ms"]
    assert rows[1]["comm_exposed_ms"] < 0.5 * rows[0]["comm_exposed_ms"]
    assert rows[0]["comm_method"] == rows[1]["comm_method"] == "host"
    ids = [(f["id"], f["evidence"].get("rank")) for f in doc["findings"]]
    assert ids[0] == ("straggler", 1)
    assert ("communication_bound", 0) in ids
    comm = next(f for f in doc["findings"] if f["id"] == "communication_bound")
    assert "waits for rank 1 (forward)" in comm["suggestion"]
    # the live clock's sync_wait of the same run stands beside it (PerformanceProfilerCallback)
    assert comm["evidence"]["live_sync_wait"]["ranks_max_ms"] > 0
    assert "straggler rank 1, cause forward" in stdout
    assert doc["integrity"] == {"clean": True, "problems": []}
    assert "Integrity" not in stdout
    assert set(doc["analyses"]) == {"0", "1"}
    assert doc["jobs"] == 2


def test_without_the_sleep_there_is_no_straggler(even_run: Path, tmp_path: Path) -> None:
    stdout, doc = _analyze(even_run / "profiler_traces", tmp_path / "a.json", "--jobs", "1")
    assert [(s["stage"], s["rank"]) for s in doc["stragglers"]] == [("train", None)]
    assert "train: no straggler" in stdout
    assert not [f for f in doc["findings"] if f["id"] == "straggler"]
    assert doc["jobs"] == 1


def _shift(src: Path, dst: Path, shift_us: float) -> None:
    doc = json.loads(src.read_text())
    for ev in doc["traceEvents"]:
        if isinstance(ev.get("ts"), int | float):
            ev["ts"] += shift_us
    dst.write_text(json.dumps(doc))


def test_a_rank_whose_clock_is_off_is_an_integrity_problem(
    slow_rank_run: Path, tmp_path: Path
) -> None:
    """Built from the real traces: rank 1's clock shifted by 250 ms."""
    traces = slow_rank_run / "profiler_traces"
    skewed = tmp_path / "skewed"
    skewed.mkdir()
    (skewed / "epoch_0_rank0.json").write_text((traces / "epoch_0_rank0.json").read_text())
    _shift(traces / "epoch_0_rank1.json", skewed / "epoch_0_rank1.json", 250_000.0)
    stdout, doc = _analyze(skewed, tmp_path / "a.json")
    (problem,) = doc["integrity"]["problems"]
    assert problem["id"] == "clock_skew"
    assert problem["rank"] == 1
    assert re.search(r"rank 1's steps end \+2[45]\d\.\d ms", problem["message"]), problem
    assert "Integrity" in stdout
    assert "clock" in stdout
    # per-rank figures stand on each rank's own clock: the straggler is still named
    assert doc["stragglers"][0]["rank"] == 1


def test_a_file_without_a_rank_among_rank_files_is_refused(
    slow_rank_run: Path, tmp_path: Path
) -> None:
    traces = slow_rank_run / "profiler_traces"
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("epoch_0_rank0.json", "epoch_0_rank1.json"):
        (mixed / name).write_text((traces / name).read_text())
    doc = json.loads((traces / "epoch_0_rank1.json").read_text())
    del doc["distributedInfo"]
    (mixed / "stray.json").write_text(json.dumps(doc))
    proc = subprocess.run(
        [sys.executable, "-m", "trainperf.cli.main", "analyze", str(mixed)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 2
    assert "stray.json" in proc.stderr
    assert "no rank" in proc.stderr


def test_the_run_report_shows_one_rank_s_trace_and_the_ranks_side_by_side(
    slow_rank_run: Path, tmp_path: Path
) -> None:
    """Before: the report's trace section summed both ranks' traces into one breakdown (12
    steps) and never showed the per-rank spreads of epochs.jsonl."""
    markdown = tmp_path / "report.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainperf.cli.main",
            "report",
            str(slow_rank_run),
            "-o",
            str(tmp_path / "r.html"),
            "--markdown",
            str(markdown),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = markdown.read_text()
    assert " 6 steps," in text
    assert " 12 steps," not in text
    assert "DDP: the figures below are rank 0's" in text
    # the ranks side by side from the live records: rank 1 works longest in forward
    assert re.search(r"^\| training \| forward \|( [\d.,]+ \|){3} 1 \|$", text, re.M), text
