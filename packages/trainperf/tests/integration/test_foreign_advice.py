"""Issue 14's acceptance: no finding names a configuration key absent from the run's config,
on runs of a LightningModule that is not ours, trained with our callbacks: once from a plain
script (no Hydra config: plain-language changes only) and once from a Hydra app written here
whose keys differ from ours (``dataloader.num_workers``): its overrides use its own keys.

The dataset sleeps in ``__getitem__`` and loads in the main process, so the runs are
input-bound and the verdict proposes more workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from trainperf.present.report import build_report, to_markdown

from trainperf_testing.advice_keys import absent_keys, has_key, parse_override
from trainperf_testing.paths import child_pythonpath

pytestmark = pytest.mark.slow

# The user's code: a module, a slow dataset, and a training function taking plain arguments.
USER_CODE = """
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from trainperf.lightning import (
    PerformanceProfilerCallback,
    ThroughputMonitorCallback,
)


class SlowSet(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        time.sleep(0.03)  # a slow decode
        return torch.randn(3, 16, 16), torch.tensor(float(i % 2))


class TinyNet(L.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(4, 1),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.body(x).squeeze(1), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.body(x).squeeze(1), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def train(root, num_workers, batch, epochs, lr):
    loader = dict(batch_size=batch, num_workers=num_workers)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=epochs, logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        num_sanity_val_steps=0, default_root_dir=root,
        callbacks=[PerformanceProfilerCallback(), ThroughputMonitorCallback()],
    )
    trainer.fit(TinyNet(lr), DataLoader(SlowSet(), **loader), DataLoader(SlowSet(), **loader))
"""

HYDRA_APP = """
import hydra
from hydra.core.hydra_config import HydraConfig

from user_code import train


@hydra.main(version_base="1.3", config_path="conf", config_name="app")
def main(cfg):
    train(
        HydraConfig.get().runtime.output_dir, cfg.dataloader.num_workers,
        cfg.dataloader.batch_size, cfg.fit.epochs, cfg.optim.lr,
    )


main()
"""

APP_CONFIG = {
    "dataloader": {"num_workers": 0, "batch_size": 2, "pin_memory": False},
    "fit": {"epochs": 2},
    "optim": {"lr": 0.01},
}


def _env(code_dir: Path) -> dict[str, str]:
    env = dict(os.environ, WANDB_MODE="offline")
    env["PYTHONPATH"] = child_pythonpath(code_dir)
    return env


def _run(code_dir: Path, *argv: str) -> None:
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=code_dir,
        env=_env(code_dir),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def user_code(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "user_code.py").write_text(USER_CODE)
    return code


def _input_bound(run_dir: Path) -> list:
    report = build_report(run_dir)
    ids = [f.id for f in report.findings]
    assert "input_bound" in ids, ids
    return report.findings


def test_plain_script_run_gets_plain_language_changes_only(user_code: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    script = f"from user_code import train\ntrain({str(run_dir)!r}, 0, 2, 2, 0.01)\n"
    (user_code / "script.py").write_text(script)
    _run(user_code, "script.py")
    assert not (run_dir / ".hydra").exists()
    findings = _input_bound(run_dir)
    assert absent_keys(findings, None) == []
    candidates = [c for f in findings for c in f.candidates]
    assert candidates, "an input-bound run gets changes to try"
    assert all(c.override is None for c in candidates)
    finding = next(f for f in findings if f.id == "input_bound" and f.stage == "train")
    workers = [c for c in finding.candidates if c.family == "workers"]
    assert workers
    assert "num_workers" in workers[0].description


def test_foreign_hydra_app_gets_overrides_in_its_own_keys(user_code: Path, tmp_path: Path) -> None:
    (user_code / "conf").mkdir()
    (user_code / "conf" / "app.yaml").write_text(yaml.safe_dump(APP_CONFIG))
    (user_code / "app.py").write_text(textwrap.dedent(HYDRA_APP))
    run_dir = tmp_path / "hydra_run"
    _run(user_code, "app.py", f"hydra.run.dir={run_dir}")
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    findings = _input_bound(run_dir)
    assert absent_keys(findings, config) == []
    overrides = [c.override for f in findings for c in f.candidates if c.override]
    assert any(o.startswith("dataloader.num_workers=") for o in overrides), overrides
    for o in overrides:
        key, _ = parse_override(o)
        assert has_key(config, key), o
    # the report shows the override to paste
    workers = next(o for o in overrides if o.startswith("dataloader.num_workers="))
    assert f"`{workers}`" in to_markdown(build_report(run_dir))
