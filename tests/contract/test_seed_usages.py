"""Contract: every usage the original project's documents show (``../shared/seeds``) works as
written. Each test names the usage it exercises (:data:`tests.contract.seeds.USAGES`: seed file,
section and the quoted text) and runs it as the seed writes it: the imports, the constructor with
the seed's arguments, a tiny Trainer where the seed runs one, the seed's YAML instantiated as it
stands, ``analyze_trace`` on a trace the callback wrote. The seed's ``runners/train.py`` /
``ocr/train.py`` commands run through ``ocr-train`` in ``test_seed_commands.py``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import yaml
from hydra import compose, initialize_config_module
from hydra.utils import get_object, instantiate
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset
from trainperf.errors import ConfigError

from tests.contract.seeds import REPO_ROOT, USAGES, Usage
from trainperf_testing.memory_logger import MemoryLogger

VAL_KEYS = {  # 000 "View Metrics in WandB" and 001's on_validation_epoch_end
    "performance/val_epoch_time",
    "performance/val_batch_mean",
    "performance/val_batch_median",
    "performance/val_batch_p95",
    "performance/val_batch_p99",
    "performance/val_batch_std",
    "performance/val_num_batches",
    "performance/cpu_memory_percent",
}
GPU_KEYS = {"performance/gpu_memory_gb", "performance/gpu_memory_reserved_gb"}


def _yaml(usage: Usage) -> dict[str, Any]:
    loaded = yaml.safe_load(usage.quote)
    assert isinstance(loaded, dict)
    return loaded


class Regression(pl.LightningModule):
    """A user's small module: a linear layer on random data."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(n: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))
    return DataLoader(data, batch_size=4)


def _fit(root: Path, callbacks: list[pl.Callback], epochs: int = 1) -> MemoryLogger:
    """The seed's ``pl.Trainer(callbacks=[...], ...)``: ``epochs`` of 6 training and 3
    validation batches."""
    logger = MemoryLogger()
    trainer = pl.Trainer(
        callbacks=callbacks,
        default_root_dir=root,
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(Regression(), _loader(24), _loader(12))
    return logger


# -- 000 / 001: PerformanceProfilerCallback ------------------------------------------------------


@pytest.mark.slow
def test_000_in_training_code_logs_the_documented_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """USAGES["000-import-train"] (with 000-wandb-keys, 001-keys): the import, the constructor
    with the seed's four arguments and a Trainer run; every documented validation key reaches
    the Trainer's loggers (WandbLogger among them), GPU keys where CUDA is."""
    from ocr.lightning_modules.callbacks import PerformanceProfilerCallback

    profiler = PerformanceProfilerCallback(
        enabled=True,
        log_interval=10,
        profile_memory=True,
        verbose=True,  # Set to False in production
    )
    logger = _fit(tmp_path, [profiler])

    names = logger.metric_names()
    expected = VAL_KEYS | (GPU_KEYS if torch.cuda.is_available() else set())
    assert expected <= names, sorted(expected - names)
    (row,) = logger.epochs("val")
    assert row["performance/val_num_batches"] == 3
    assert row["performance/val_batch_p95"] >= row["performance/val_batch_median"] > 0
    assert row["performance/val_epoch_time"] >= 3 * row["performance/val_batch_mean"] * 0.99
    assert "val" in capsys.readouterr().out  # verbose=True: the epoch's table is printed


@pytest.mark.slow
def test_001_disabled_logs_nothing(tmp_path: Path) -> None:
    """USAGES["001-disabled"] and "001-instantiate": ``PerformanceProfilerCallback(enabled=True)``
    builds; ``enabled=False`` does no work: no performance key is logged."""
    from ocr.lightning_modules.callbacks import PerformanceProfilerCallback

    assert PerformanceProfilerCallback(enabled=True).enabled
    logger = _fit(tmp_path, [PerformanceProfilerCallback(enabled=False)])
    assert not {k for k in logger.metric_names() if k.startswith("performance/")}


def test_000_config_file_as_written_builds_the_callback() -> None:
    """USAGES["000-yaml"]: the seed's ``configs/callbacks/performance_profiler.yaml`` as it
    stands, its ``_target_`` included, instantiates with its four settings."""
    from ocr.lightning_modules.callbacks import PerformanceProfilerCallback

    node = OmegaConf.create(_yaml(USAGES["000-yaml"]))
    callback = instantiate(node.performance_profiler)
    assert type(callback) is PerformanceProfilerCallback
    assert (callback.enabled, callback.log_interval, callback.verbose) == (True, 10, False)
    assert callback.profile_memory is True


IMPORTS = [
    ("000-import-train", "ocr.lightning_modules.callbacks", "PerformanceProfilerCallback"),
    (
        "001-module",
        "ocr.lightning_modules.callbacks.performance_profiler",
        "PerformanceProfilerCallback",
    ),
    (
        "004-modules",
        "ocr.lightning_modules.callbacks.throughput_monitor",
        "ThroughputMonitorCallback",
    ),
    (
        "004-profiler-module",
        "ocr.lightning_modules.callbacks.profiler_callback",
        "ProfilerCallback",
    ),
    (
        "004-resource-module",
        "ocr.lightning_modules.callbacks.resource_monitor",
        "ResourceMonitorCallback",
    ),
    ("004-pattern", "ocr.lightning_modules.callbacks", "ThroughputMonitorCallback"),
    ("004-pattern", "ocr.lightning_modules.callbacks", "ProfilerCallback"),
    ("004-pattern", "ocr.lightning_modules.callbacks", "ResourceMonitorCallback"),
    ("003-package", "ocr.callbacks.profiler", "ProfilerCallback"),
    ("003-package", "ocr.callbacks", "ProfilerCallback"),
]


@pytest.mark.parametrize(("usage", "module", "name"), IMPORTS)
def test_every_documented_import_path_is_the_toolkits_class(
    usage: str, module: str, name: str
) -> None:
    """Each import path the seeds name gives the toolkit's own class (the app's face re-exports
    :mod:`trainperf.lightning`: no second copy)."""
    assert usage in USAGES
    imported = getattr(importlib.import_module(module), name)
    assert imported is getattr(importlib.import_module("trainperf.lightning"), name)


def test_000_import_test_command_as_written() -> None:
    """USAGES["000-import-test"]: the seed's ``python -c`` import, in a fresh interpreter."""
    code = USAGES["000-import-test"].quote.split('-c "', 1)[1].rstrip('"')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), *sys.path])))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


