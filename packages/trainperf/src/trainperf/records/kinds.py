"""The run directory's records: one typed record per kind, each owning its schema name and
format version, written and read only through :mod:`trainperf.records.files` (possibly later,
on another machine).

Layout (``<run>`` is ``trainer.default_root_dir``; the Hydra output folder for ``ocr-train``)::

    <run>/perf/run.json          one RunRecord (host, versions, devices, world size, command
                                 line, the LightningModule's hparams, FLOPs)
    <run>/perf/epochs.jsonl      one EpochRecord per stage epoch
    <run>/perf/intervals.jsonl   IntervalRecord: in-epoch training progress
    <run>/perf/resources.jsonl   ResourceSample lines, then a ResourceSummary per run
    <run>/perf/alerts.jsonl      AlertEvent lines (every rank's, each naming its rank)
    <run>/perf/profiler.jsonl    ProfilerWindow: one per torch.profiler window
    <run>/perf/try.jsonl         TryRecord: what ``trainperf try`` measured
    <run>/perf/growth.jsonl      GrowthRecord: the attribute scan at each training epoch's end
    <run>/perf/recompiles.jsonl  RecompilesRecord: Dynamo compiles per training epoch
    <run>/perf/lifecycle.jsonl   LifecycleRecord: each rank's fit / validate / test start and end
    <run>/profiler_traces/       torch.profiler Chrome traces

Every line (and ``run.json``) carries ``"schema"`` (the record class's tag, e.g.
``trainperf/perf-epoch``) and ``"v"`` (an integer format version). Folders written before the
toolkit left the app that grew it carry the same schemas under :data:`LEGACY_SCHEMA_PREFIX`;
every reader takes them as today's (:func:`current_schema`). Readers skip lines of other
schemas, ignore keys they do not know (writers may add keys without a version bump) and refuse a
higher ``v`` than they understand with an error naming the file and line. A final line cut short
by a crash is ignored with a warning; a malformed line elsewhere, or a field of the wrong type, is
an error naming the file and line number. Writers append one line per record and flush it, so a
report can be made from a run that is still going or that died. Non-finite floats are written as
``null`` (strict JSON); fields that may hold one are typed ``float | None``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import msgspec

from trainperf.core.findings import threshold
from trainperf.core.ranks import Straggler
from trainperf.core.stage import Stage
from trainperf.errors import InputError
from trainperf.records.framework_info import FrameworkInfo, known_framework

PERF_DIRNAME = "perf"

#: The prefix of every schema name written here (records, baselines, bench files).
SCHEMA_PREFIX = "trainperf/"
#: The prefix the same schemas had before the toolkit left the app that grew it: old run
#: folders, the baselines and bench files made then carry it, and every reader takes it as
#: :data:`SCHEMA_PREFIX` (:func:`current_schema`). The one place the old name is spelled.
LEGACY_SCHEMA_PREFIX = "receipt-ocr/"


def current_schema(name: object) -> str | None:
    """The schema ``name`` as this version writes it: a :data:`LEGACY_SCHEMA_PREFIX` name becomes
    its :data:`SCHEMA_PREFIX` one (``trainperf/run`` for the old run file's); any other string
    is returned as it is, a non-string (no schema) as ``None``."""
    if not isinstance(name, str):
        return None
    if name.startswith(LEGACY_SCHEMA_PREFIX):
        return SCHEMA_PREFIX + name[len(LEGACY_SCHEMA_PREFIX) :]
    return name


#: A JSON value as the records hold it (hparams, free-form summaries).
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]

R = TypeVar("R", bound="Record")


class RunDirError(InputError, ValueError):
    """A run-directory file is malformed or of a newer format; the message names file and line."""


class Record(msgspec.Struct, kw_only=True, frozen=True, tag_field="schema"):
    """Base of every run-directory record: the subclass's ``tag`` is its schema name (written as
    ``"schema"``), :attr:`VERSION` its format version (written as ``"v"``)."""

    #: The format version this code writes and the highest it reads.
    VERSION: ClassVar[int] = 1
    #: The file under ``<run>/perf/`` that holds records of this kind.
    FILE: ClassVar[str] = ""

    v: int = 1

    @classmethod
    def schema(cls) -> str:
        """The schema name (``"trainperf/..."``), spelled once: the class's tag."""
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str), f"{cls.__name__} has no schema tag"
        return tag

    @classmethod
    def path(cls, run_dir: str | os.PathLike[str]) -> Path:
        """``<run_dir>/perf/<FILE>``."""
        return Path(run_dir) / PERF_DIRNAME / cls.FILE


