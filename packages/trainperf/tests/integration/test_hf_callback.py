"""``trainperf.hf.PerfCallback`` on Hugging Face ``Trainer`` runs written here, on a tiny BERT
built from a config (no weights downloaded, CPU), each with a cause planted and measured where
it lands: a slow ``__getitem__`` (input wait, named first by the report, its share within 10
points of the planted one), a slow optimizer step (a step pre-hook that sleeps) charged to
``optimizer``, a slow custom autograd backward charged to ``backward``; phases summing to each
window within 2 %, gradient accumulation counted as one optimizer step per
``gradient_accumulation_steps`` batches, each evaluation its own ``val`` window, and the
``TrainingArguments`` advice can name in ``run.json``."""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from torch import nn
from torch.utils.data import Dataset
from trainperf.cli.main import main as perf_main
from trainperf.hf import PerfCallback, check_versions
from transformers import Trainer

from trainperf_testing.hf_models import SlowBackward, Tokens, arguments, tiny_bert


def epochs(run: Path) -> list[dict[str, Any]]:
    lines = (run / "perf" / "epochs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def train(run: Path, data: Dataset[Any], *, model: nn.Module | None = None, **kw: Any) -> Trainer:
    trainer_kw = {k: kw.pop(k) for k in ("optimizers", "eval_dataset") if k in kw}
    trainer = Trainer(
        model=model if model is not None else tiny_bert(),
        args=arguments(run, **kw),
        train_dataset=data,
        callbacks=[PerfCallback()],
        **trainer_kw,
    )
    trainer.train()
    return trainer


def test_a_slow_getitem_is_input_wait_named_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = Tokens(48, sleep_s=0.01)
    train(tmp_path / "run", data)
    (record,) = epochs(tmp_path / "run")
    planted = 100 * data.slept_s / record["wall_s"]
    measured = 100 * record["phases_s"]["data_wait"] / record["wall_s"]
    assert abs(measured - planted) <= 10, (measured, planted)
    assert record["samples"] == 48
    assert record["num_batches"] == 12
    from trainperf.present.report import build_report

    findings = build_report(tmp_path / "run").findings
    assert findings[0].id == "input_bound", [f.id for f in findings]
    assert perf_main(["report", str(tmp_path / "run")]) == 0
    assert "input-bound" in capsys.readouterr().out


def test_a_slow_optimizer_step_hook_is_optimizer(tmp_path: Path) -> None:
    model = tiny_bert()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    slept = [0.0]

    def slow(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        start = time.perf_counter()
        time.sleep(0.1)
        slept[0] += time.perf_counter() - start

    opt.register_step_pre_hook(slow)
    trainer = Trainer(
        model=model,
        args=arguments(tmp_path / "run"),
        train_dataset=Tokens(32),
        optimizers=(opt, None),
    )
    trainer.add_callback(PerfCallback())  # added after the Trainer was built: recorded alike
    trainer.train()
    (record,) = epochs(tmp_path / "run")
    phases = record["phases_s"]
    assert phases["optimizer"] >= slept[0] > 0
    assert phases["optimizer"] <= slept[0] + 0.15 * record["wall_s"]
    assert max(phases, key=phases.get) == "optimizer"  # forward and backward are real compute:
    # a loaded machine stretches them, so they are bounded by the planted sleep, not by 0


def test_a_slow_autograd_backward_is_backward(tmp_path: Path) -> None:
    SlowBackward.slept_s = 0.0
    train(tmp_path / "run", Tokens(32), model=tiny_bert(slow_backward=True))
    (record,) = epochs(tmp_path / "run")
    phases = record["phases_s"]
    assert SlowBackward.slept_s > 0
    assert phases["backward"] >= SlowBackward.slept_s
    assert max(phases, key=phases.get) == "backward"
    assert phases["forward"] < SlowBackward.slept_s
    assert phases["optimizer"] < 0.5 * SlowBackward.slept_s


def test_phases_sum_accumulation_counts_steps_and_evaluation_is_its_own(tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer = train(
        run,
        Tokens(32, sleep_s=0.002),
        eval_dataset=Tokens(12),
        num_train_epochs=2,
        gradient_accumulation_steps=2,
        eval_strategy="epoch",
        per_device_eval_batch_size=4,
        logging_steps=2,
        logging_strategy="steps",
        dataloader_prefetch_factor=None,
    )
    trainer.evaluate()  # outside training: its own window too
    records = epochs(run)
    assert sorted((r["stage"], r["epoch"]) for r in records) == [
        ("train", 0),
        ("train", 1),
        ("val", 0),
        ("val", 1),
        ("val", 2),
    ]
    for r in records:
        total = sum(r["phases_s"].values())
        assert math.isclose(total, r["wall_s"], rel_tol=0.02), r
    train_records = [r for r in records if r["stage"] == "train"]
    # 8 batches of 4 per epoch, one optimizer step per 2 of them
    assert [(r["num_batches"], r["samples"], r["global_step"]) for r in train_records] == [
        (8, 32, 4),
        (8, 32, 8),
    ]
    assert all(r["phases_s"]["callbacks"] > 0 for r in train_records)  # logging every 2 steps
    for val in (r for r in records if r["stage"] == "val"):
        assert (val["num_batches"], val["samples"]) == (3, 12)
        assert val["phases_s"]["forward"] > 0
        assert val["phases_s"]["backward"] == 0
        assert val["phases_s"]["optimizer"] == 0
    info = json.loads((run / "perf" / "run.json").read_text())
    assert info["framework"] == "hf"
    assert info["precision"] == "32-true"
    setup = info["hf_trainer"]
    assert setup["gradient_accumulation_steps"] == 2
    assert setup["per_device_train_batch_size"] == 4
    assert setup["dataloader_num_workers"] == 0
    assert setup["optim"] == str(getattr(trainer.args.optim, "value", trainer.args.optim))
    assert setup["version"] == transformers.__version__
    lifecycle = (run / "perf" / "lifecycle.jsonl").read_text().splitlines()
    events = [(json.loads(line)["event"], json.loads(line)["run"]) for line in lifecycle]
    assert events == [("start", "fit"), ("end", "fit"), ("start", "validate"), ("end", "validate")]


def test_versions_outside_the_tested_range_are_said(tmp_path: Path) -> None:
    assert check_versions() is None  # the pinned one is tested
    assert check_versions({"transformers": "5.24.0rc1"}) is None
    reason = check_versions({"transformers": "4.57.1"})
    assert reason is not None
    assert "4.57.1" in reason
    assert "5.24.0 <= version < 5.25.0" in reason


def test_a_worker_loader_is_timed_in_its_workers(tmp_path: Path) -> None:
    data = Tokens(16, sleep_s=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=UserWarning)  # nothing about the seams
        train(tmp_path / "run", data, dataloader_num_workers=2)
    (record,) = epochs(tmp_path / "run")
    assert record["num_workers"] == 2
    assert record["worker_s"]["fetch"] >= 16 * 0.01 * 0.9  # timed in the two workers


def test_outside_the_tested_versions_the_callback_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainperf.hf.callback as callback_module
    from trainperf.errors import PerfCallbackWarning

    monkeypatch.setattr(callback_module, "_version_said", False)
    monkeypatch.setattr(callback_module, "check_versions", lambda: "transformers 9.0.0 is outside")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for name in ("a", "b"):
            train(tmp_path / name, Tokens(8))
    said = [str(w.message) for w in seen if issubclass(w.category, PerfCallbackWarning)]
    assert said == ["trainperf.hf.PerfCallback: transformers 9.0.0 is outside"]
    assert len(epochs(tmp_path / "b")) == 1  # it still records


def test_an_error_inside_the_callback_never_reaches_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainperf.errors import PerfCallbackWarning

    def broken(self: PerfCallback, *args: Any) -> None:
        raise RuntimeError("planted")

    monkeypatch.setattr(PerfCallback, "_next", broken)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer = train(tmp_path / "run", Tokens(16))
    assert trainer.state.global_step == 4  # training went on to its end
    said = [str(w.message) for w in seen if issubclass(w.category, PerfCallbackWarning)]
    assert len(said) == 1, said
    assert "RuntimeError: planted" in said[0]


def test_a_recording_left_open_at_exit_under_several_ranks_joins_no_exchange(
    tmp_path: Path,
) -> None:
    """At interpreter exit the ranks may be out of step (one raised; one ran a forward of its
    own): the open windows are dropped, not gathered, and the rank's end says failed."""
    import weakref

    from trainperf.hf.callback import _close_at_exit
    from trainperf.recording.run_recorder import RunRecorder
    from trainperf.records.files import read_records
    from trainperf.records.monitoring import LifecycleRecord

    exchanged: list[object] = []

    class NoExchange:
        sync_wait_measured = "gather"

        def gather(self, local: Any) -> Any:
            exchanged.append(local)  # in a real run: waits for ranks that never come
            return local, None

    callback = PerfCallback(tmp_path)
    rec = RunRecorder(tmp_path, track_memory=False, run="fit")
    rec.world_size = 2  # one process standing in for a rank of two
    rec.exchange = NoExchange()  # type: ignore[assignment]
    callback.recorder = rec
    rec.open_epoch("train", 0)
    rec.batch_end("train", 4)
    _close_at_exit(weakref.ref(callback))
    assert exchanged == []
    assert callback.recorder is None
    assert rec.finished
    events = read_records(LifecycleRecord.path(tmp_path), LifecycleRecord)
    assert [e.status for e in events if e.event == "end"] == ["failed"]
