"""scripts/gpu_check.py end to end on this CPU machine, on a tiny budget: a short training run,
``trainperf analyze`` and ``report`` on it, the seam tests listed; the generated Markdown goes to
a temporary folder (never the committed ``docs/performance/gpu.md``), names each GPU part it
skipped, why, and what a GPU run adds, and the script exits 0."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ocr.data.synth import generate_dataset
from scripts import gpu_check

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "data.synthetic=null",
    "data.canvas_size=128",
    "data.batch_size=4",
    "data.num_workers=0",
    "data.persistent_workers=false",
    "trainer.accelerator=cpu",
    "trainer.limit_val_batches=1",
    "trainer.num_sanity_val_steps=0",
]


@pytest.fixture(scope="module")
def cpu_check(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    data = tmp_path_factory.mktemp("synth")
    generate_dataset(data, splits={"train": 8, "val": 4, "test": 4}, seed=3)
    out = tmp_path_factory.mktemp("out")
    cmd = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "gpu_check.py"),
        "--out",
        str(out),
        "--fixture-dir",
        str(out / "fixtures"),
        "--work-dir",
        str(out / "work"),
        "--epochs",
        "2",
        "--train-batches",
        "2",
        "--seams",
        "list",
        "--skip",
        "try",
        "--json",
        str(out / "figures.json"),
        "--note",
        "A CPU run of the test suite.",
        "--",
        f"data.dataset_dir={data}",
        *TINY,
    ]
    # The CPU behaviour, also on a machine with a GPU (there the same command runs the GPU parts).
    env = dict(os.environ, WANDB_MODE="offline", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    return proc, out


def test_cpu_run_exits_0_and_writes_the_doc_in_the_out_dir(
    cpu_check: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, out = cpu_check
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = (out / "gpu.md").read_text()
    assert doc.startswith("# GPU check\n\n<!-- Generated file: do not edit by hand.")
    assert doc.split("\n\n")[3] == "> A CPU run of the test suite."  # --note, under the header
    assert "**No GPU on this machine**" in doc
    assert not (out / "fixtures").exists()  # no GPU trace, no fixture written
    parts = json.loads((out / "figures.json").read_text())["parts"]
    assert {name: p["status"] for name, p in parts.items()} == {
        "seams": "ran",
        "train": "ran",
        "nvml": "skipped",
        "train_fast": "skipped",
        "train_sync": "skipped",
        "arms": "skipped",
        "fixture": "skipped",
        "analyze": "ran",
        "report": "ran",
        "try": "skipped",
    }


def test_doc_names_each_skipped_gpu_part_why_and_what_a_gpu_run_adds(
    cpu_check: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    doc = (cpu_check[1] / "gpu.md").read_text()
    for name, (why, adds) in gpu_check.GPU_ONLY.items():
        assert f"* **{name}**: {why}. A GPU run adds {adds}." in doc
    assert "* **try**: --skip on the command line." in doc
    # the arms a GPU run trains, planned with their budgets, without a figure
    assert "## Arms for the fast path\n\n**Planned, not yet run**" in doc
    assert "| compile | torch.compile of the network (inductor) | `model.compile=true` | " in doc


def test_doc_holds_the_cpu_figures_the_run_measured(
    cpu_check: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    doc = (cpu_check[1] / "gpu.md").read_text()
    figures = json.loads((cpu_check[1] / "figures.json").read_text())["parts"]["train"]["data"]
    train = figures["figures"]["train"]
    assert train["samples_per_s"] > 0
    assert set(train["host_ms"]) >= {"data_wait", "forward", "backward", "optimizer"}
    assert train["event_ms"] == {}  # CUDA events only with CUDA
    assert "| train | " in doc
    assert "## `trainperf analyze` on the profiled epoch" in doc
    # Whether they agree is timing (a loaded machine can stretch one side); that the comparison
    # was made and shown is what this run checks.
    assert re.search(r"trace vs phase clock agree: (yes|no)", doc)
    assert "## `trainperf report` (exit 0)" in doc
    assert "Listed only (`--seams list`): " in doc
    assert "python -m ocr.train experiment=synthetic_debug" in doc  # the command that made it