# -- record kinds ----------------------------------------------------------------------------


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
    ``trainperf.analysis.worker_memory``).

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


class LoaderSettings(msgspec.Struct, kw_only=True, frozen=True):
    """How the stage's DataLoader was built: its attributes of these names, read from the live
    loader (advice never proposes what is already set, config or not); ``prefetch_factor`` is
    ``None`` without workers."""

    persistent_workers: bool | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None

    @classmethod
    def of(cls, loader: Any) -> LoaderSettings:
        """The settings of a live ``torch.utils.data.DataLoader``."""
        return cls(
            persistent_workers=bool(loader.persistent_workers),
            pin_memory=bool(loader.pin_memory),
            prefetch_factor=loader.prefetch_factor,
        )


class EpochRecord(Record, tag="trainperf/perf-epoch", kw_only=True, frozen=True):
    """One ``perf/epochs.jsonl`` line: what one stage epoch measured on this rank, plus the
    cross-rank spreads under DDP. The recorder hands it to its subscribers, then writes it with
    ``t`` and the global rates set. Non-finite figures are NaN in memory, ``None`` once read.

    Args:
        epoch: ``trainer.current_epoch`` when the window opened.
        wall_s: the window's wall time in seconds (train: validation excluded).
        phases_s: seconds per phase, every name of ``PHASES``; they sum to ``wall_s``.
        gpu_phases_s: GPU stream seconds between phase switches, per phase (CUDA only).
        worker_s: DataLoader work timed where it ran, summed over the epoch, in seconds:
            ``fetch`` (dataset ``__getitem__``), ``collate`` and the finer parts user code
            reported (ours: ``decode``, ``transform``, ``targets``). Empty when the loader could
            not be instrumented.
        batch_stats: ``StreamingStats.summary()`` of the batch times (seconds between
            consecutive batch ends; the first from the window's start).
        memory: ``trainperf.probe.device_memory.memory_snapshot()`` at the close (empty when
        tracking is off).
        peak_rss_gb, peak_gpu_memory_gb: largest process RSS sampled, CUDA peak allocated memory
            during the window (GiB); nan when off / without CUDA.
        spreads: DDP only: figure name (``epoch_time``, ``{phase}_time``, ``worker_fetch_time``,
            ``batch_mean``, ``samples_per_sec``, ...) -> ``rank_spread`` of its per-rank values.
        global_samples, global_batches: over all ranks; global_wall_s: the slowest rank's.
        worker_counts: event counters reported in the DataLoader with
            ``trainperf.probe.worker.report_count``, summed over the epoch (this rank). A cache
            named X counts ``X_hits`` / ``X_misses`` (its hit rate), optionally ``X_corrupt`` /
            ``X_evictions`` (``trainperf.records.run_info.hit_rates``).
        batch_times_s: the batch times in order (seconds), every ``batch_times_stride``-th one
            when the epoch had more than 4096.
        loader: the stage's DataLoader's settings besides ``num_workers`` (None when not a
            DataLoader).
        batch_size: samples in the epoch's first batch (0 when there was none).
        device: ``"cuda"`` when CUDA phases were measured, else ``"cpu"``.
        callbacks_s: seconds per callback (class name; a second instance of a class gets
            ``#2``), its own hooks' time in any phase (a checkpoint save inside its hook is
            ``checkpoint``, not the callback's).
        callback_hooks_s: the same split by hook: ``ClassName.hook`` -> seconds.
        module_hooks_s: the LightningModule's and DataModule's own hooks: ``Class.hook`` ->
            seconds (whatever phase they ran in: a hook that wraps its metric work in
            ``perf_phase("metric")`` is named here and counted in ``metric``).
        straggler: under DDP, the rank the others waited for and its cause
            (``trainperf.core.ranks.find_straggler``); None on one process or when no rank
            straggles.
        sync_wait_measured: how ``sync_wait`` was measured: ``"ddp_comm_hook"`` (the gradient
            all-reduce wait, plus our epoch gather), ``"gather"`` (our epoch gather only: the
            model is not a ``DistributedDataParallel`` we could hook), or ``"none"`` (one process).
        callbacks_s_by_rank: under DDP, each rank's ``callbacks_s``, indexed by rank (ranks may
            have different callbacks: one built on one rank only is named there); empty on one
            process.
        t: unix time it was written; samples_per_sec, batches_per_sec: ``global_samples`` and
            ``global_batches`` over ``global_wall_s`` (None until written).
        data_wait_causes_s: the loop's wait inside the DataLoader's ``next()`` by cause, in
            seconds (this rank): ``worker`` (until a worker had finished the batch), ``receive``
            (after that: the worker's send, the main process's receive and ``pin_memory``),
            ``main_loading`` (``num_workers=0``: loading in the main process). Empty when the
            loader could not be instrumented (and in folders written before it existed).
        batch_bytes: mean bytes of the tensors of one batch (``nbytes``, counted where the batch
            was built); None when unknown.
        batch_tensors: tensors in one batch (the last one's); None when unknown.
    """

    FILE: ClassVar[str] = "epochs.jsonl"

    stage: Stage
    epoch: int | None = None
    wall_s: Annotated[float, msgspec.Meta(ge=0)]
    phases_s: dict[str, float] = {}
    gpu_phases_s: dict[str, float | None] = {}
    worker_s: dict[str, float] = {}
    batch_stats: dict[str, float | None] = {}
    num_batches: int = 0
    samples: int = 0
    memory: dict[str, float | None] = {}
    peak_rss_gb: float | None = None
    peak_gpu_memory_gb: float | None = None
    world_size: int = 1
    spreads: dict[str, dict[str, float | None]] = {}
    global_samples: int = 0
    global_batches: int = 0
    global_wall_s: float | None = 0.0
    worker_counts: dict[str, int] = {}
    batch_times_s: list[float | None] = []
    batch_times_stride: int = 1
    num_workers: int | None = None
    loader: LoaderSettings | None = None
    batch_size: int | None = 0
    device: str = "cpu"
    global_step: int = 0
    callbacks_s: dict[str, float] = {}
    callback_hooks_s: dict[str, float] = {}
    module_hooks_s: dict[str, float] = {}
    callbacks_s_by_rank: tuple[dict[str, float], ...] = ()
    straggler: Straggler | None = None
    sync_wait_measured: str = "none"
    t: float | None = None
    samples_per_sec: float | None = None
    batches_per_sec: float | None = None
    # -- the data wait by cause (issue 32): optional, absent in older folders
    data_wait_causes_s: dict[str, float] = {}
    batch_bytes: float | None = None
    batch_tensors: int | None = None

    @property
    def all_samples(self) -> int:
        """Samples over all ranks (``samples`` for records without ``global_samples``)."""
        return self.global_samples or self.samples

    @property
    def all_wall_s(self) -> float:
        """The slowest rank's wall time (``wall_s`` for records without ``global_wall_s``)."""
        return self.global_wall_s or self.wall_s