# -- 003: ProfilerCallback with flat arguments, its YAML, analyze_trace ---------------------------

SEED_SETTINGS: dict[str, Any] = {  # 003's profiler.yaml values
    "enabled": False,
    "profile_epochs": [1, 5, 10],
    "profile_steps": 100,
    "warmup_steps": 5,
    "activities": ["cpu", "cuda"],
    "record_shapes": True,
    "with_stack": False,
    "output_dir": "profiler_traces",
    "export_chrome_trace": True,
    "log_top_k_ops": 15,
}


def _check_seed_settings(callback: Any) -> None:
    """The seed's settings landed where they mean the same: epochs are
    ``trainer.current_epoch`` numbers, ``profile_steps`` the steps recorded, ``warmup_steps``
    the traced-and-discarded steps before them."""
    assert callback.enabled is False
    assert callback.schedule.epochs == {1, 5, 10}
    assert (callback.schedule.active, callback.schedule.warmup) == (100, 5)
    assert callback.trace.activities == ("cpu", "cuda")
    assert (callback.trace.record_shapes, callback.trace.with_stack) == (True, False)
    assert callback.trace.output_dir == Path("profiler_traces")
    assert callback.trace.export_chrome_trace is True
    assert callback.log_top_k_ops == 15


def test_003_flat_arguments_as_the_seed_names_them() -> None:
    """USAGES["003-class"]: ``from ocr.callbacks.profiler import ProfilerCallback`` with every
    flat argument of the seed's signature."""
    from ocr.callbacks.profiler import ProfilerCallback

    _check_seed_settings(ProfilerCallback(**SEED_SETTINGS))


def test_003_config_file_as_written_builds_the_callback() -> None:
    """USAGES["003-yaml"]: the seed's ``configs/callbacks/profiler.yaml`` as it stands."""
    from ocr.callbacks.profiler import ProfilerCallback

    callback = instantiate(OmegaConf.create(_yaml(USAGES["003-yaml"])).profiler)
    assert type(callback) is ProfilerCallback
    _check_seed_settings(callback)


