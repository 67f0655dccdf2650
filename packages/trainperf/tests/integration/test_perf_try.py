"""``trainperf try`` end to end on a small Hydra + Lightning app written here (its own config, its
own LightningModule, a dataset that sleeps in ``__getitem__``, ``num_workers=0``, our throughput
callback attached): more DataLoader workers are recommended with an interval above 1, a change
of nothing is neither recommended nor a regression; results land in ``perf/try.jsonl`` and the
report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trainperf.analysis.trials import latest_session
from trainperf.cli.main import main as perf_main

pytestmark = pytest.mark.slow

APP = textwrap.dedent(
    """
    import time

    import hydra
    import lightning as L
    import torch
    from hydra.core.hydra_config import HydraConfig
    from torch.utils.data import DataLoader, Dataset

    from trainperf.lightning import ThroughputMonitorCallback


    class SleepyData(Dataset):
        def __init__(self, size, sleep_s):
            self.size, self.sleep_s = size, sleep_s

        def __len__(self):
            return self.size

        def __getitem__(self, i):
            time.sleep(self.sleep_s)  # slow decoding, in the training process without workers
            return torch.full((8,), float(i)), torch.ones(1)


    class Regressor(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)


    @hydra.main(version_base="1.3", config_path=".", config_name="settings")
    def main(cfg):
        def loader(size):
            return DataLoader(
                SleepyData(size, cfg.loader.sleep_s),
                batch_size=cfg.loader.batch_size,
                num_workers=cfg.loader.num_workers,
            )

        trainer = L.Trainer(
            max_epochs=cfg.fit.max_epochs,
            log_every_n_steps=cfg.fit.log_every_n_steps,
            default_root_dir=HydraConfig.get().runtime.output_dir,
            callbacks=[ThroughputMonitorCallback(flops=False, peak_memory=False)],
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
        )
        trainer.fit(Regressor(), loader(cfg.loader.size), loader(8))


    if __name__ == "__main__":
        main()
    """
)

SETTINGS = textwrap.dedent(
    """
    loader:
      size: 48
      sleep_s: 0.02
      batch_size: 4
      num_workers: 0
    fit:
      max_epochs: 1
      log_every_n_steps: 50
    """
)


@pytest.fixture(scope="module")
def foreign_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    app = tmp_path_factory.mktemp("app")
    (app / "sleepy_app.py").write_text(APP, encoding="utf-8")
    (app / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    run = app / "run"
    env = dict(os.environ, WANDB_MODE="offline")
    proc = subprocess.run(
        [sys.executable, "sleepy_app.py", f"hydra.run.dir={run}"],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run


def test_run_json_records_the_command(foreign_run: Path) -> None:
    info = json.loads((foreign_run / "perf" / "run.json").read_text())
    assert info["executable"] == sys.executable
    assert info["orig_argv"][1:] == ["sleepy_app.py", f"hydra.run.dir={foreign_run}"]
    assert info["cwd"] == str(foreign_run.parent)
    assert info["hydra"]["overrides_file"] == ".hydra/overrides.yaml"
    assert info["hydra"]["cwd"] == str(foreign_run.parent)


def test_try_recommends_workers_and_calls_a_noop_no_change(
    foreign_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {p.relative_to(foreign_run) for p in foreign_run.rglob("*")}
    code = perf_main(
        [
            "try",
            str(foreign_run),
            "--candidate",
            "fit.log_every_n_steps=51",
            "--pairs",
            "3",
            "--warmup",
            "2",
            "--batches",
            "8",
            "--budget",
            "10m",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    records = {r.override: r for r in latest_session(foreign_run)}
    # The input-bound finding's own candidate, with the app's own key (not ours).
    (worker_override,) = [o for o in records if o and o.startswith("loader.num_workers=")]
    workers = records[worker_override]
    assert int(worker_override.split("=")[1]) >= 1
    assert workers.status == "recommended", out
    assert workers.pairs == 3
    assert workers.low is not None
    assert workers.low > 1.03
    assert workers.family == "workers"
    noop = records["fit.log_every_n_steps=51"]
    assert noop.status in ("no significant change", "inconclusive"), out  # a real A/A
    # one plain line per trial without a terminal, then the line to paste
    measured = [r for r in records.values() if r.pairs]
    # the warm-up, then 3 pairs each (one winner: no joint run)
    assert out.count("trial ") == 1 + 6 * len(measured)
    assert f"Paste: {worker_override}" in out
    # the run's own files are untouched: only perf/try.jsonl is new
    after = {p.relative_to(foreign_run) for p in foreign_run.rglob("*")}
    assert after - before == {Path("perf/try.jsonl")}

    # the report's "Measured changes" section shows the session
    from trainperf.present.report import build_report, to_markdown

    md = to_markdown(build_report(foreign_run))
    assert "## Measured changes" in md
    assert worker_override in md