class IntervalRecord(Record, tag="trainperf/perf-interval", kw_only=True, frozen=True):
    """One ``perf/intervals.jsonl`` line: progress of an open training epoch (this rank) so
    far; ``elapsed_s`` excludes pauses, ``phases_s`` are the clock's seconds per phase so far and
    ``samples_per_sec`` is ``samples`` over ``elapsed_s``."""

    FILE: ClassVar[str] = "intervals.jsonl"

    t: float | None = None
    stage: Stage = Stage.TRAIN
    epoch: int = 0
    num_batches: int = 0
    samples: int = 0
    elapsed_s: float = 0.0
    world_size: int = 1
    step: int = 0
    phases_s: dict[str, float] = {}
    samples_per_sec: float | None = None


class LifecycleRecord(Record, tag="trainperf/lifecycle", kw_only=True, frozen=True):
    """One ``perf/lifecycle.jsonl`` line: a Trainer run (``run``: ``fit``, ``validate``,
    ``test``) starting or ending on one rank at unix time ``t``; ``trainperf watch`` follows a run
    until every rank's last start has its end. ``pid`` and ``hostname`` let a watcher on the same
    host see a run that died unannounced; ``status`` is an end's (``failed``: an exception;
    ``interrupted``: a signal, named in ``signal`` (``SIGTERM``, ``SIGINT``), at training batch
    ``batch`` (processed so far) of ``epoch``)."""

    FILE: ClassVar[str] = "lifecycle.jsonl"

    t: float
    event: Literal["start", "end"]
    run: str = "fit"
    rank: int = 0
    world_size: int = 1
    pid: int = 0
    hostname: str = ""
    status: Literal["finished", "failed", "interrupted"] | None = None
    signal: str | None = None
    epoch: int | None = None
    batch: int | None = None