def test_003_a_flat_argument_and_its_grouped_twin_given_differently_is_one_error() -> None:
    """The flat name and the grouped setting it is cannot both be meant: one ``ConfigError``
    naming both keys and values; the same value given twice is accepted."""
    from trainperf.lightning import ProfileSchedule, TraceOptions

    from ocr.callbacks.profiler import ProfilerCallback

    with pytest.raises(ConfigError) as err:
        ProfilerCallback(schedule=ProfileSchedule(active=10), profile_steps=50)
    assert "profile_steps=50" in str(err.value)
    assert "schedule.active=10" in str(err.value)
    with pytest.raises(ConfigError, match=r"output_dir='a'.*trace\.output_dir=b"):
        ProfilerCallback(trace=TraceOptions(output_dir="b"), output_dir="a")
    same = ProfilerCallback(schedule=ProfileSchedule(epochs=[2, 1]), profile_epochs=[1, 2])
    assert same.schedule.epochs == {1, 2}
    with pytest.raises(ConfigError, match="profile_steps=0"):
        ProfilerCallback(profile_steps=0)  # a bad flat value is named by its flat name


@pytest.mark.slow
def test_003_flat_window_in_a_trainer_run_and_analyze_trace(tmp_path: Path) -> None:
    """USAGES["003-class"] in a run, then USAGES["003-analyze"]: ``profile_epochs=[1, 2]`` of
    three epochs writes ``profiler_traces/epoch_1.json`` and ``epoch_2.json`` only, each window
    recording ``profile_steps`` steps after ``warmup_steps``; ``ProfilerCallback.analyze_trace``
    (on the class and on the instance) returns the seed's keys in the seed's shape."""
    from ocr.callbacks.profiler import ProfilerCallback

    callback = ProfilerCallback(
        enabled=True,
        profile_epochs=[1, 2],
        profile_steps=3,
        warmup_steps=1,
        activities=["cpu", "cuda"],
        output_dir="profiler_traces",
        log_top_k_ops=5,
    )
    _fit(tmp_path, [callback], epochs=3)
    traces = sorted(p.name for p in (tmp_path / "profiler_traces").iterdir())
    assert traces == ["epoch_1.json", "epoch_2.json"]
    assert [(w.epoch, w.steps) for w in callback.windows] == [(1, 3), (2, 3)]

    trace = tmp_path / "profiler_traces" / "epoch_1.json"
    on_class = ProfilerCallback.analyze_trace(str(trace))
    on_instance = callback.analyze_trace(str(trace))
    assert on_class["top_cpu_ops"] == on_instance["top_cpu_ops"]
    pairs = on_class["top_cpu_ops"]
    assert pairs
    assert all(isinstance(n, str) and isinstance(us, float) for n, us in pairs)
    assert [us for _, us in pairs] == sorted((us for _, us in pairs), reverse=True)
    # time_us is the op's self time in microseconds (the rows beside it say milliseconds)
    rows = {r["name"]: r["self_ms"] for r in on_class["top_cpu_op_rows"]}
    assert all(us == pytest.approx(rows[n] * 1000, abs=1e-3) for n, us in pairs)
    assert on_class["top_cuda_ops"] == [] or torch.cuda.is_available()
    assert all(isinstance(b, int) and b > 0 for _, b in on_class["memory_peaks"])
    assert on_class["memory_peaks"]  # profile_memory is on by default: the CPU's peak
    assert 0.0 <= on_class["dataloader_time_pct"] <= 100.0


# -- Hydra: the seed's keys as overrides (composed, not run; the runs: test_seed_commands) --------


