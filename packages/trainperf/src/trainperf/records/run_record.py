"""``perf/run.json``'s record (:class:`RunRecord`) and its parts.

How the run was launched (a Hydra app, a plain loop, a Hugging Face Trainer), its FLOPs, the model's
layers, the dataset's containers and the app's eval command."""

# The records are msgspec Structs (through the imported Record base, which ruff cannot see):
# their mutable defaults are copied per instance.
# ruff: noqa: RUF012

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from trainperf.core.findings import threshold
from trainperf.records.framework_info import FrameworkInfo, known_framework
from trainperf.records.schema import Record

__all__ = [
    "LEGACY_DROP_KEYS",
    "LEGACY_MULTIRUN_FLAGS",
    "LEGACY_OUTPUT_OVERRIDE",
    "DatasetContainer",
    "EvalCommand",
    "FlopsInfo",
    "HfTrainerSetup",
    "HydraApp",
    "ModelLayers",
    "PlainLoopSetup",
    "RunRecord",
]

#: What a launch record from before ``output_override`` / ``drop_keys`` were recorded meant: the
#: config app was Hydra (the only one there was), its trial output set by this override, and
#: these keys (a trial's output elsewhere, several jobs) left out of a trial's command.
LEGACY_OUTPUT_OVERRIDE = "hydra.run.dir={dir}"
LEGACY_DROP_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")
LEGACY_MULTIRUN_FLAGS = ("-m", "--multirun")


class PlainLoopSetup(msgspec.Struct, kw_only=True, frozen=True):
    """What a plain PyTorch loop showed ``trainperf.loop.Monitor``: its training DataLoader's
    arguments (``None``: not seen, e.g. an iterable that is not a DataLoader), its optimizer and
    the precision its forward ran in (Lightning's words: ``32-true``, ``bf16-mixed``,
    ``16-mixed``, ``bf16-true``, ``16-true``)."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    batch_size: int | None = None
    optimizer: str | None = None  # the class name, e.g. "AdamW"
    fused: bool | None = None
    foreach: bool | None = None
    precision: str | None = None


class HfTrainerSetup(msgspec.Struct, kw_only=True, frozen=True):
    """The arguments of a Hugging Face run that advice can name, by the names the Hugging Face
    adapter (``trainperf.hf``) read them under at training start (``None``: not set there)."""

    dataloader_num_workers: int | None = None
    dataloader_pin_memory: bool | None = None
    dataloader_persistent_workers: bool | None = None
    dataloader_prefetch_factor: int | None = None
    bf16: bool | None = None
    fp16: bool | None = None
    optim: str | None = None  # e.g. "adamw_torch_fused"
    torch_compile: bool | None = None
    gradient_accumulation_steps: int | None = None
    per_device_train_batch_size: int | None = None
    version: str | None = None  # the library's


class HydraApp(msgspec.Struct, kw_only=True, frozen=True):
    """``run.json``'s ``hydra`` entry: the config app a run was started as (``trainperf try``
    re-runs it with overrides). ``overrides_file`` is relative to ``output_dir``; ``None`` when
    it saves none. ``output_override`` sends a trial's output to ``{dir}``; ``drop_keys`` and
    ``multirun_flags`` are left out of a trial's command (absent in older records: the
    ``LEGACY_*`` values, what they meant)."""

    output_dir: str | None = None
    cwd: str | None = None
    config_name: str | None = None
    overrides_file: str | None = None
    overrides: list[str] = []
    output_override: str | None = None
    drop_keys: list[str] | None = None
    multirun_flags: list[str] | None = None

    @property
    def output_argument(self) -> str:
        """The override that sends a trial's output to ``{dir}``."""
        return self.output_override or LEGACY_OUTPUT_OVERRIDE

    @property
    def dropped(self) -> tuple[str, ...]:
        """Keys whose overrides (and sub-keys') a trial's command leaves out."""
        return tuple(self.drop_keys) if self.drop_keys is not None else LEGACY_DROP_KEYS

    @property
    def multirun(self) -> tuple[str, ...]:
        """The app's flags that start several jobs (left out of a trial's command)."""
        flags = self.multirun_flags
        return tuple(flags) if flags is not None else LEGACY_MULTIRUN_FLAGS


class FlopsInfo(msgspec.Struct, kw_only=True, frozen=True):
    """``run.json``'s ``"flops"`` object (``ThroughputMonitorCallback``): ``per_sample`` is
    stage -> FLOPs per sample (train: forward + backward); ``peak_flops_per_sec`` the measured
    peak per rank, ``spec_peak_flops_per_sec`` the data-sheet one (GPU only)."""

    per_sample: dict[str, float] = {}
    example_input_shapes: list[list[int]] = []
    example_batch_size: int | None = None
    forward_flops: float | None = None
    train_forward_backward_flops: float | None = None
    peak_flops_per_sec: float | None = None
    spec_peak_flops_per_sec: float | None = None
    peak: dict[str, Any] = {}  # JSON values


