"""The one vocabulary of finding ids.

Every id a built-in rule can emit, spelled here and nowhere else in the package (a test checks it).

Three kinds of id, one enum each, every member a ``str`` (so ``f.id == FindingId.INPUT_BOUND``,
JSON and ``--json`` output read the plain word):

* :class:`FindingId`: the verdict's own rules (``trainperf report``, :func:`trainperf.judge`);
* :class:`TraceFindingId`: the trace rules (``trainperf analyze``); in a verdict the same finding
  carries the ``trace:`` prefix (:func:`in_verdict`);
* :class:`AlertName`: the live alert rules; an alert that fired becomes the finding
  ``alert:<name>`` (:func:`alert_finding_id`).

A rule from outside the package names its own id (any string not in these enums; a namespaced
one such as ``"myteam:slow_io"`` reads best); the registries refuse an id a built-in owns.
"""

from __future__ import annotations

from enum import StrEnum

TRACE_PREFIX = "trace:"
ALERT_PREFIX = "alert:"


class FindingId(StrEnum):
    """The verdict's finding ids."""

    INPUT_BOUND = "input_bound"
    SLOW_METRIC = "slow_metric"
    SLOW_POSTPROCESS = "slow_postprocess"
    CALLBACK_OVERHEAD = "callback_overhead"
    MODULE_HOOK_OVERHEAD = "module_hook_overhead"
    CHECKPOINT_OVERHEAD = "checkpoint_overhead"
    UNATTRIBUTED = "unattributed"
    CACHE_MISSES = "cache_misses"
    CACHE_CORRUPT = "cache_corrupt"
    STRAGGLER = "straggler"
    COMPUTE_BOUND = "compute_bound"
    OVERHEAD_BOUND = "overhead_bound"
    SLOW_KERNELS = "slow_kernels"
    CPU_CONTENTION = "cpu_contention"
    CPU_SATURATED = "cpu_saturated"
    IO_WAIT = "io_wait"
    HOST_MEMORY_HIGH = "host_memory_high"
    MEMORY_CREEP = "memory_creep"
    PROCESS_MEMORY_GROWTH = "process_memory_growth"
    WORKER_MEMORY = "worker_memory"
    RECOMPILES = "recompiles"
    SLOW_EPOCH = "slow_epoch"
    OPTIMIZER_HOST_BOUND = "optimizer_host_bound"
    LAYOUT_CONVERSION = "layout_conversion"
    GPU_UNDERUSED = "gpu_underused"
    BASELINE_REGRESSION = "baseline_regression"
    BASELINE_INSUFFICIENT_DATA = "baseline_insufficient_data"
    NOT_RECORDED = "not_recorded"
    HOST_SYNC_LINES = "host_sync_lines"


class TraceFindingId(StrEnum):
    """The trace rules' finding ids (``trainperf analyze``, the ``findings`` of
    :func:`trainperf.analyze_trace`), its integrity checks' and the rank set's."""

    DATA_LOADING = "data_loading"
    LOW_GPU_UTILISATION = "low_gpu_utilisation"
    MEMORY_NEAR_CAPACITY = "memory_near_capacity"
    HOST_SYNC = "host_sync"
    OPTIMIZER_HOST_BOUND = "optimizer_host_bound"
    FP16_SCALER = "fp16_scaler"
    LAYOUT_CONVERSION = "layout_conversion"
    LAUNCH_OVERHEAD = "launch_overhead"
    DISPATCH_OVERHEAD = "dispatch_overhead"
    OPTIMIZER_NOT_MULTI_TENSOR = "optimizer_not_multi_tensor"
    COMMUNICATION_BOUND = "communication_bound"
    STRAGGLER = "straggler"
    MEASUREMENT_DISAGREEMENT = "measurement_disagreement"
    EVENTS_OUTSIDE_STEPS = "events_outside_steps"
    UNLINKED_DEVICE_EVENTS = "unlinked_device_events"
    CUT_STEPS = "cut_steps"
    MIXED_PROCESSES = "mixed_processes"
    INVALID_DURATIONS = "invalid_durations"
    NO_DEVICE_TIMELINE = "no_device_timeline"
    CLOCK_SKEW = "clock_skew"


class AlertName(StrEnum):
    """The live alert rules' names (``callbacks.resource_monitor.rules.<name>``)."""

    GPU_STARVATION = "gpu_starvation"
    GPU_MEMORY_NEAR_OOM = "gpu_memory_near_oom"
    HOST_MEMORY_LEAK = "host_memory_leak"
    THROUGHPUT_DROP = "throughput_drop"
    NAN_LOSS = "nan_loss"
    DISK_SPACE = "disk_space"
    THERMAL_THROTTLE = "thermal_throttle"
    STRAGGLER_RANK = "straggler_rank"
    HANG = "hang"
    MEMORY_CREEP = "memory_creep"


def in_verdict(trace_id: str) -> str:
    """A trace finding's id in a verdict: ``trace:<id>``."""
    return f"{TRACE_PREFIX}{trace_id}"


def alert_finding_id(name: str) -> str:
    """The id of the finding an alert rule's firings become: ``alert:<name>``."""
    return f"{ALERT_PREFIX}{name}"


#: Every id a built-in rule owns, as a verdict spells it (a rule from outside may not reuse one).
BUILT_IN_IDS: frozenset[str] = frozenset(
    {str(i) for i in FindingId}
    | {in_verdict(i) for i in TraceFindingId}
    | {str(i) for i in TraceFindingId}
    | {alert_finding_id(n) for n in AlertName}
)
