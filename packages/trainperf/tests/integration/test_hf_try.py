"""``trainperf try`` on a Hugging Face ``Trainer`` recorded with ``trainperf.hf.PerfCallback``: a
trial window's DataLoader knob is set on the ``TrainingArguments`` in ``on_init_end`` (the
Trainer's loader then has the workers) and the window's batches are honoured; a knob the
Trainer cannot take, or any knob when the callback was added after the Trainer was built, is
refused with why in the trial's ``perf/knobs.jsonl``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trainperf.core.knobs import Knob
from trainperf.core.trial_window import ENV_VAR, TryWindow
from trainperf.hf import PerfCallback
from trainperf.hf.trial_arguments import KnobNotApplicable
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records
from trainperf.records.try_record import KnobRecord
from transformers import Trainer

from trainperf_testing.hf_models import Tokens, arguments, tiny_bert

SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import torch
    from torch.utils.data import Dataset
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    from trainperf.hf import PerfCallback


    class Sleepy(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.01)
            return {"input_ids": torch.full((8,), i % 64), "labels": torch.tensor(i % 2)}


    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    args = TrainingArguments(output_dir=sys.argv[1], use_cpu=True, report_to="none",
                             per_device_train_batch_size=4, num_train_epochs=3,
                             save_strategy="epoch", disable_tqdm=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args,
                      train_dataset=Sleepy(), callbacks=[PerfCallback()])
    trainer.train()
    """
)


@pytest.mark.slow
def test_a_trial_window_sets_the_loader_knob_and_stops_after_its_batches(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
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
    (knob,) = read_records(KnobRecord.path(tmp_path / "trial"), KnobRecord)
    assert knob.status == "applied"
    assert "dataloader_num_workers 0 -> 2" in knob.note
    epochs = read_records(EpochRecord.path(tmp_path / "trial"), EpochRecord)
    assert [(e.epoch, e.num_batches, e.num_workers) for e in epochs] == [(0, 4, 2)]
    # no checkpoint in the trial (save_strategy="epoch" in the script), nothing in its folder
    assert not list((tmp_path / "run").glob("checkpoint-*"))


@pytest.mark.filterwarnings("ignore:TRAINPERF_TRY_WINDOW is set")
def test_a_knob_the_trainer_cannot_take_is_refused_with_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = TryWindow(1, 3, tmp_path / "trial", knobs=(Knob.parse_setting("model.compile=true"),))
    monkeypatch.setenv(ENV_VAR, window.to_env())
    with pytest.raises(KnobNotApplicable, match=r"model\.compile=true"):
        Trainer(
            model=tiny_bert(),
            args=arguments(tmp_path / "run"),
            train_dataset=Tokens(8),
            callbacks=[PerfCallback()],
        )
    (knob,) = read_records(KnobRecord.path(tmp_path / "trial"), KnobRecord)
    assert knob.status == "not applicable"
    assert "Hugging Face Trainer" in knob.note


def test_a_callback_added_after_the_trainer_was_built_refuses_its_knobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = TryWindow(
        1, 3, tmp_path / "trial", knobs=(Knob.parse_setting("dataloader.num_workers=2"),)
    )
    monkeypatch.setenv(ENV_VAR, window.to_env())
    trainer = Trainer(model=tiny_bert(), args=arguments(tmp_path / "run"), train_dataset=Tokens(8))
    trainer.add_callback(PerfCallback())
    with pytest.raises(KnobNotApplicable, match="Trainer\\(callbacks=\\[PerfCallback\\(\\)\\]\\)"):
        trainer.train()
    (knob,) = read_records(KnobRecord.path(tmp_path / "trial"), KnobRecord)
    assert knob.status == "not applicable"
    assert "trainer.add_callback" in knob.note


def test_refused_knobs_are_each_written_with_their_own_reason(tmp_path: Path) -> None:
    from trainperf.hf.trial_arguments import refuse

    knobs = [Knob.parse_setting(t) for t in ("dataloader.batch_size=8", "optimizer.fused=true")]
    error = refuse(tmp_path, knobs, None, write=True)
    rows = read_records(KnobRecord.path(tmp_path), KnobRecord)
    assert [(r.knob, r.status) for r in rows] == [
        ("dataloader.batch_size=8", "not applicable"),
        ("optimizer.fused=true", "not applicable"),
    ]
    assert "per_device_train_batch_size" in rows[0].note
    assert "adamw_torch_fused" in rows[1].note
    assert str(error).startswith("knob dataloader.batch_size=8, optimizer.fused=true: ")
    assert "this Hugging Face Trainer: " in str(error)
    assert "per_device_train_batch_size" in str(error)
    quiet = refuse(tmp_path / "quiet", knobs, "one reason", write=False)  # not rank zero
    assert str(quiet).endswith("this Hugging Face Trainer: one reason")
    assert not (tmp_path / "quiet").exists()
