"""scripts/gpu_check.py's arms (issue 38) on this CPU machine: the arm list and its overrides
(composed with the app's Hydra config), the device budget that ``--plan`` prints (under 9
minutes), the figures an arm's row takes from a run folder (the first H200 run's, read here
independently), the orchestration with a planted failing arm, and the document rendered again
from the H200 run's JSON with the arms planned, not run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.baseline_doc import TrainingFailed
from scripts import gpu_check
from scripts.gpucheck import arms, budget, doc
from scripts.gpucheck.check import Check, check_from_dict
from scripts.gpucheck.preflight import DEVICE_SKIPS, WheelCheck

REPO_ROOT = Path(__file__).resolve().parents[2]
H200 = REPO_ROOT.parent / "shared" / "gpu" / "h200-2026-11-26"


def _compose(*overrides: str) -> Any:
    from hydra import compose, initialize_config_module

    from ocr.runtime import register_resolvers

    register_resolvers()
    with initialize_config_module(version_base="1.3", config_module="ocr.configs"):
        return compose(config_name="train", overrides=list(overrides))


def test_the_arms_are_batch_16_32_64_half_and_all_workers_and_compile() -> None:
    by_name = {a.name: a for a in arms.arms_for(16)}
    assert list(by_name) == [
        "batch16",
        "batch32",
        "batch64",
        "workers_half",
        "workers_all",
        "compile",
    ]
    assert by_name["batch16"].overrides == ()  # the reference
    assert by_name["batch64"].overrides == ("data.batch_size=64",)
    assert by_name["workers_half"].overrides == ("data.num_workers=8",)
    assert by_name["workers_all"].overrides == ("data.num_workers=16",)
    assert by_name["compile"].overrides == ("model.compile=true",)
    assert arms.arms_for(1)[3].overrides == ("data.num_workers=1",)  # never 0 workers


@pytest.mark.parametrize("arm", arms.arms_for(16), ids=lambda a: a.name)
def test_each_arm_composes_to_its_setting_on_the_fast_configuration(arm: arms.Arm) -> None:
    """Valid overrides of the app; the arm's own setting wins over the base's; the same samples
    per epoch at every batch; no validation, checkpoint or profiler."""
    import hydra

    overrides = arms.arm_overrides(arm, 16, 60, extra=["data.canvas_size=512"])
    assert (
        overrides[-len(arm.overrides) or len(overrides) :] == list(arm.overrides)
        or not arm.overrides
    )
    cfg = _compose(*overrides)
    batch = arms.arm_batch(arm)
    assert cfg.data.batch_size == batch
    assert cfg.trainer.limit_train_batches * batch == 960
    assert cfg.trainer.max_epochs == arms.ARM_EPOCHS
    assert cfg.trainer.limit_val_batches == 0
    assert cfg.data.canvas_size == 512  # the command line's extra overrides reach every arm
    assert cfg.trainer.precision == "bf16-mixed"
    assert cfg.model.channels_last is True
    assert cfg.callbacks.model_checkpoint is None
    assert cfg.callbacks.last_checkpoint is None
    assert cfg.callbacks.profiler.enabled is False
    assert cfg.callbacks.resource_monitor.interval_s == 0.5
    expected_workers = {"workers_half": 8, "workers_all": 16}.get(arm.name, 14)
    assert cfg.data.num_workers == expected_workers
    assert cfg.model.compile is (arm.name == "compile")
    module = hydra.utils.instantiate(cfg.model)
    assert module.compile_settings.backend == ("inductor" if arm.name == "compile" else None)


def _args(*argv: str) -> Any:
    args = gpu_check.parse_args(list(argv))
    gpu_check.size_run(args, cuda=False)  # planned here, on the CPU
    return args


def test_the_device_run_is_budgeted_under_nine_minutes() -> None:
    items = gpu_check.device_budget(_args())
    names = [i.name for i in items]
    assert [n for n in names if n.startswith("arms/")] == [
        f"arms/{a.name}" for a in arms.arms_for(budget.DEVICE_CORES)
    ]
    assert all(i.seconds > 0 for i in items if i.name.startswith("arms/"))
    assert {i.name for i in items if i.skipped} == set(DEVICE_SKIPS)
    assert budget.total_s(items) <= budget.LIMIT_S == 540
    by_name = {i.name: i for i in items}
    assert by_name["arms/compile"].seconds >= by_name["arms/batch16"].seconds + budget.COMPILE_S
    lines = gpu_check.plan(_args(), None, 2)
    (total,) = [line for line in lines if line.strip().startswith("total ")]
    assert total.strip().startswith(f"total {budget.total_s(items):.0f} s of 540 s")
    assert ": fits;" in total
    (device,) = [line for line in lines if line.startswith("  python3 -m pip install")]
    assert device.endswith("--skip train_sync --skip try")


def test_the_budget_grows_with_the_run_and_says_when_it_does_not_fit() -> None:
    """The budget is a model of the run, not a constant: a larger run stops fitting."""
    small = budget.total_s(gpu_check.device_budget(_args()))
    big = budget.total_s(gpu_check.device_budget(_args("--train-batches", "200")))
    assert big > small
    lines = gpu_check.plan(_args("--train-batches", "200"), None, 2)
    assert any(": does NOT fit;" in line for line in lines)
    with_try = gpu_check.device_budget(_args("--try-budget", "3m"))
    assert {i.name: i.skipped for i in with_try}["try"] == "--skip"  # the device skips it


def _util_from_raw(run: Path, epochs: set[int]) -> list[float]:
    out = []
    for line in (run / "perf" / "resources.jsonl").read_text().splitlines():
        rec = json.loads(line)
        value = rec.get("metrics", {}).get("resources/gpu0_util_percent")
        if rec.get("phase") == "train" and rec.get("epoch") in epochs and value is not None:
            out.append(value)
    return out


def test_an_arms_row_from_the_h200_run_folder(h200_train_run: Path) -> None:
    row = arms.arm_figures(h200_train_run)
    assert row["epochs"] == [1, 2, 3]  # warm-up epoch 0 left out (no profiled epoch given)
    raw = [
        json.loads(line)
        for line in (h200_train_run / "perf" / "epochs.jsonl").read_text().splitlines()
    ]
    train = [r for r in raw if r["stage"] == "train"]
    kept = [r for r in train if r["epoch"] in (1, 2, 3)]
    assert row["samples_per_s"] == pytest.approx(
        sum(r["samples"] for r in kept) / sum(r["wall_s"] for r in kept)
    )
    assert row["warmup_s"] == pytest.approx(train[0]["wall_s"])
    utils = _util_from_raw(h200_train_run, {1, 2, 3})
    assert row["gpu_idle"]["samples"] == len(utils) > 10
    assert row["gpu_idle"]["share"] == pytest.approx(1 - sum(utils) / len(utils) / 100)
    assert 0 < row["mfu"] < 1
    assert row["data_wait_split"] == {}  # torch 2.11 there: the loader was not instrumented


def _fake_train(source: Path, calls: list[list[str]], failing: str) -> Any:
    def train(run_dir: Path, overrides: list[str], log: Path, during: Any = None) -> list[str]:
        calls.append(overrides)
        if f"data.batch_size={failing}" in overrides:
            raise TrainingFailed(
                "ocr.train exit 1:\n...\ntorch.OutOfMemoryError: CUDA out of memory"
            )
        shutil.copytree(source, run_dir)
        return ["-m", "ocr.train", *overrides, f"hydra.run.dir={run_dir}"]

    return train


def test_a_failing_arm_fails_the_part_and_the_others_keep_their_rows(
    h200_train_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(gpu_check, "train", _fake_train(h200_train_run, calls, "64"))
    check = Check([], {"name": "NVIDIA H200"}, {"cores": 16}, WheelCheck())
    gpu_check._arms_part(check, _args("--train-batches", "60"), tmp_path, 16)
    part = check.parts["arms"]
    assert part.status == "failed"
    assert (
        part.reason
        == "arms failed: batch64: TrainingFailed: torch.OutOfMemoryError: CUDA out of memory"
    )
    assert [c[-1] for c in calls][1:] == [
        "data.batch_size=32",
        "data.batch_size=64",
        "data.num_workers=8",
        "data.num_workers=16",
        "model.compile=true",
    ]
    assert set(part.data["rows"]) == {
        "batch16",
        "batch32",
        "workers_half",
        "workers_all",
        "compile",
    }
    assert part.data["comparison"]["speedup"]["batch32"] == pytest.approx(1.0)  # the same folder
    assert check.commands["arms/compile"].endswith(f"hydra.run.dir={tmp_path / 'arms' / 'compile'}")
    text = "\n".join(doc.render_arms(part.data))
    assert (
        "| batch64 | `data.batch_size=64` | **failed**: TrainingFailed: torch.OutOfMemory" in text
    )
    assert (
        "| compile | `model.compile=true` | 161.55 | 1.00x | 3.7 % | 13.6 % | – "
        "| 50.1 % (30 samples) | 7.6 |" in text
    )
    assert "Fastest: **batch16** (161.5 training samples/s, 1.00x batch16)." in text


def test_a_run_past_its_budget_is_stopped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(TimeoutError, match=r"stopped after 0\.5 s, its time limit"):
            arms.stop_after(0.5)(proc)
        assert proc.poll() is not None  # killed, not left running
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not (H200 / "gpu_check.json").is_file(), reason="needs ../shared/gpu")
def test_the_h200_document_renders_again_with_the_arms_planned(tmp_path: Path) -> None:
    source = H200 / "gpu_check.json"
    rc = gpu_check.main(["--render", str(source), "--out", str(tmp_path), "--note", "A note."])
    assert rc == 0
    text = (tmp_path / "gpu.md").read_text()
    saved = check_from_dict(json.loads(source.read_text()))
    assert text.splitlines()[4].startswith(
        f"Rendered by `python scripts/gpu_check.py --render {source.as_posix()} --out "
    )
    assert (
        f"the figures of `python scripts/gpu_check.py {' '.join(saved.argv)}` on 2026-11-26" in text
    )
    assert "> A note." in text
    # what was measured, as it was measured
    assert "| train | 167.63 | 13.4 % | 28.891 | 3.9 % | 2.9 % |" in text
    assert "| transfer | 9.44 | 5.39 | +42.9 | **no** |" in text
    assert "| 3 | util_percent | 51, 51 | 51 | 10 | yes |" in text
    # the arms: planned with their budgets, no figure
    assert "**Planned, not yet run**" in text
    items = gpu_check.device_budget(_args())
    seconds = {i.name: i.seconds for i in items}
    for arm in arms.arms_for(budget.DEVICE_CORES):
        overrides = " ".join(f"`{o}`" for o in arm.overrides) or "(the reference)"
        assert (
            f"| {arm.name} | {arm.what} | {overrides} | {seconds[f'arms/{arm.name}']:.0f} |" in text
        )
    assert f"{budget.total_s(items):.0f} s budgeted of 540" in text


def test_the_committed_document_is_the_h200_run_rendered_with_the_current_plan() -> None:
    """docs/performance/gpu.md comes from ``--render`` of the H200 run, and its arms plan is the
    one this version budgets (a changed arm or budget needs the document rendered again)."""
    text = (REPO_ROOT / "docs" / "performance" / "gpu.md").read_text()
    assert (
        "Rendered by `python scripts/gpu_check.py --render "
        "../shared/gpu/h200-2026-11-26/gpu_check.json" in text
    )
    seconds = {i.name: i.seconds for i in gpu_check.device_budget(_args())}
    for arm in arms.arms_for(budget.DEVICE_CORES):
        assert f"| {arm.name} | {arm.what} | " in text
        assert f" | {seconds[f'arms/{arm.name}']:.0f} |\n" in text


def test_render_refuses_a_file_that_is_not_a_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"argv": []}')
    assert gpu_check.main(["--render", str(bad), "--out", str(tmp_path)]) == 2
    assert f"--render {bad}: not a gpu_check.py --json file: 'cuda'" in capsys.readouterr().err