def _compose(*overrides: str) -> Any:
    with initialize_config_module("ocr.configs", version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def test_003_hydra_flat_keys_reach_the_grouped_settings() -> None:
    """USAGES["003-integration"]'s keys: ``callbacks.profiler.profile_epochs=[1,2]`` and
    ``callbacks.profiler.profile_steps=50`` (and the others of the seed's YAML) are overrides of
    the default callbacks' profiler, built into its grouped settings."""
    cfg = _compose(
        "experiment=synthetic_debug",
        "callbacks.profiler.enabled=true",
        "callbacks.profiler.profile_epochs=[1,2]",
        "callbacks.profiler.profile_steps=50",
        "callbacks.profiler.warmup_steps=2",
        "callbacks.profiler.activities=[cpu]",
        "callbacks.profiler.with_stack=true",
        "callbacks.profiler.output_dir=traces",
        "callbacks.profiler.export_chrome_trace=false",
        "callbacks.profiler.record_shapes=false",
    )
    callback = instantiate(cfg.callbacks.profiler)
    assert callback.schedule.epochs == {1, 2}
    assert (callback.schedule.active, callback.schedule.warmup) == (50, 2)
    assert callback.trace.activities == ("cpu",)
    assert callback.trace.with_stack is True
    assert callback.trace.record_shapes is False
    assert callback.trace.export_chrome_trace is False
    assert callback.trace.output_dir == Path("traces")
    # the flat keys left unset keep the grouped defaults
    plain = instantiate(_compose("callbacks.profiler.enabled=true").callbacks.profiler)
    assert (plain.schedule.epochs, plain.schedule.active) == ({1}, 5)


def test_003_profiler_is_off_by_default() -> None:
    """USAGES["003-default-off"]: the default callbacks carry the profiler switched off."""
    assert _compose().callbacks.profiler.enabled is False


def test_003_quick_test_command_says_why_it_records_nothing() -> None:
    """USAGES["003-quick"]: ``trainer.max_epochs=1`` runs epoch 0 only, and the seed's epochs
    are ``trainer.current_epoch`` numbers (its integration test's ``[1,2]`` of 3 epochs), so the
    default epoch 1 is never reached: the callback says so at setup (the seed expected an
    ``epoch_1.json`` its own numbering cannot produce). With ``profile_epochs=[0]`` it
    profiles."""
    cfg = _compose(
        "experiment=synthetic_debug",
        "trainer.max_epochs=1",
        "callbacks.profiler.enabled=true",
        "callbacks.profiler.profile_steps=20",
    )
    callback = instantiate(cfg.callbacks.profiler)
    assert callback.schedule.active == 20
    problem = callback.schedule.never_profiled("fit", cfg.trainer.max_epochs)
    assert problem is not None
    assert "epochs [1] are never reached (max_epochs=1" in problem
    fixed = _compose("trainer.max_epochs=1", "callbacks.profiler.profile_epochs=[0]")
    assert instantiate(fixed.callbacks.profiler).schedule.never_profiled("fit", 1) is None


@pytest.mark.parametrize(
    ("usage", "choice", "entry", "name"),
    [
        ("000-yaml", "performance_profiler", "performance_profiler", "PerformanceProfilerCallback"),
        ("004-modules", "throughput_monitor", "throughput_monitor", "ThroughputMonitorCallback"),
        ("004-profiler-module", "profiler", "profiler", "ProfilerCallback"),
        ("004-resource-module", "resource_monitor", "resource_monitor", "ResourceMonitorCallback"),
    ],
)
def test_each_seed_callback_config_is_a_callbacks_choice(
    usage: str, choice: str, entry: str, name: str
) -> None:
    """The seeds' ``configs/callbacks/<name>.yaml`` files are ``callbacks=<name>`` choices
    whose entry builds the class the seeds import from ``ocr.lightning_modules.callbacks``."""
    assert f"configs/callbacks/{choice}.yaml" in USAGES[usage].quote or usage == "000-yaml"
    cfg = _compose(f"callbacks={choice}")
    target = get_object(cfg.callbacks[entry]._target_)
    assert target is getattr(importlib.import_module("ocr.lightning_modules.callbacks"), name)


# -- the quotes themselves -------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(USAGES))
def test_every_quote_stands_in_its_seed(key: str) -> None:
    """Each quoted usage is verbatim in its seed file (where the seeds are beside the checkout;
    under ``CI=true`` they must be)."""
    usage = USAGES[key]
    path = usage.path()
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"seed {usage.seed}_*.txt not found; CI=true requires ../shared/seeds")
        pytest.skip(f"seed {usage.seed}_*.txt not beside this checkout")
    assert usage.quote in path.read_text(encoding="utf-8"), f"{key}: {usage.section}"
