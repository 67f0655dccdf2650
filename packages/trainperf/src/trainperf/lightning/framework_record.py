"""What ``perf/run.json`` records of a Lightning run's framework and app.

What ``perf/run.json`` records of the framework a Lightning run used, and the app above it:
``framework`` (Lightning, its version, the settings advice may name with their values in this
run, each change in Lightning's words: :data:`trainperf.frameworks.spellings.LIGHTNING`) and
``app`` (a Hydra app's name, saved config and overrides: :func:`trainperf.frameworks.hydra_app.
app_info`), so the report and advice read them as data."""

from __future__ import annotations

import lightning as L
import msgspec
import torch

from trainperf.frameworks.hydra_app import app_info
from trainperf.frameworks.spellings import LIGHTNING, framework_info
from trainperf.records.schema import JsonValue


def framework_entries(trainer: L.Trainer) -> dict[str, JsonValue]:
    """``{"framework": ..., "app": ...}`` for ``run.json`` (``app`` only in a Hydra app)."""
    values: dict[str, JsonValue] = {"precision": str(trainer.precision)}
    # Trainer(benchmark=...) sets torch's flag at construction: the effective value
    values["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    info = framework_info(LIGHTNING, version=str(L.__version__), values=values)
    out: dict[str, JsonValue] = {"framework": msgspec.to_builtins(info)}
    app = app_info()
    if app is not None:
        out["app"] = msgspec.to_builtins(app)
    return out