class ResourceSample(Record, tag="trainperf/resource-sample", kw_only=True, frozen=True):
    """One ``perf/resources.jsonl`` sample (or interval mean): ``resources/...`` metrics (finite
    values only), with the phase, epoch, step and rank it was taken in; ``workers_uss``: each
    DataLoader worker's USS in bytes by pid (samples only, where USS is read)."""

    FILE: ClassVar[str] = "resources.jsonl"

    t: float
    phase: str | None = None
    epoch: int = 0
    step: int = 0
    rank: int = 0
    metrics: dict[str, float] = {}
    workers_uss: dict[str, float] = {}


class ResourceSummary(Record, tag="trainperf/resource-summary", kw_only=True, frozen=True):
    """The resource monitor's summary at a run's end: ``status`` (sampler part -> why it is
    unavailable), ``metrics`` (``<name>_mean`` / ``<name>_max`` of each sampled metric and the
    totals), ``run`` (what was sampled: ``fit``, ``validate``, ``test``; ``None`` reads as fit)."""

    FILE: ClassVar[str] = "resources.jsonl"

    t: float | None = None
    rank: int = 0
    status: dict[str, str] = {}
    metrics: dict[str, float] = {}
    run: str | None = None

    @property
    def run_kind(self) -> str:
        return self.run or "fit"


class AlertEvent(Record, tag="trainperf/alert", kw_only=True, frozen=True):
    """One alert event; ``rank`` is the global rank of the process that saw it."""

    FILE: ClassVar[str] = "alerts.jsonl"

    t: float = 0.0
    rule: str = "unknown"
    event: str
    severity: str = "warning"
    message: str = ""
    evidence: Mapping[str, float | str | None] = {}  # NaN is written as null
    threshold: dict[str, float] = {}
    suggestion: str = ""
    step: int = 0
    epoch: int = 0
    rank: int = 0

    def __post_init__(self) -> None:
        if self.event not in ("fired", "resolved"):
            raise ValueError(f"event must be fired or resolved, got {self.event!r}")
        if self.severity not in ("warning", "critical"):
            raise ValueError(f"severity must be warning or critical, got {self.severity!r}")