class ModelLayers(msgspec.Struct, kw_only=True, frozen=True):
    """``run.json``'s ``"model"``: what the trained module is made of, counted once at setup
    (``trainperf.probe.model_layers``): its parameters, those of its convolutions
    (``Conv1d/2d/3d`` and their transposes) and its convolution modules, 2-D ones apart
    (channels_last is a layout of 4-D tensors)."""

    parameters: int = 0
    conv_parameters: int = 0
    conv_modules: int = 0
    conv2d_modules: int = 0

    @property
    def conv_share_pct(self) -> float:
        """The convolutions' share of the parameters (%)."""
        return 100.0 * self.conv_parameters / self.parameters if self.parameters else 0.0

    @property
    def convolutional(self) -> bool:
        """2-D convolutions hold at least ``conv_share_pct`` % of the parameters."""
        return self.conv2d_modules > 0 and self.conv_share_pct >= threshold("conv_share_pct")


class DatasetContainer(msgspec.Struct, kw_only=True, frozen=True):
    """A Python container a training dataset holds, with the bytes of the objects in it (what
    each forked DataLoader worker that reads them gets a copy of;
    ``trainperf.analysis.memory_growth.workers``).

    Args:
        attribute: ``Class.attr`` (``Class.attr.inner`` one level down).
        kind: ``list``, ``dict``, ``tuple``, ``set``. length: its number of items.
        python_bytes: estimated bytes of the container and its objects (array buffers excluded:
            reading them copies nothing). sampled: extrapolated from some of the items.
    """

    attribute: str
    kind: str
    length: int
    python_bytes: int
    sampled: bool = False

    @property
    def mb(self) -> float:
        """``python_bytes`` in MiB."""
        return self.python_bytes / float(1 << 20)


class EvalCommand(msgspec.Struct, kw_only=True, frozen=True):
    """How ``trainperf try`` checks an eval-time change on the run's checkpoint: the app's own
    evaluation entry point and the quality figure it prints. The app records it at train time
    (``run.json``'s ``"eval"``, through ``write_run_info``'s ``extra``); ``trainperf try
    --eval-command / --eval-quality`` give or replace it.

    Args:
        launcher: the interpreter's arguments that start the evaluation in place of the
            training's (``["-m", "app.evaluate"]``, or a script's path).
        overrides: Hydra overrides added after the run's own; ``{checkpoint}`` in them is the
            checkpoint's path. The evaluation must record its test stage with the performance
            callbacks (its speed is read from ``perf/epochs.jsonl``).
        drop_keys: the run's overrides of these keys (or their sub-keys) are left out: training
            settings the evaluation's config does not have.
        quality: a regular expression whose first group, found in the evaluation's output, is
            its quality figure (higher is better, 0-1).
        quality_name: what the notes and the status word call that figure (``"<name> drop"``).
        name: what the notes call the evaluation command (default: the launcher).
    """

    launcher: list[str]
    overrides: list[str] = []
    drop_keys: list[str] = []
    quality: str
    quality_name: str = "quality"
    name: str | None = None

    @property
    def label(self) -> str:
        """:attr:`name`, or the launcher's words."""
        return self.name or " ".join(self.launcher)


class RunRecord(Record, tag="trainperf/run", kw_only=True, frozen=True):
    """``perf/run.json``: the machine, software and command of a run (several writers each add
    their part; :func:`write_run_record` merges). Every field is optional."""

    FILE: ClassVar[str] = "run.json"

    started_at: float | None = None
    hostname: str | None = None
    platform: str | None = None
    python: str | None = None
    cpu_count: int | None = None
    cpu_bf16: bool | None = None
    argv: list[str] = []
    executable: str | None = None
    orig_argv: list[str] = []
    cwd: str | None = None
    launch: HydraApp | None = msgspec.field(default=None, name="hydra")
    torch_version: str | None = None
    lightning_version: str | None = None
    numpy_version: str | None = None
    torch_threads: int | None = None
    cuda_devices: list[str] = []
    # each CUDA device's compute capability, "major.minor" (bf16 from 8.0); absent in old runs
    cuda_capability: list[str] = []
    world_size: int | None = None
    device: str | None = None
    precision: str | None = None  # the Trainer's, as it ran (e.g. "bf16-mixed")
    module_class: str | None = msgspec.field(default=None, name="lightning_module")
    hparams: dict[str, Any] = {}  # JSON values
    flops: FlopsInfo | None = None
    # the module's layers (convolutions: whether channels_last applies); None in older folders
    model: ModelLayers | None = None
    experiment_tag: str | None = None
    task_name: str | None = None
    # the training dataset's large Python containers (copy-on-read in DataLoader workers)
    dataset_containers: list[DatasetContainer] = []
    # how the app evaluates a checkpoint (trainperf try's eval-time changes); None: it said not
    eval: EvalCommand | None = None
    # the framework adapter that recorded the run ("lightning", "loop", "hf": its name alone, or
    # its FrameworkInfo) and the app above it; None in older folders (they were all Lightning's)
    framework: str | FrameworkInfo | None = None
    app: FrameworkInfo | None = None
    # what a plain loop showed trainperf.loop.Monitor (framework "loop")
    plain_loop: PlainLoopSetup | None = None
    # the arguments a Hugging Face run was started with (framework "hf")
    hf_trainer: HfTrainerSetup | None = None

    @property
    def framework_info(self) -> FrameworkInfo | None:
        """``framework`` as a :class:`FrameworkInfo` (a name alone: the framework registered
        under it, :func:`~trainperf.records.framework_info.known_framework`)."""
        fw = self.framework
        return known_framework(fw) if isinstance(fw, str) else fw
