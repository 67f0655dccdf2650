"""Entry-point helpers: WandB online/offline choice, callbacks / loggers / Trainer from config."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import InstantiationException
from omegaconf import OmegaConf
from trainperf.lightning import (
    EpochScanCallback,
    PerformanceProfilerCallback,
    ProfilerCallback,
)
from trainperf.records.files import read_run_record

from ocr.errors import ConfigError, InputError
from ocr.runtime import (
    build_callbacks,
    build_loggers,
    build_trainer,
    make_wandb_logger,
    register_resolvers,
    wandb_offline_default,
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_wandb_offline_without_credentials(clean_env: Path) -> None:
    assert wandb_offline_default() is True


def test_wandb_online_with_api_key(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_offline_default() is False
    monkeypatch.setenv("WANDB_MODE", "offline")  # an explicit mode wins over the key
    assert wandb_offline_default() is True


def test_wandb_online_with_netrc_entry(clean_env: Path) -> None:
    (clean_env / ".netrc").write_text("machine other.host\n  login a\n")
    assert wandb_offline_default() is True
    (clean_env / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    assert wandb_offline_default() is False


def test_progress_bars_dropped_when_disabled() -> None:
    cfg = OmegaConf.create(
        {
            "trainer": {"enable_progress_bar": False},
            "callbacks": {
                "bar": {"_target_": "lightning.pytorch.callbacks.RichProgressBar"},
                "lr": {"_target_": "lightning.pytorch.callbacks.LearningRateMonitor"},
                "off": None,
            },
        }
    )
    names = [type(c).__name__ for c in build_callbacks(cfg)]
    # Without a terminal (as under pytest) a PlainProgressBar stands in for Lightning's bar.
    assert [n for n in names if n != "PlainProgressBar"] == ["LearningRateMonitor"]


# -- config entries, the trainer node, loggers (issue 15) ---------------------------------------


@pytest.fixture(autouse=True)
def _undo_quiet_console() -> Iterator[None]:
    # build_trainer routes warnings to logging for the process (the CLI's choice); not pytest's.
    yield
    logging.captureWarnings(False)


def _compose(*overrides: str) -> Any:
    register_resolvers()
    with initialize_config_module(version_base="1.3", config_module="ocr.configs"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def test_entry_without_target_is_an_error_naming_the_key() -> None:
    # What `callbacks=none +callbacks.profiler.enabled=true` composes to: it used to be skipped.
    cfg = OmegaConf.create({"callbacks": {"profiler": {"enabled": True}}})
    with pytest.raises(ValueError, match=r"callbacks\.profiler has no _target_"):
        build_callbacks(cfg)
    cfg = OmegaConf.create({"logger": {"wandb": {"project": "x"}}})
    with pytest.raises(ValueError, match=r"logger\.wandb has no _target_"):
        build_loggers(cfg)


class _BuggyCallback:
    """A constructor with a bug of its own (not a rejected argument)."""

    def __init__(self, interval: int = 1) -> None:
        self.parts = [1, 2][interval]  # IndexError for interval=5: a bug, not the config's


def test_entry_the_config_gets_wrong_is_a_config_error_and_a_constructor_bug_is_not() -> None:
    def build(entry: dict[str, Any]) -> list[Any]:
        return build_callbacks(OmegaConf.create({"callbacks": {"x": entry}}))

    progress = "trainperf.lightning.PlainProgressBar"
    with pytest.raises(ConfigError, match=r"callbacks\.x .*interval_s must be > 0, got -1"):
        build({"_target_": progress, "interval_s": -1})
    with pytest.raises(ConfigError, match=r"callbacks\.x .*unexpected keyword argument 'interval'"):
        build({"_target_": progress, "interval": 3})
    with pytest.raises(ConfigError, match=r"_target_ ocr\.no_such_module\.Cb names nothing"):
        build({"_target_": "ocr.no_such_module.Cb"})
    with pytest.raises(InstantiationException) as bug:  # Hydra's, with the bug's traceback
        build({"_target_": f"{__name__}._BuggyCallback", "interval": 5})
    assert not isinstance(bug.value, InputError)
    assert isinstance(bug.value.__cause__, IndexError)


def test_disabled_entry_is_not_built() -> None:
    cfg = OmegaConf.create(
        {
            "callbacks": {
                "prof": {
                    "_target_": "trainperf.lightning.ProfilerCallback",
                    "enabled": False,
                },
                "lr": {"_target_": "lightning.pytorch.callbacks.LearningRateMonitor"},
            }
        }
    )
    names = [type(c).__name__ for c in build_callbacks(cfg)]
    # Without a terminal (as under pytest) a PlainProgressBar stands in for Lightning's bar.
    assert [n for n in names if n != "PlainProgressBar"] == ["LearningRateMonitor"]


def test_profiler_sits_disabled_in_every_callbacks_choice_and_costs_nothing() -> None:
    for choice in ("default", "monitoring", "performance_profiler", "evaluation", "profiler"):
        cfg = _compose(f"callbacks={choice}")
        assert cfg.callbacks.profiler.enabled is False, choice
        # Disabled: not built at all, so no hook of it runs at any step.
        only = OmegaConf.create({"callbacks": {"profiler": cfg.callbacks.profiler}})
        built = build_callbacks(only)
        assert not [c for c in built if type(c).__name__ != "PlainProgressBar"], choice
    cfg = _compose("callbacks=monitoring", "callbacks.profiler.enabled=true")
    assert "resource_monitor" in cfg.callbacks
    only = OmegaConf.create({"callbacks": {"profiler": cfg.callbacks.profiler}})
    built = [type(c) for c in build_callbacks(only)]
    assert [c for c in built if c.__name__ != "PlainProgressBar"] == [ProfilerCallback]
    # `+` on a key that exists is refused by Hydra, naming it.
    with pytest.raises(Exception, match=r"callbacks\.profiler\.enabled"):
        _compose("+callbacks.profiler.enabled=true")


def test_a_bad_value_in_the_profilers_nested_schedule_is_a_config_error_naming_it() -> None:
    cfg = _compose("callbacks.profiler.enabled=true", "callbacks.profiler.schedule.active=0")
    only = OmegaConf.create({"callbacks": {"profiler": cfg.callbacks.profiler}})
    with pytest.raises(ConfigError, match="ProfileSchedule: active must be an integer >= 1, got 0"):
        build_callbacks(only)
    cfg = _compose("callbacks.profiler.enabled=true", "callbacks.profiler.trace.gzip=maybe")
    only = OmegaConf.create({"callbacks": {"profiler": cfg.callbacks.profiler}})
    with pytest.raises(ConfigError, match="TraceOptions: gzip must be true or false, got 'maybe'"):
        build_callbacks(only)


def _scan_callbacks(*overrides: str) -> list[Any]:
    """The performance profiler and epoch scan entries of the composed callbacks, built."""
    cfg = _compose(*overrides)
    keys = ("performance_profiler", "epoch_scan")
    only = {k: v for k, v in cfg.callbacks.items() if k in keys}
    built = build_callbacks(OmegaConf.create({"callbacks": only}))
    return [c for c in built if type(c).__name__ != "PlainProgressBar"]


def test_monitoring_runs_the_epoch_scan_nested_in_the_profiler() -> None:
    """callbacks=monitoring builds no EpochScanCallback of its own (one callback fewer for
    Lightning to dispatch every step's hooks to) but one nested in the performance profiler, with
    the settings callbacks=epoch_scan gives the scan alone (both from epoch_scan/default.yaml)."""
    cfg = _compose("callbacks=monitoring")
    assert "epoch_scan" not in cfg.callbacks
    scan_cfg = cfg.callbacks.performance_profiler.epoch_scan
    alone_cfg = _compose("callbacks=epoch_scan").callbacks.epoch_scan
    assert OmegaConf.to_container(scan_cfg) == OmegaConf.to_container(alone_cfg)
    (profiler,) = _scan_callbacks("callbacks=monitoring")
    assert isinstance(profiler, PerformanceProfilerCallback)
    assert isinstance(profiler.epoch_scan, EpochScanCallback)
    assert profiler.epoch_scan.enabled
    assert not profiler.epoch_scan.batch_shapes
    (alone,) = _scan_callbacks("callbacks=epoch_scan")
    assert isinstance(alone, EpochScanCallback)
    # the profiler alone carries its default scan (the constructor's default, epoch_scan: true)
    (profiler,) = _scan_callbacks("callbacks=performance_profiler")
    assert isinstance(profiler.epoch_scan, EpochScanCallback)
    assert profiler._scan_is_default
    (profiler,) = _scan_callbacks(
        "callbacks=performance_profiler", "callbacks.performance_profiler.epoch_scan=null"
    )
    assert profiler.epoch_scan is None
    # the scan's settings on the command line, and no scan
    (profiler,) = _scan_callbacks(
        "callbacks=monitoring", "callbacks.performance_profiler.epoch_scan.batch_shapes=true"
    )
    assert profiler.epoch_scan.batch_shapes
    (profiler,) = _scan_callbacks(
        "callbacks=monitoring", "callbacks.performance_profiler.epoch_scan=null"
    )
    assert profiler.epoch_scan is None


def test_disabled_profiler_carrying_an_enabled_scan_is_built() -> None:
    """enabled=false skips building an entry, except one that carries an enabled nested entry:
    the disabled profiler is built (it records nothing) so that the scan it carries runs."""
    off = "callbacks.performance_profiler.enabled=false"
    (profiler,) = _scan_callbacks("callbacks=monitoring", off)
    assert isinstance(profiler, PerformanceProfilerCallback)
    assert not profiler.enabled
    assert isinstance(profiler.epoch_scan, EpochScanCallback)
    assert profiler.epoch_scan.enabled
    scan_off = "callbacks.performance_profiler.epoch_scan.enabled=false"
    assert _scan_callbacks("callbacks=monitoring", off, scan_off) == []
    assert _scan_callbacks("callbacks=performance_profiler", off) == []


def test_evaluation_callbacks_have_no_training_callbacks() -> None:
    cfg = _compose("callbacks=evaluation")
    assert {k for k, v in cfg.callbacks.items() if v is not None} == {"progress_bar", "profiler"}


def test_trainer_node_has_every_trainer_argument() -> None:
    import inspect

    import lightning as L

    params = {
        n
        for n, p in inspect.signature(L.Trainer.__init__).parameters.items()
        if n != "self" and p.kind is p.KEYWORD_ONLY
    }
    cfg = _compose()
    assert set(cfg.trainer) - {"_target_"} == params
    assert cfg.trainer.fast_dev_run is False  # Lightning's default where we choose none
    assert cfg.trainer.max_epochs == 100  # ours where trainer/default.yaml chooses
    assert _compose("trainer.fast_dev_run=true", "trainer.max_time=00:00:01:00").trainer.max_time


def test_trainer_typo_fails_at_composition_naming_the_key() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match=r"trainer\.max_epoch") as info:
        _compose("trainer.max_epoch=3")
    assert "Key 'max_epoch' is not in struct" in str(info.value.__cause__)


def test_trainer_key_added_with_plus_is_checked_before_the_trainer() -> None:
    cfg = OmegaConf.create(
        {"trainer": {"_target_": "lightning.pytorch.Trainer", "max_epoch": 3}, "callbacks": {}}
    )
    with pytest.raises(ValueError, match=r"trainer\.max_epoch .*did you mean trainer\.max_epochs"):
        build_trainer(cfg)


def test_trainer_logger_false_means_no_loggers_and_other_values_are_refused(
    tmp_path: Path,
) -> None:
    base = {
        "_target_": "lightning.pytorch.Trainer",
        "default_root_dir": str(tmp_path),
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    log_cfg = {
        "csv": {"_target_": "lightning.pytorch.loggers.CSVLogger", "save_dir": str(tmp_path)}
    }
    cfg = OmegaConf.create({"trainer": {**base, "logger": False}, "logger": log_cfg})
    assert build_trainer(cfg).loggers == []
    cfg = OmegaConf.create({"trainer": {**base, "logger": "csv"}, "logger": log_cfg})
    with pytest.raises(
        ValueError, match=r"trainer\.logger='csv': loggers come from the logger group"
    ):
        build_trainer(cfg)
    cfg = OmegaConf.create({"trainer": {**base, "callbacks": ["x"]}})
    with pytest.raises(ValueError, match=r"trainer\.callbacks: callbacks come from the callbacks"):
        build_trainer(cfg)


def test_experiment_tag_goes_to_run_json_and_logger_hparams(tmp_path: Path) -> None:
    cfg = OmegaConf.create(
        {
            "task_name": "train",
            "experiment_tag": "baseline_profiling",
            "trainer": {
                "_target_": "lightning.pytorch.Trainer",
                "default_root_dir": str(tmp_path),
                "enable_progress_bar": False,
            },
            "logger": {
                "csv": {
                    "_target_": "lightning.pytorch.loggers.CSVLogger",
                    "save_dir": str(tmp_path),
                    "name": "csv",
                    "version": "",
                }
            },
        }
    )
    trainer = build_trainer(cfg)
    trainer.loggers[0].save()
    assert read_run_record(tmp_path).experiment_tag == "baseline_profiling"
    assert "experiment_tag: baseline_profiling" in (tmp_path / "csv" / "hparams.yaml").read_text()


def test_wandb_switch_and_tag(tmp_path: Path) -> None:
    cfg = _compose("wandb=true", "experiment_tag=baseline_profiling")
    assert cfg.logger.wandb.enabled is True
    assert _compose("logger=wandb").logger.wandb.enabled is True
    assert _compose().logger.wandb.enabled is False
    logger = make_wandb_logger(
        offline=True, name="train", experiment_tag="baseline_profiling", save_dir=str(tmp_path)
    )
    assert logger._wandb_init["name"] == "train-baseline_profiling"
    assert logger._wandb_init["tags"] == ["baseline_profiling"]
    # Lightning's anonymous=None makes wandb warn "The anonymous setting has no effect".
    assert "anonymous" not in logger._wandb_init


def test_auto_precision_takes_bf16_only_where_the_cpu_has_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ocr.runtime as runtime

    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(runtime, "cpu_bf16", lambda: True)
    assert runtime.auto_precision() == "32-true"  # the default stays full precision on CPU
    assert runtime.auto_precision("bf16") == "bf16-mixed"
    monkeypatch.setattr(runtime, "cpu_bf16", lambda: False)  # emulated bf16 would be slower
    assert runtime.auto_precision("bf16") == "32-true"
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(runtime, "cuda_bf16", lambda: False)
    assert runtime.auto_precision("bf16") == "16-mixed"
    with pytest.raises(InputError, match="takes nothing or 'bf16', got 'fp8'"):
        runtime.auto_precision("fp8")


@pytest.mark.parametrize(
    ("cuda", "capability", "precision", "channels_last", "fused"),
    [
        (False, None, "32-true", False, None),  # CPU: the defaults as measured there
        (True, (9, 0), "bf16-mixed", True, True),  # H100 / H200: native bf16
        (True, (8, 0), "bf16-mixed", True, True),  # A100
        (True, (7, 5), "16-mixed", True, True),  # T4: no native bf16
    ],
)
def test_fast_cuda_defaults_are_resolved_at_start(
    monkeypatch: pytest.MonkeyPatch,
    cuda: bool,
    capability: tuple[int, int] | None,
    precision: str,
    channels_last: bool,
    fused: bool | None,
) -> None:
    import ocr.runtime as runtime

    def device_capability(device: int = 0) -> tuple[int, int]:
        if capability is None:
            raise RuntimeError("Found no NVIDIA driver on your system")
        return capability

    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(runtime.torch.cuda, "get_device_capability", device_capability)
    monkeypatch.setattr(runtime, "cpu_bf16", lambda: False)
    assert runtime.cuda_bf16() is (capability is not None and capability >= (8, 0))
    assert runtime.auto_precision() == precision
    assert runtime.auto_channels_last() is channels_last
    assert runtime.auto_fused() is fused
    cfg = _compose()  # the composed config resolves the same values
    assert cfg.trainer.precision == precision
    assert cfg.model.channels_last is channels_last
    assert cfg.model.optimizer.fused is fused
    assert _compose("experiment=synthetic_debug").model.channels_last is True  # measured on CPU


def test_end_distributed_destroys_the_process_group_and_is_a_no_op_without_one(
    tmp_path: Path,
) -> None:
    """ocr-train / ocr-test end a run that finished by destroying the process group, as PyTorch
    documents: left to the interpreter's exit, Gloo's threads can abort a successful run."""
    import torch.distributed as dist

    from ocr.runtime import end_distributed

    end_distributed()  # no group: nothing to do
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        assert dist.is_initialized()
        end_distributed()
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
