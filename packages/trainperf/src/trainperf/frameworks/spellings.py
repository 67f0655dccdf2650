"""How each framework writes the changes advice proposes, as data an adapter records.

An adapter records its framework in ``perf/run.json`` (:class:`~trainperf.records.framework_info.
FrameworkInfo`): these tables give the spelling of each change in that framework's own words
(``{value}`` is the new value, written as the framework's ``literals`` say), and the changes
``trainperf try`` cannot apply there, with why. The adapter adds the values its run showed
(:func:`framework_info`). Advice (:mod:`trainperf.analysis.advice`) reads only the record.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainperf.records.framework_info import FrameworkInfo, Setting
from trainperf.records.schema import JsonValue

__all__ = ["HF", "LIGHTNING", "LOOP", "framework_info"]


def _loader(prefix: str = "DataLoader(") -> list[Setting]:
    return [
        Setting(family="workers", change=prefix + "num_workers={value})"),
        Setting(family="prefetch", change=prefix + "prefetch_factor={value})"),
        Setting(family="persistent_workers", change=prefix + "persistent_workers={value})"),
        Setting(family="pin_memory", change=prefix + "pin_memory={value})"),
        Setting(family="batch_size", change=prefix + "batch_size={value})"),
    ]


_TORCH = [
    Setting(family="threads", change="torch.set_num_threads({value}) at start-up"),
    Setting(
        family="channels_last",
        change="model = model.to(memory_format=torch.channels_last), and each input batch alike",
    ),
]

#: A LightningModule trained by a Lightning ``Trainer``.
LIGHTNING = FrameworkInfo(
    name="lightning",
    settings=[
        *_loader(),
        *_TORCH,
        Setting(family="precision", change="Trainer(precision={value})"),
        Setting(family="cudnn_benchmark", change="Trainer(benchmark={value})"),
        Setting(
            family="fused_optimizer",
            change="torch.optim.AdamW(..., fused={value}) in configure_optimizers (Adam, SGD "
            "alike)",
        ),
        Setting(family="compile", change="model = torch.compile(model) before trainer.fit"),
    ],
    hints={
        "record": "attach the performance callbacks (trainperf.lightning's "
        "PerformanceProfilerCallback) to the Trainer",
        "profile": "attach trainperf.lightning.ProfilerCallback",
        "resume": "trainer.fit(..., ckpt_path={checkpoint})",
    },
)

#: A plain PyTorch loop driven through ``trainperf.loop.Monitor``.
LOOP = FrameworkInfo(
    name="loop",
    settings=[
        *_loader(),
        *_TORCH,
        Setting(
            family="precision",
            change="torch.autocast(device_type, dtype={value}) around forward and loss",
            values={
                "bf16-mixed": "torch.autocast(device_type, dtype=torch.bfloat16) around forward "
                "and loss",
                "16-mixed": "torch.autocast(device_type, dtype=torch.float16) around forward and "
                "loss, with a torch.amp.GradScaler",
            },
        ),
        Setting(family="cudnn_benchmark", change="torch.backends.cudnn.benchmark = {value}"),
        Setting(family="fused_optimizer", change="torch.optim.AdamW(..., fused={value})"),
        Setting(family="compile", change="model = torch.compile(model) before the loop"),
    ],
    cannot_try={
        "precision": "a plain loop's autocast is in its own code: trainperf cannot switch it "
        "from outside; change it in the script",
        "channels_last": "on a plain loop the Monitor does not build the model: convert it to "
        "channels_last in the script",
        "compile": "on a plain loop the Monitor does not build the model: compile it in the script",
    },
    hints={
        "record": "wrap the loop in trainperf.loop.Monitor(run_dir, model=..., optimizer=...)",
    },
)

#: A Hugging Face ``transformers.Trainer`` with ``trainperf.hf.PerfCallback``.
HF = FrameworkInfo(
    name="hf",
    settings=[
        *_loader("TrainingArguments(dataloader_")[:4],
        Setting(
            family="batch_size", change="TrainingArguments(per_device_train_batch_size={value})"
        ),
        *_TORCH,
        Setting(
            family="precision",
            change="TrainingArguments(bf16=True)",
            values={
                "bf16-mixed": "TrainingArguments(bf16=True)",
                "16-mixed": "TrainingArguments(fp16=True)",
            },
        ),
        Setting(
            family="fused_optimizer",
            change='TrainingArguments(optim="adamw_torch_fused")',
        ),
        Setting(
            family="compile",
            change="TrainingArguments(torch_compile=True, torch_compile_backend={value})",
            values={"True": "TrainingArguments(torch_compile=True)"},
        ),
        Setting(family="cudnn_benchmark", change="torch.backends.cudnn.benchmark = {value}"),
    ],
    cannot_try={
        "precision": "TrainingArguments are fixed before the callback runs: change them in the "
        "script",
        "fused_optimizer": "the Trainer builds its optimizer from TrainingArguments.optim: change "
        "it in the script",
        "compile": "TrainingArguments.torch_compile is read before the callback runs: change it "
        "in the script",
    },
    hints={
        "record": "pass callbacks=[trainperf.hf.PerfCallback()] to the Trainer",
    },
)


def framework_info(
    base: FrameworkInfo,
    *,
    version: str | None = None,
    values: Mapping[str, JsonValue] | None = None,
) -> FrameworkInfo:
    """``base`` with its ``version`` and the values the run showed (family -> value)."""
    import msgspec

    shown = dict(values or {})
    settings = [
        msgspec.structs.replace(s, value=shown[s.family]) if s.family in shown else s
        for s in base.settings
    ]
    return msgspec.structs.replace(base, version=version, settings=settings)
