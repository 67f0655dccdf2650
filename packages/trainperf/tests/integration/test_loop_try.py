"""``trainperf try`` on a plain PyTorch loop recorded with ``trainperf.loop.Monitor``: the
DataLoader knob is applied by ``mon.train(loader)`` (the loader rebuilt with more workers) and
measured; a knob a plain loop cannot take (``model.channels_last``) is "not applicable" with why;
the run's own files are left alone."""

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

SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    from trainperf.loop import Monitor


    class Sleepy(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.02)  # waiting for storage, in the training process without workers
            return torch.full((8,), float(i)), torch.ones(1)


    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Sleepy(), batch_size=4, num_workers=0)
    with Monitor(sys.argv[1], model=model, optimizer=opt, live=False) as mon:
        for epoch in range(1):
            for x, y in mon.train(loader):
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    """
)


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    app = tmp_path_factory.mktemp("loop")
    (app / "train.py").write_text(SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "train.py", "run"],
        cwd=app,
        env=dict(os.environ, WANDB_MODE="offline"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return app / "run"


def test_try_measures_a_dataloader_knob_on_a_plain_loop(
    loop_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    info = json.loads((loop_run / "perf" / "run.json").read_text())
    assert info["framework"] == "loop"
    assert info["argv"][-1] == "run"
    before = {p.relative_to(loop_run) for p in loop_run.rglob("*")}
    code = perf_main(
        [
            "try",
            str(loop_run),
            "--no-findings",
            "--candidate",
            "knob:dataloader.num_workers=2",
            "--candidate",
            "knob:model.channels_last=true",
            "--pairs",
            "3",
            "--warmup",
            "2",
            "--batches",
            "6",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    records = {r.override: r for r in latest_session(loop_run)}
    workers = records["knob:dataloader.num_workers=2"]
    assert workers.status == "recommended", out
    assert workers.low is not None
    assert workers.low > 1.03
    assert workers.apply == "DataLoader(..., num_workers=2)  # the training loader"
    channels = records["knob:model.channels_last=true"]
    assert channels.status == "not applicable"
    assert "plain loop" in channels.note
    after = {p.relative_to(loop_run) for p in loop_run.rglob("*")}
    assert after - before == {Path("perf/try.jsonl")}


def test_a_trial_window_rebuilds_the_loader_and_stops_after_its_batches(tmp_path: Path) -> None:
    from trainperf.core.knobs import Knob
    from trainperf.core.trial_window import ENV_VAR, TryWindow
    from trainperf.records.epochs import EpochRecord
    from trainperf.records.files import read_records
    from trainperf.records.try_record import KnobRecord

    (tmp_path / "train.py").write_text(SCRIPT.replace("range(1)", "range(3)"), encoding="utf-8")
    window = TryWindow(
        1, 3, tmp_path / "trial", knobs=(Knob.parse_setting("dataloader.num_workers=2"),)
    )
    proc = subprocess.run(
        [sys.executable, "train.py", "run"],
        cwd=tmp_path,
        env={**os.environ, ENV_VAR: window.to_env()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not (tmp_path / "run").exists()  # the trial writes into its own folder only
    (knob,) = read_records(KnobRecord.path(tmp_path / "trial"), KnobRecord)
    assert knob.status == "applied"
    assert "num_workers 0 -> 2" in knob.note
    epochs = read_records(EpochRecord.path(tmp_path / "trial"), EpochRecord)
    assert [(e.epoch, e.num_batches, e.num_workers) for e in epochs] == [(0, 4, 2)]