class ProfilerWindow(Record, tag="trainperf/profiler-window", kw_only=True, frozen=True):
    """One torch.profiler window (a ``perf/profiler.jsonl`` line).

    Args:
        trigger: ``epochs``, ``file``, ``alert`` or ``request``; reason: why (the alert's words).
        traces: trace files, relative to the run directory.
        batches: ``[first, last]`` batch index it covered (whose time the profiler inflated).
        overhead_s: the profiler's own cost: ``export`` and ``analysis`` seconds.
        callback: the display name of the callback whose hooks ran the window (they hold that
            cost on the phase clock); None in records written before it was recorded.
        summary: the analysis's summary (``top_cpu_ops``, ``findings``, ``dataloader_time_pct``,
            ``step_time_ms``, ``phases_ms_per_step``), as ``analyze_trace``'s documented keys.
        clock_agreement: the live clock's figures beside the trace's (``trainperf.analysis.trace``).
    """

    FILE: ClassVar[str] = "profiler.jsonl"

    t: float | None = None
    stage: Stage
    epoch: int | None = None
    trigger: str | None = None
    reason: str | None = None
    steps: int = 0
    traces: list[str] = []
    batches: tuple[int, int] | None = None
    overhead_s: dict[str, float] = {}
    callback: str | None = None
    # analyze_trace's documented keys and the agreement's dict view (trainperf.analysis.trace)
    summary: dict[str, Any] = {}
    clock_agreement: dict[str, Any] | None = None

    def batch_indices(self) -> range:
        """The batch indices the window covered (empty for records without ``batches``)."""
        return range(self.batches[0], self.batches[1] + 1) if self.batches else range(0)


class TryRecord(Record, tag="trainperf/try", kw_only=True, frozen=True):
    """One change ``trainperf try`` measured (or left untried): a ``perf/try.jsonl`` line.

    Args:
        session: when the ``try`` session started (ISO 8601, UTC): groups a session's lines.
        kind: ``candidate``, or ``combined`` (the recommended ones together).
        override: the change(s) as ``try`` applies them, space-separated: Hydra overrides and
            runtime knobs (``knob:NAME=VALUE``); ``None`` for a plain-language change.
        family: the candidate's family (``combined`` for the winners together).
        eval_time: checked on the checkpoint with the app's evaluation command
            (:class:`EvalCommand`: evaluation speed and its quality figure).
        status: ``recommended``, ``no significant change``, ``regression``, ``inconclusive``,
            ``<quality_name> drop`` (faster or not, it lowers the quality figure beyond the
            tolerance),
            ``not applicable``, ``failed`` or ``untried`` (the budget ran out).
        ratios: ``speed(changed) / speed(unchanged)`` per pair.
        median, low, high: the speed-up (the geometric mean of ``ratios``) and the t interval
            its decision used, 95 % over the looks that could decide it (None without pairs;
            :mod:`trainperf.analysis.tryouts`).
        quality_base, quality_changed: eval-time only: the quality figure on the checkpoint;
            quality_name: its name (e.g. ``H-mean``).
        note: why (not applicable, failed, untried, the quality drop), or "".
        apply: how to make the knobs of the change in one's own code
            (``DataLoader(..., num_workers=4)``; lines joined by ``; ``), or "".
    """

    FILE: ClassVar[str] = "try.jsonl"

    session: str
    kind: str
    override: str | None
    description: str
    family: str
    alters_computation: bool
    eval_time: bool
    status: str
    pairs: int = 0
    ratios: tuple[float, ...] = ()
    median: float | None = None
    low: float | None = None
    high: float | None = None
    base_samples_per_sec: float | None = None
    changed_samples_per_sec: float | None = None
    quality_base: float | None = None
    quality_changed: float | None = None
    quality_name: str | None = None
    note: str = ""
    apply: str = ""

    @property
    def recommended(self) -> bool:
        return self.status == "recommended"


class KnobRecord(Record, tag="trainperf/knob", kw_only=True, frozen=True):
    """What became of one runtime knob (``name=value``) in a ``trainperf try`` trial
    (:mod:`trainperf.core.knobs`): ``status`` ``applied`` or ``not applicable`` (the run cannot take
    it), ``note`` what was changed (``num_workers 0 -> 4``) or why it cannot be."""

    FILE: ClassVar[str] = "knobs.jsonl"

    knob: str
    status: str
    note: str = ""


