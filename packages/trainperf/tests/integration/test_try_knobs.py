"""Runtime knobs of a ``trainperf try`` trial on a plain Lightning app (no Hydra): each knob
changes what it names, seen from inside the training step, through the same trial window the
trial's command gets; a knob the run cannot take ends the trial with the reason recorded.

One test per knob: each fails when the behaviour it relies on (Lightning using the loader that
``Strategy.process_dataloader`` returns, its loader re-creation, the precision plugin taken at
``Strategy.setup``, ``forward`` called through ``self(...)``) changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler
from trainperf.core.knobs import Knob
from trainperf.core.trial_window import ENV_VAR, TryWindow
from trainperf.lightning import ThroughputMonitorCallback
from trainperf.lightning.knobs_apply import KnobNotApplicable
from trainperf.records.files import read_records
from trainperf.records.try_record import KnobRecord

# the window is set here, not by `trainperf try`: its announcement is expected
pytestmark = pytest.mark.filterwarnings("ignore:TRAINPERF_TRY_WINDOW is set")


class Images(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((3, 6, 6), float(i)), torch.ones(1)


class Seen(L.LightningModule):
    """Remembers, at the first training step, what the knobs could have changed."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 2, 3)
        self.seen: dict[str, Any] = {}
        self.compiling = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.compiling = self.compiling or torch.compiler.is_compiling()
        return self.conv(x).mean(dim=(1, 2, 3))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if not self.seen:
            loader = self.trainer.train_dataloader
            assert isinstance(loader, DataLoader)
            self.seen = {
                "batch": x.shape[0],
                "num_workers": loader.num_workers,
                "persistent_workers": loader.persistent_workers,
                "pin_memory": loader.pin_memory,
                "prefetch_factor": loader.prefetch_factor,
                "channels_last": self.conv.weight.is_contiguous(memory_format=torch.channels_last),
                "autocast": torch.is_autocast_enabled("cpu"),
                "autocast_dtype": torch.get_autocast_dtype("cpu"),
                "threads": torch.get_num_threads(),
                "matmul": torch.get_float32_matmul_precision(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "optimizers": self.trainer.optimizers,
            }
        return (self(x) - y.squeeze(1)).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.fixture(autouse=True)
def _restore_torch_globals() -> Iterator[None]:
    threads = torch.get_num_threads()
    matmul = torch.get_float32_matmul_precision()
    benchmark = torch.backends.cudnn.benchmark
    yield
    torch.set_num_threads(threads)
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.benchmark = benchmark


def _fit(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    knobs: str,
    loader: DataLoader[Any] | None = None,
    module: Seen | None = None,
) -> tuple[Seen, list[KnobRecord]]:
    trial = tmp_path / "trial"
    parsed = tuple(Knob.parse(k) for k in knobs.split())
    monkeypatch.setenv(ENV_VAR, TryWindow(0, 2, trial, knobs=parsed).to_env())
    module = module if module is not None else Seen()
    trainer = L.Trainer(
        max_epochs=1,
        default_root_dir=tmp_path / "root",
        accelerator="cpu",
        callbacks=[ThroughputMonitorCallback(flops=False, peak_memory=False)],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    try:
        trainer.fit(module, loader if loader is not None else DataLoader(Images(), batch_size=4))
    finally:
        records = read_records(KnobRecord.path(trial), KnobRecord)
    return module, records


def test_without_knobs_nothing_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module, records = _fit(tmp_path, monkeypatch, "")
    assert records == []
    assert module.seen["num_workers"] == 0
    assert module.seen["batch"] == 4
    assert not module.seen["channels_last"]
    assert not module.seen["autocast"]


def test_num_workers_persistent_and_prefetch_re_create_the_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    knobs = (
        "knob:dataloader.num_workers=1 knob:dataloader.persistent_workers=true "
        "knob:dataloader.prefetch_factor=3"
    )
    module, records = _fit(tmp_path, monkeypatch, knobs)
    assert module.seen["num_workers"] == 1
    assert module.seen["persistent_workers"] is True
    assert module.seen["prefetch_factor"] == 3
    assert module.seen["batch"] == 4  # the rest of the loader is kept
    assert [r.status for r in records] == ["applied"] * 3
    assert "num_workers 0 -> 1" in records[0].note


def test_pin_memory_and_a_positional_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loader = DataLoader(Images(), 6)  # batch_size given positionally
    knobs = "knob:dataloader.pin_memory=true knob:dataloader.batch_size=8"
    module, records = _fit(tmp_path, monkeypatch, knobs, loader)
    assert module.seen["pin_memory"] is True
    assert module.seen["batch"] == 8
    assert records[-1].status == "applied"


def test_batch_size_of_a_custom_batch_sampler_is_not_applicable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Pairs(BatchSampler):
        pass

    loader = DataLoader(Images(), batch_sampler=Pairs(SequentialSampler(range(24)), 2, False))
    with pytest.raises(KnobNotApplicable, match="Pairs"):
        _fit(tmp_path, monkeypatch, "knob:dataloader.batch_size=8", loader)
    records = read_records(KnobRecord.path(tmp_path / "trial"), KnobRecord)
    assert [r.status for r in records] == ["not applicable"]
    assert "batch_size" in records[0].note


def test_persistent_workers_without_workers_is_not_applicable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(KnobNotApplicable, match="num_workers"):
        _fit(tmp_path, monkeypatch, "knob:dataloader.persistent_workers=true")


def test_loader_knobs_only_in_the_tested_lightning_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(L, "__version__", "2.7.1")
    with pytest.raises(KnobNotApplicable, match="outside"):
        _fit(tmp_path, monkeypatch, "knob:dataloader.num_workers=1")


def test_channels_last_threads_matmul_and_cudnn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = 1 if torch.get_num_threads() != 1 else 2
    knobs = (
        f"knob:model.channels_last=true knob:torch.threads={threads} "
        "knob:torch.matmul_precision=medium knob:cudnn.benchmark=true"
    )
    module, records = _fit(tmp_path, monkeypatch, knobs)
    assert module.seen["channels_last"]
    assert module.seen["threads"] == threads
    assert module.seen["matmul"] == "medium"
    assert module.seen["cudnn_benchmark"] is True
    assert [r.status for r in records] == ["applied"] * 4


def test_compile_compiles_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch._dynamo.reset()
    module, records = _fit(tmp_path, monkeypatch, "knob:model.compile=eager")
    assert module.compiling
    assert "compiled (backend eager)" in records[0].note
    torch._dynamo.reset()


def test_unknown_compile_backend_is_not_applicable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(KnobNotApplicable, match="no backend 'warp9'"):
        _fit(tmp_path, monkeypatch, "knob:model.compile=warp9")


def test_bf16_mixed_precision_is_taken_at_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, records = _fit(tmp_path, monkeypatch, "knob:trainer.precision=bf16-mixed")
    assert module.seen["autocast"]
    assert module.seen["autocast_dtype"] == torch.bfloat16
    assert records[0].note == "precision 32-true -> bf16-mixed"


def test_16_mixed_on_cpu_is_not_applicable_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(KnobNotApplicable, match="16-mixed on CPU"):
        _fit(tmp_path, monkeypatch, "knob:trainer.precision=16-mixed")
    (record,) = read_records(KnobRecord.path(tmp_path / "trial"), KnobRecord)
    assert record.status == "not applicable"
    assert "bf16-mixed" in record.note


class AdamWithSchedule(Seen):
    """configure_optimizers returns AdamW with a scheduler built on it (Lightning's dict form)."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        self.scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler}


class Rprop(Seen):
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Rprop(self.parameters())


def test_fused_optimizer_steps_fused_and_keeps_its_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, records = _fit(
        tmp_path, monkeypatch, "knob:optimizer.fused=true", module=AdamWithSchedule()
    )
    (optimizer,) = module.seen["optimizers"]
    assert isinstance(optimizer, torch.optim.AdamW)
    assert all(group["fused"] is True and not group["foreach"] for group in optimizer.param_groups)
    assert module.scheduler.optimizer is optimizer  # patched in place: the scheduler still steps it
    state = optimizer.state[module.conv.weight]
    assert int(state["step"]) == module.trainer.global_step > 0  # it stepped, fused
    assert [(r.knob, r.status) for r in records] == [("optimizer.fused=true", "applied")]
    assert "AdamW fused" in records[0].note


def test_fused_sgd_gives_the_same_update_as_the_plain_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    plain, _ = _fit(tmp_path / "plain", monkeypatch, "")
    torch.manual_seed(0)
    fused, records = _fit(tmp_path / "fused", monkeypatch, "knob:optimizer.fused=true")
    assert fused.seen["optimizers"][0].param_groups[0]["fused"] is True
    assert records[0].status == "applied"
    # SGD without momentum: the fused kernel computes the same update
    assert torch.allclose(plain.conv.weight, fused.conv.weight, atol=1e-6)


def test_fused_optimizer_of_another_class_is_not_applicable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(KnobNotApplicable, match="Rprop"):
        _fit(tmp_path, monkeypatch, "knob:optimizer.fused=true", module=Rprop())
    (record,) = read_records(KnobRecord.path(tmp_path / "trial"), KnobRecord)
    assert record.status == "not applicable"
    assert "only Adam, AdamW and SGD fuse" in record.note
