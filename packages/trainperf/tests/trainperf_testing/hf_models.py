"""A tiny BERT, its token dataset and Trainer arguments for the Hugging Face adapter's tests
(CPU, seconds)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, TrainingArguments


class Tokens(Dataset[dict[str, torch.Tensor]]):
    """Random token ids and a label; ``sleep_s`` in ``__getitem__``, its real total in
    ``slept_s``."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s, self.slept_s = n, sleep_s, 0.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.sleep_s:
            start = time.perf_counter()
            time.sleep(self.sleep_s)
            self.slept_s += time.perf_counter() - start
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (8,), generator=g), "labels": torch.tensor(i % 2)}


class SlowBackward(torch.autograd.Function):
    """Identity forward; backward sleeps ``SLEEP_S`` (counted in ``slept_s``)."""

    SLEEP_S = 0.15
    slept_s = 0.0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        time.sleep(SlowBackward.SLEEP_S)
        SlowBackward.slept_s += time.perf_counter() - start
        return grad


class SlowGrad(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SlowBackward.apply(x)


def tiny_bert(slow_backward: bool = False) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    model = BertForSequenceClassification(config)
    if slow_backward:  # before the classifier: its backward runs every step
        model.classifier = nn.Sequential(SlowGrad(), model.classifier)  # type: ignore[assignment]
    return model


def arguments(out: Path, **changes: Any) -> TrainingArguments:
    options: dict[str, Any] = {
        "output_dir": str(out),
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "per_device_train_batch_size": 4,
        "num_train_epochs": 1,
        "disable_tqdm": True,
        "logging_strategy": "no",
        **changes,
    }
    return TrainingArguments(**options)
