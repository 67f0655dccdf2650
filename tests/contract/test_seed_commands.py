"""Contract: the seeds' command lines (``../shared/seeds``) run as written, through the app's
entry points: their ``runners/train.py`` / ``runners/test.py`` are ``ocr-train`` / ``ocr-test``,
their ``python ocr/train.py`` runs as it stands. Each command is the seed's, plus only the
overrides that make it tiny (a few generated receipts, 128 px, two batches) and keep it on this
machine; each test names the usage it runs (:data:`tests.contract.seeds.USAGES`)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ocr.data.synth import generate_dataset
from tests.contract.seeds import REPO_ROOT, USAGES

pytestmark = pytest.mark.slow

SMALL = [  # only size and place: the seed's keys stay as written
    "data.canvas_size=128",
    "data.batch_size=2",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    "trainer.enable_progress_bar=false",
]
TRAIN_SMALL = [
    *SMALL,
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.num_sanity_val_steps=0",
    "callbacks.model_summary=null",
]


def _entry(name: str) -> list[str]:
    """The console script ``name`` of this environment (``ocr-train``), or its module."""
    script = Path(sys.executable).with_name(name)
    return [str(script)] if script.exists() else [sys.executable, "-m", name.replace("-", ".")]


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1")
    env.pop("HYDRA_FULL_ERROR", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _args(usage: str) -> list[str]:
    """The overrides of the seed's command line (the words after the script), as a shell
    reads them."""
    words = shlex.split(USAGES[usage].quote.replace("\\\n", " "))  # line continuations
    script = next(i for i, w in enumerate(words) if w.endswith(".py"))
    return words[script + 1 :]


def _in_wandb(run: Path, keys: set[str]) -> set[str]:
    """The ``keys`` missing from the run's offline W&B record (what ``wandb sync`` uploads)."""
    records = list(run.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(records) == 1, records
    data = records[0].read_bytes()
    return {k for k in keys if k.encode() not in data}


@pytest.fixture(scope="module")
def receipts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("receipts")
    generate_dataset(out, splits={"train": 4, "val": 2, "test": 2}, seed=3)
    return out


def test_000_hydra_command_then_its_test_command(tmp_path: Path, receipts: Path) -> None:
    """USAGES["000-hydra"], then USAGES["000-test-command"] on its checkpoint: both exit 0,
    print the verbose table, and the documented keys (000-wandb-keys) reach W&B (offline)."""
    args = _args("000-hydra")
    assert args == [
        "preset=example",
        "callbacks=performance_profiler",
        "callbacks.performance_profiler.verbose=true",
    ]
    run = tmp_path / "train"
    proc = _run(
        [*_entry("ocr-train"), *args, "wandb=true", f"data.dataset_dir={receipts}", *TRAIN_SMALL,
         "trainer.max_epochs=1", f"hydra.run.dir={run}"],
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "batch p95" in proc.stdout  # verbose=true: the epoch tables
    documented = {
        "performance/val_epoch_time",
        "performance/val_batch_mean",
        "performance/val_batch_median",
        "performance/val_batch_p95",
        "performance/val_batch_p99",
        "performance/cpu_memory_percent",
    }
    assert all(f"`{k}`" in USAGES["000-wandb-keys"].quote for k in documented)
    assert not _in_wandb(run, documented)

    test_args = _args("000-test-command")
    assert test_args[1] == "checkpoint_path=outputs/ocr_training/checkpoints/best.ckpt"
    test_args[1] = f"checkpoint_path={next((run / 'checkpoints').glob('best-*.ckpt'))}"
    test_run = tmp_path / "test"
    proc = _run(
        [*_entry("ocr-test"), *test_args, f"data.dataset_dir={receipts}", *SMALL,
         f"hydra.run.dir={test_run}"],
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "batch p95" in proc.stdout
    # ocr-test evaluates the test split: the same figures under performance/test_*
    assert not _in_wandb(test_run, {"performance/test_epoch_time", "baseline_profiling"})


def test_003_integration_test_command_writes_the_epochs_traces(
    tmp_path: Path, receipts: Path
) -> None:
    """USAGES["003-integration"] (and 003-usage, its subset) as written, ``python ocr/train.py``
    included: traces for epochs 1 and 2 only, each a Chrome trace, and the top operations
    printed; ``profile_steps=50`` of a two-batch epoch records what the epoch has."""
    args = _args("003-integration")
    assert set(_args("003-usage")) <= set(args)
    run = tmp_path / "run"
    proc = _run(
        [sys.executable, str(REPO_ROOT / "ocr" / "train.py"), *args, "data.synthetic=null",
         f"data.dataset_dir={receipts}", *TRAIN_SMALL, f"hydra.run.dir={run}"],
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    traces = sorted(p.name for p in (run / "profiler_traces").glob("*.json"))
    assert traces == ["epoch_1.json", "epoch_2.json"]
    assert '"traceEvents"' in (run / "profiler_traces" / "epoch_1.json").read_text()
    assert "Top CPU ops by self time" in proc.stdout


def test_a_flat_key_and_its_grouped_twin_on_one_command_line_is_one_error(tmp_path: Path) -> None:
    """The seed's ``profile_steps`` and today's ``schedule.active`` given differently: one line
    naming both, exit 2, no run folder. Equal values are one setting, not a conflict."""
    run = tmp_path / "run"
    proc = _run(
        [*_entry("ocr-train"), "callbacks.profiler.profile_steps=50",
         "callbacks.profiler.schedule.active=10", f"hydra.run.dir={run}"],
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "ocr-train: error: callbacks.profiler.profile_steps=50 and "
        "callbacks.profiler.schedule.active=10 (command line) disagree (profile_steps is the "
        "flat name of schedule.active); give only one of them"
    ]
    assert not run.exists()


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("callbacks.profiler.active=50", "it moved to callbacks.profiler.schedule.active"),
        (
            "callbacks.profiler.profile_memory=false",
            "it moved to callbacks.profiler.trace.profile_memory",
        ),
        ("callbacks.profiler.trace.warmup=2", "it moved to callbacks.profiler.schedule.warmup"),
        (
            "callbacks.profiler.schedule.profile_steps=50",
            "it moved to callbacks.profiler.profile_steps (= callbacks.profiler.schedule.active)",
        ),
    ],
)
def test_a_key_that_moved_names_where_it_moved(tmp_path: Path, given: str, hint: str) -> None:
    """A setting given where it no longer is gets a hint naming where it is now, not the
    nearest spelling (which suggested ``trace.profile_memory`` for ``profile_steps``)."""
    run = tmp_path / "run"
    proc = _run([*_entry("ocr-train"), given, f"hydra.run.dir={run}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"ocr-train: error: {given} (command line): no such key; {hint}"
    ]
    assert not run.exists()
