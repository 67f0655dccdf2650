"""A Hugging Face ``Trainer`` under ``torchrun`` (2 processes, gloo on CPU) with
``trainperf.hf.PerfCallback``: rank 1's ``__getitem__`` sleeps; every rank records (its lifecycle
lines) and rank zero writes the gathered epoch with both ranks' figures, rank 1 the slowest by
its loader's fetch. (Rank 0 waits for it inside the Trainer's batch fetching, where the step's
token count is gathered across ranks, so both show the time as ``data_wait``: no phase tells
them apart, and the fetch spread names the rank.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import time

    import torch
    from torch.utils.data import Dataset
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    from trainperf.hf import PerfCallback

    RANK = int(os.environ["RANK"])


    class Tokens(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            if RANK == 1:
                time.sleep(0.02)  # the planted cause: rank 1's input
            return {"input_ids": torch.full((8,), i % 64), "labels": torch.tensor(i % 2)}


    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    args = TrainingArguments(output_dir=sys.argv[1], use_cpu=True, report_to="none",
                             per_device_train_batch_size=4, num_train_epochs=1,
                             save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                      train_dataset=Tokens(), callbacks=[PerfCallback()])
    trainer.train()
    """
)


def test_torchrun_trainer_records_every_rank_and_names_the_slow_one(tmp_path: Path) -> None:
    (tmp_path / "ddp_hf.py").write_text(SCRIPT, encoding="utf-8")
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--standalone",
            "ddp_hf.py",
            str(run),
        ],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = (run / "perf" / "epochs.jsonl").read_text().splitlines()
    (record,) = [json.loads(line) for line in lines]  # rank zero writes, once
    assert record["world_size"] == 2
    assert record["global_samples"] == 64  # 32 per rank (the Trainer's distributed sampler)
    assert record["global_batches"] == 16
    fetch = record["spreads"]["worker_fetch_time"]
    assert fetch["slowest_rank"] == 1
    assert fetch["max"] > fetch["min"] + 0.3  # 32 samples x 20 ms on rank 1
    assert record["phases_s"]["data_wait"] > 0.3  # rank 0's: the wait for rank 1
    lifecycle = (run / "perf" / "lifecycle.jsonl").read_text().splitlines()
    ends = sorted(json.loads(line)["rank"] for line in lifecycle if '"end"' in line)
    assert ends == [0, 1]
    info = json.loads((run / "perf" / "run.json").read_text())
    assert info["world_size"] == 2
    assert info["framework"] == "hf"