class GrowthNode(msgspec.Struct, kw_only=True):
    """What one attribute path holds at an epoch's end (``trainperf.probe.growth``; the scan fills
    it in as it walks, so it is not frozen).

    Args:
        path: ``Owner.attr`` then ``[key]`` / ``[i]`` / ``.attr`` steps (``UserModule.losses``).
        kind: the container's type name (``list``, ``dict``, ``Tensor``, an object's class).
        bytes: the tensors' storages' bytes, each storage once per scan (``tensors`` and
            ``bytes`` extrapolated where ``sampled``). graph: one holds an autograd graph.
    """

    path: str
    kind: str
    length: int
    tensors: int = 0
    bytes: int = 0
    graph: bool = False
    devices: list[str] = []
    sampled: bool = False


class GrowthRecord(Record, tag="trainperf/growth", kw_only=True, frozen=True):
    """One ``perf/growth.jsonl`` line: the attribute scan at one training epoch's end
    (``EpochScanCallback``, ``trainperf.probe.growth.scan``).

    ``nodes`` are the paths holding tensors (most first); ``truncated``: the scan's item
    budget stopped it.
    """

    FILE: ClassVar[str] = "growth.jsonl"

    epoch: int
    nodes: list[GrowthNode] = []
    items: int = 0
    scan_ms: float = 0.0
    truncated: bool = False


class RecompileReason(msgspec.Struct, kw_only=True, frozen=True):
    """One kind of Dynamo recompile reason in an epoch (``trainperf.probe.recompiles``).

    Args:
        reason: the failed guard without its varying numbers
            (``tensor 'args[0]' size mismatch at index 2``).
        dimension: ``dimension 2 of args[0]`` for a size / stride guard; sizes: those seen on it.
    """

    reason: str
    count: int
    dimension: str | None = None
    sizes: list[int] = []
    example: str = ""


def merge_reasons(reasons: Iterable[RecompileReason]) -> list[RecompileReason]:
    """``reasons`` merged by ``reason``, most frequent first (sizes: the first 32 distinct,
    sorted; the first example)."""
    merged: dict[str, tuple[int, str | None, set[int], str]] = {}
    for r in reasons:
        n, dim, seen, first = merged.get(r.reason, (0, r.dimension, set(), r.example))
        merged[r.reason] = (n + r.count, dim, seen | set(r.sizes), first)
    out = [
        RecompileReason(reason=r, count=n, dimension=d, sizes=sorted(z)[:32], example=e)
        for r, (n, d, z, e) in merged.items()
    ]
    return sorted(out, key=lambda r: (-r.count, r.reason))


class RecompilesRecord(Record, tag="trainperf/recompiles", kw_only=True, frozen=True):
    """One ``perf/recompiles.jsonl`` line: what Dynamo compiled in one training epoch
    (``EpochScanCallback``, ``trainperf.probe.recompiles.CompileWatch``).

    Args:
        available: whether compiles could be counted (``note``: why not, or the untested torch
            version).
        compiles: frames compiled; recompiles: of them, recompiles. reasons: most frequent first.
        functions: compiles per compiled function (``co_name (file)``).
        limit_hit: the recompile limit was hit (the function then runs eagerly). failed: compiles
            that failed otherwise. lost: compiles beyond torch's bounded metrics list.
        batch_shapes: distinct batch shapes in the epoch (``None``: not counted);
            shape_examples: up to 8 of them.
    """

    FILE: ClassVar[str] = "recompiles.jsonl"

    epoch: int
    available: bool = True
    compiles: int = 0
    recompiles: int = 0
    reasons: list[RecompileReason] = []
    functions: dict[str, int] = {}
    compile_s: float = 0.0
    limit_hit: bool = False
    limit: int | None = None
    failed: int = 0
    lost: int = 0
    batch_shapes: int | None = None
    shape_examples: list[str] = []
    note: str = ""
