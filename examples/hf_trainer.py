"""A Hugging Face Trainer with trainperf's PerfCallback (no Lightning, no weights downloaded: a
tiny BERT built from its config, CPU): `python hf_trainer.py RUN`."""

import sys

import torch
from torch.utils.data import Dataset
from trainperf.hf import PerfCallback
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RandomTokens(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        tokens = torch.randint(0, 512, (32,), generator=g)
        return {"input_ids": tokens, "labels": torch.tensor(i % 2)}


config = BertConfig(
    vocab_size=512,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
args = TrainingArguments(
    output_dir=sys.argv[1] if len(sys.argv) > 1 else "runs/hf_trainer",  # perf/ goes inside
    num_train_epochs=2,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=2,  # one optimizer step per two batches: counted as such
    eval_strategy="epoch",  # each evaluation: its own val window
    save_strategy="no",
    use_cpu=True,
    report_to="none",
    disable_tqdm=True,
)
trainer = Trainer(
    model=BertForSequenceClassification(config),
    args=args,
    train_dataset=RandomTokens(128),
    eval_dataset=RandomTokens(64),
    callbacks=[PerfCallback()],  # phases, run folder; or trainer.add_callback(PerfCallback())
)
trainer.train()
# then: trainperf report RUN; trainperf try RUN --candidate knob:dataloader.num_workers=2
