"""A plain loop under ``torchrun`` (2 processes, gloo on CPU) with a ``DistributedDataParallel``
model: rank 1's forward sleeps, so rank 1 is the straggler by ``forward`` while rank 0 waits in
the gradient all-reduce (``sync_wait``); the epoch records carry every rank's figures and name
it, and ``trainperf report`` on the folder says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trainperf.cli.main import main as perf_main

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    from trainperf.loop import Monitor


    class Net(nn.Module):
        def __init__(self, rank):
            super().__init__()
            self.layer = nn.Linear(8, 1)
            self.rank = rank

        def forward(self, x):
            if self.rank == 1:
                time.sleep(0.03)  # the planted cause: rank 1's forward
            return self.layer(x)


    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False))
    model = DistributedDataParallel(Net(rank))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Monitor(sys.argv[1], model=model, optimizer=opt, live=False) as mon:
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            for x, y in mon.train(loader):
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    dist.destroy_process_group()
    """
)


def test_torchrun_plain_loop_names_the_slow_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ddp_loop.py").write_text(SCRIPT, encoding="utf-8")
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--standalone",
            "ddp_loop.py",
            str(run),
        ],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [
        json.loads(line) for line in (run / "perf" / "epochs.jsonl").read_text().splitlines()
    ]
    assert [r["stage"] for r in records] == ["train", "train"]  # rank zero writes, once per epoch
    for record in records:
        assert record["world_size"] == 2
        assert record["global_samples"] == 96
        assert record["global_batches"] == 24
        assert record["sync_wait_measured"] == "ddp_comm_hook"
        spread = record["spreads"]["forward_time"]
        assert spread["slowest_rank"] == 1
        assert spread["max"] > spread["min"] + 0.2  # 12 batches x 30 ms on rank 1
        straggler = record["straggler"]
        assert straggler["rank"] == 1
        assert straggler["cause"] == "forward"
        # rank 0, the waiting one, shows the wait as sync_wait, not as its own compute
        assert record["phases_s"]["sync_wait"] > 0.2
    lines = (run / "perf" / "lifecycle.jsonl").read_text().splitlines()
    ends = sorted(json.loads(line)["rank"] for line in lines if '"end"' in line)
    assert ends == [0, 1]
    assert perf_main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "rank 1" in out
