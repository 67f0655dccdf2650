"""Candidate changes for a cause, for one run, in its own framework's words.

Config overrides are given only for keys the run's config has.

A finding's cause (input-bound, compute-bound, slow postprocessing, ...) maps to families of
changes (:class:`~trainperf.core.candidates.Candidate`). Each family is one setting that many apps
name differently, so the setting is looked up by its *leaf name* in the configuration the run's
app recorded (``run.json``'s ``app``; :func:`find_key`): ``num_workers`` is ``data.num_workers``
in our app, ``dataloader.num_workers`` or ``loader.workers`` in another
(:mod:`trainperf.analysis.config_keys`). No match (or no app
config at all, e.g. a model trained from a plain script) gives a change with ``override=None``,
never a key the run does not have, written as the run's framework writes it when the run
recorded that (``run.json``'s ``framework``: ``DataLoader(num_workers=4)``,
``TrainingArguments(dataloader_num_workers=4)``; :mod:`~trainperf.analysis.spelled`), else in
plain words.

Values come from the run's evidence: workers from the worker seconds per batch against the main
loop's (capped at the host's cores), compute threads from the host's cores, precision from
the device (``bf16-mixed`` on a GPU with bf16, else ``16-mixed``; ``bf16-mixed`` on CPU only when
``perf/run.json`` records that the CPU supports bf16).

One change adds a key rather than setting one: a fused optimizer step. ``fused`` is an argument
of ``torch.optim.Adam`` / ``AdamW`` / ``SGD`` that configs rarely spell out, so on a config
whose optimizer node has ``_target_: torch.optim.AdamW`` (and no ``fused``) the override is
``+model.optimizer.fused=true``: ``+`` adds a key to a node the config has.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trainperf.analysis.config_keys import (
    FUSED_OPTIMIZERS,
    RUNNER_SECTIONS,
    ConfigKey,
    find_cache_key,
    find_key,
    optimizer_node,
)
from trainperf.analysis.spelled import in_framework_words
from trainperf.core.candidates import Candidate
from trainperf.core.finding_ids import FindingId, TraceFindingId
from trainperf.core.findings import threshold
from trainperf.core.knobs import family_knob
from trainperf.records.framework_info import FrameworkInfo

__all__ = ["RunFacts", "candidates_for", "workers_wait"]


@dataclass(frozen=True)
class RunFacts:
    """What the generator needs to know about one run (and one stage of it).

    Args:
        config: the configuration the run's app recorded (its own sections only), ``None``
            when no app configured the run.
        framework, app: what the run recorded of its framework and app (the spellings of
            changes, their values in the run), ``None`` unknown (an older folder).
        suggested_workers: workers that would keep input up with the main loop (from worker
            seconds per batch / main-loop seconds per batch), if measurable.
        compute_headroom: ``True`` when the compute phases run well below the measured peak,
            ``False`` near it, ``None`` unknown (no FLOPs recorded).
        cpu_bf16: the CPU runs bf16 natively, ``None`` unknown.
        workers_busy: a DataLoader worker's median CPU share, as a fraction of one core (from
            the resource samples), ``None`` unknown; below ``workers_waiting_pct`` they wait
            (I/O, sleep), so more workers than cores can still help.
        persistent_workers, pin_memory, prefetch_factor: the live DataLoader's settings
            (recorded per epoch), ``None`` unknown: never proposed when already set.
        precision: the Trainer's precision as the run used it (``run.json``), ``None`` unknown.
        cuda_bf16: the run's GPU computes bf16 natively (recorded or inferred from its name),
            ``None`` unknown.
        convolutional: the model's convolutions hold a meaningful share (its recorded layers,
            or a trace's op time), ``None`` unknown: channels_last is proposed only where this
            is not ``False``.
    """

    config: dict[str, Any] | None
    device: str = "cpu"
    cpu_count: int | None = None
    stage: str | None = None
    num_workers: int | None = None
    suggested_workers: int | None = None
    batch_size: int | None = None
    compute_headroom: bool | None = None
    cpu_bf16: bool | None = None
    torch_threads: int | None = None
    workers_busy: float | None = None
    persistent_workers: bool | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    precision: str | None = None
    cuda_bf16: bool | None = None
    convolutional: bool | None = None
    framework: FrameworkInfo | None = None
    app: FrameworkInfo | None = None


def workers_wait(busy: float | None) -> bool:
    """Whether DataLoader workers with a median CPU share ``busy`` (fraction of one core) mostly
    wait (measured): then their count is not bounded by the cores."""
    return busy is not None and busy * 100.0 < threshold("workers_waiting_pct")


def _override_value(value: Any) -> str:
    """``value`` in a config override's syntax (``true``, ``null``, ``bf16-mixed``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _framework_words(f: RunFacts, family: str, value: Any, what: str | None = None) -> str | None:
    """The change in the run's app's or framework's words (:func:`~trainperf.analysis.spelled.
    in_framework_words`; its current value as recorded, else as the run showed it), or ``None``
    when neither recorded a spelling for ``family``."""
    shown = {
        "workers": f.num_workers,
        "prefetch": f.prefetch_factor,
        "persistent_workers": f.persistent_workers,
        "pin_memory": f.pin_memory,
        "threads": f.torch_threads,
        "precision": f.precision,
        "batch_size": f.batch_size,
    }.get(family)
    return in_framework_words((f.app, f.framework), family, value, what, now=shown)


def _now(key: ConfigKey) -> str:
    value = key.value
    if isinstance(value, str) and value.startswith("${"):
        # The recorded config keeps interpolations; the value was decided at run time.
        return f" (now decided at run time by `{value}`)"
    return f" (now {_override_value(value)})"


def _candidate(
    family: str,
    key: ConfigKey | None,
    value: Any,
    described: str,
    plain: str,
    *,
    alters: bool = False,
    eval_time: bool = False,
    facts: RunFacts | None = None,
    what: str | None = None,
) -> Candidate:
    """``described`` names the setting by its key (when found); without one, the change in the
    run's framework's words (``facts``' recorded spellings, ``what`` it does before them) or,
    when it recorded none, ``plain``; and the runtime knob that makes the change, if any
    (``trainperf try`` applies it)."""
    if key is None:
        words = _framework_words(facts, family, value, what) if facts is not None else None
        text = words or plain
        return Candidate(family, text, None, alters, eval_time, family_knob(family, value))
    text = described.format(key=f"`{key.path}`", now=_now(key))
    if key.note:
        text += f" ({key.note})"
    return Candidate(family, text, f"{key.path}={_override_value(value)}", alters, eval_time)


def _switch_on(
    family: str,
    key: ConfigKey | None,
    described: str,
    plain: str,
    live: bool | None = None,
    *,
    facts: RunFacts | None = None,
) -> Candidate | None:
    """A setting to turn on (see :func:`_candidate`); ``None`` when the config or the live
    object (``live``) has it on."""
    if live is True or (key is not None and key.value is True):
        return None
    return _candidate(family, key, True, described, plain, facts=facts)


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- families ------------------------------------------------------------------------------------


def _worker_plan(f: RunFacts) -> tuple[ConfigKey | None, int | None, int | None]:
    """(the workers key, workers now, workers to try or ``None`` when more would not help)."""
    key = find_key(f.config, ("num_workers",), stage=f.stage, aliases=("workers",))
    # the workers the stage ran with (recorded per epoch) over the config's value
    now = f.num_workers
    if now is None and key is not None:
        now = _as_int(key.value)
    cores = f.cpu_count
    if not now:
        want = max(2, min(f.suggested_workers or 2, cores or 4))
    elif f.suggested_workers is not None and f.suggested_workers > now:
        want = f.suggested_workers
    else:
        return key, now, None
    if cores:
        # more processes than cores only queue for them, unless they wait (I/O, sleep)
        want = min(want, 2 * cores if workers_wait(f.workers_busy) else cores)
    return key, now, (want if now is None or want > now else None)


def _workers(f: RunFacts) -> Candidate | None:
    key, now, want = _worker_plan(f)
    if want is None:
        return None
    was = f", now {now}" if now is not None else ""
    return _candidate(
        "workers",
        key,
        want,
        f"set {{key}}{{now}} to {want} DataLoader workers",
        f"run {want} DataLoader worker processes (the DataLoader's num_workers{was})",
        facts=f,
    )


def _workers_after(f: RunFacts, planned: bool) -> int:
    """Workers the run uses now, or (``planned``) after the workers candidate of the same
    finding: persistent workers and prefetching need worker processes."""
    _, now, want = _worker_plan(f)
    return want if planned and want is not None else (now or 0)


def _with_workers(c: Candidate | None, f: RunFacts) -> Candidate | None:
    """``c`` (a change that needs worker processes, planned by the workers candidate) without
    its runtime knob when the run has no workers yet: alone, the knob would not apply."""
    if c is None or c.knob is None or _workers_after(f, planned=False):
        return c
    return replace(c, description=c.description + ", once it has workers", knob=None)


def _prefetch(f: RunFacts) -> Candidate | None:
    if not _workers_after(f, planned=True):
        return None  # prefetch_factor needs worker processes
    key = find_key(f.config, ("prefetch_factor",), stage=f.stage)
    now = _as_int(key.value) if key is not None else f.prefetch_factor
    want = 2 * (now or 2)  # torch's default is 2 batches per worker
    found = _candidate(
        "prefetch",
        key,
        want,
        f"keep {want} batches per worker in flight: {{key}}{{now}} -> {want}",
        f"keep {want} batches per worker in flight (the DataLoader's prefetch_factor"
        + (f", now {now})" if now else ")"),
        facts=f,
    )
    return _with_workers(found, f)


def _persistent(f: RunFacts, planned: bool) -> Candidate | None:
    if not _workers_after(f, planned):
        return None
    found = _switch_on(
        "persistent_workers",
        find_key(f.config, ("persistent_workers",), stage=f.stage),
        "keep workers alive between epochs: {key}{now} -> true",
        "keep workers alive between epochs (the DataLoader's persistent_workers=True)",
        f.persistent_workers,
        facts=f,
    )
    return _with_workers(found, f)


def _pin_memory(f: RunFacts) -> Candidate | None:
    if f.device != "cuda":
        return None  # pinned memory only speeds host-to-GPU copies
    return _switch_on(
        "pin_memory",
        find_key(f.config, ("pin_memory",), stage=f.stage),
        "copy batches from pinned memory: {key}{now} -> true",
        "copy batches from pinned memory (the DataLoader's pin_memory=True)",
        f.pin_memory,
        facts=f,
    )


def _target_cache(f: RunFacts) -> Candidate | None:
    return _switch_on(
        "cache",
        find_cache_key(f.config, "enabled"),
        "compute the per-sample targets once and read them back: {key}{now} -> true",
        "compute the per-sample targets once and read them back (a cache keyed by the "
        "un-augmented sample) instead of every epoch",
        facts=f,
    )


def _threads(f: RunFacts) -> Candidate | None:
    """Compute-bound on CPU: the DataLoader workers mostly wait, so compute may use every core;
    nothing to try when it already does."""
    if f.device != "cpu" or not f.cpu_count or f.torch_threads == f.cpu_count:
        return None
    want = f.cpu_count
    key = find_key(f.config, ("num_threads", "torch_threads", "intra_op_threads"), prefer=())
    was = f", now {f.torch_threads}" if f.torch_threads else ""
    return _candidate(
        "threads",
        key,
        want,
        f"compute threads on every core: {{key}}{{now}} -> {want}",
        f"compute threads on every core: torch.set_num_threads({want}) at start-up "
        f"({f.cpu_count} cores{was})",
        facts=f,
    )


def _channels_last(f: RunFacts) -> Candidate | None:
    if f.convolutional is False:
        return None  # a layout for convolutions: nothing to gain without them
    return _switch_on(
        "channels_last",
        find_key(f.config, ("channels_last",), prefer=()),
        "convolutions in channels-last layout: {key}{now} -> true",
        "convolutions in channels-last layout: model.to(memory_format=torch.channels_last) and "
        "the same for each input batch",
        facts=f,
    )


def _compile(f: RunFacts) -> Candidate | None:
    return _switch_on(
        "compile",
        find_key(f.config, ("compile", "torch_compile"), prefer=()),
        "compile the model: {key}{now} -> true",
        "compile the model: torch.compile(model) before fitting (the first steps are slower)",
        facts=f,
    )


def _batch_size(f: RunFacts) -> Candidate | None:
    key = find_key(f.config, ("batch_size",), stage=f.stage)
    now = _as_int(key.value) if key is not None else None
    now = now or f.batch_size
    if not now:
        return None
    want = 2 * now
    return _candidate(
        "batch_size",
        key,
        want,
        f"a larger batch if memory allows: {{key}}{{now}} -> {want} (changes the optimisation: "
        "scale the learning rate)",
        f"a larger batch if memory allows ({now} -> {want}; changes the optimisation: scale the "
        "learning rate)",
        alters=True,
        facts=f,
    )


def _precision(f: RunFacts) -> Candidate | None:
    if f.device == "cuda":
        want = "bf16-mixed" if f.cuda_bf16 else "16-mixed"
    elif f.cpu_bf16:
        want = "bf16-mixed"
    else:
        return None  # CPUs without native bf16 run it slower than float32
    key = find_key(f.config, ("precision",), prefer=RUNNER_SECTIONS)
    if f.precision == want or (key is not None and str(key.value) == want):
        return None  # the run already computed in it (the Trainer's own precision, recorded)
    return _candidate(
        "precision",
        key,
        want,
        f"mixed precision: {{key}}{{now}} -> {want} (numerics change: check the metric)",
        f"mixed precision: the Trainer's precision {want} (numerics change: check the metric)",
        alters=True,
        facts=f,
    )


def _bf16(f: RunFacts) -> Candidate | None:
    """16-mixed's GradScaler syncs every step; bf16-mixed needs no scaler (GPUs with bf16)."""
    if f.device != "cuda" or f.cuda_bf16 is False:
        return None
    key = find_key(f.config, ("precision",), prefer=RUNNER_SECTIONS)
    if f.precision == "bf16-mixed" or (key is not None and str(key.value) == "bf16-mixed"):
        return None
    return _candidate(
        "precision",
        key,
        "bf16-mixed",
        "bf16-mixed instead of float16 with a GradScaler (no per-step inf check): {key}{now} -> "
        "bf16-mixed (numerics change: check the metric)",
        "bf16-mixed instead of float16 with a GradScaler (no per-step inf check): the Trainer's "
        "precision bf16-mixed (numerics change: check the metric)",
        alters=True,
        facts=f,
        what="bf16-mixed instead of float16 with a GradScaler (no per-step inf check; numerics "
        "change: check the metric)",
    )


def _fused(f: RunFacts) -> Candidate | None:
    """A fused optimizer step: one kernel for all parameters instead of a host loop over them
    (and, with a GradScaler, the inf check stays on the device)."""
    node = optimizer_node(f.config)
    if node is None:
        # no config node (a plain script): the runtime knob rebuilds the optimizer the run
        # built, when it is Adam, AdamW or SGD
        return Candidate(
            "fused_optimizer",
            _framework_words(f, "fused_optimizer", True)
            or "a fused optimizer step (Adam / AdamW / SGD with fused=True in "
            "configure_optimizers: one kernel for all parameters, no per-parameter host loop)",
            None,
            knob=family_knob("fused_optimizer", True),
        )
    if node.name not in FUSED_OPTIMIZERS or node.fused is True:
        return None
    what = (
        f"a fused optimizer step (torch.optim.{node.name} with fused=True: one kernel for all "
        "parameters, no per-parameter host loop)"
    )
    if node.has_fused_key:
        return Candidate(
            "fused_optimizer", f"{what}: `{node.path}.fused` -> true", f"{node.path}.fused=true"
        )
    return Candidate(
        "fused_optimizer", f"{what}, added to `{node.path}`", f"+{node.path}.fused=true"
    )


def _cudnn_benchmark(f: RunFacts) -> Candidate | None:
    if f.device != "cuda":
        return None
    return _switch_on(
        "cudnn_benchmark",
        find_key(f.config, ("benchmark", "cudnn_benchmark"), prefer=RUNNER_SECTIONS),
        "let cuDNN pick the fastest convolution algorithms: {key}{now} -> true",
        "let cuDNN pick the fastest convolution algorithms (the Trainer's benchmark=True; "
        "fixed input shapes)",
        facts=f,
    )


def _postprocess(f: RunFacts) -> list[Candidate]:
    """Fewer contours per image: halve the candidate cap, raise the box score threshold."""
    out = []
    cap = find_key(f.config, ("max_candidates",), prefer=("postprocess",))
    now = _as_int(cap.value) if cap is not None else None
    if cap is None or now:
        want = max(1, (now or 1000) // 2)
        out.append(
            _candidate(
                "postprocess",
                cap,
                want,
                f"keep at most {want} contours per image: {{key}}{{now}} -> {want}",
                "keep fewer candidate contours per image (the postprocessor's cap)",
                alters=True,
                eval_time=True,
                facts=f,
            )
        )
    thresh = find_key(f.config, ("box_thresh",), prefer=("postprocess",))
    value = thresh.value if thresh is not None else None
    if thresh is None or (isinstance(value, int | float) and value < 0.9):
        want_t = round(min(0.9, float(value or 0.5) + 0.1), 2)
        out.append(
            _candidate(
                "postprocess",
                thresh,
                want_t,
                f"drop low-score boxes earlier: {{key}}{{now}} -> {want_t}",
                "drop low-score boxes earlier (raise the postprocessor's box score threshold)",
                alters=True,
                eval_time=True,
                facts=f,
            )
        )
    return out


def candidates_for(cause: str, facts: RunFacts, *, part: str | None = None) -> list[Candidate]:
    """Changes to try for ``cause`` (a finding id: ``input_bound``, ``compute_bound``,
    ``slow_postprocess``, ``unattributed``, ``gpu_underused``, ``launch_overhead``,
    ``dispatch_overhead``, ``overhead_bound``, ``data_loading``, ``worker_memory``, ``fp16_scaler``,
    ``optimizer_host_bound``, ``layout_conversion``; ``host_sync`` has none: its change is in
    the code that reads the tensor, named in words), most promising first; ``part`` is the
    worker part that explains an input-bound stage (``targets`` puts the target cache first).
    Compute changes come only when ``facts.compute_headroom`` is not ``False``."""
    found: list[Candidate | None] = []
    compute_ok = facts.compute_headroom is not False
    if cause in (FindingId.INPUT_BOUND, TraceFindingId.DATA_LOADING):
        if part == "targets":
            found.append(_target_cache(facts))
        found += [
            _workers(facts),
            _persistent(facts, planned=True),
            _prefetch(facts),
            _pin_memory(facts),
        ]
    elif cause == FindingId.COMPUTE_BOUND and compute_ok:
        if facts.device == "cuda":
            families = [_precision, _cudnn_benchmark, _channels_last, _compile, _batch_size]
        else:
            families = [_threads, _channels_last, _compile, _precision]
        found += [family(facts) for family in families]
    elif cause == FindingId.SLOW_POSTPROCESS:
        found += _postprocess(facts)
    elif cause in (FindingId.UNATTRIBUTED, FindingId.WORKER_MEMORY):
        # worker_memory: non-persistent workers copy the dataset again every epoch
        found.append(_persistent(facts, planned=False))
    elif cause == FindingId.GPU_UNDERUSED:
        found += [_workers(facts), _pin_memory(facts), _batch_size(facts)]
    elif cause == TraceFindingId.FP16_SCALER:
        # bf16 drops the scaler; a fused optimizer keeps the inf check on the device
        found += [_bf16(facts), _fused(facts)]
    elif cause == FindingId.OVERHEAD_BOUND:
        # the per-op cost is paid per step: more samples per step, fewer and fused ops
        found += [_batch_size(facts), _compile(facts), _fused(facts)]
    elif cause == FindingId.OPTIMIZER_HOST_BOUND:
        found.append(_fused(facts))
    elif cause == FindingId.LAYOUT_CONVERSION:
        found.append(_channels_last(facts))
    elif cause in (TraceFindingId.LAUNCH_OVERHEAD, TraceFindingId.DISPATCH_OVERHEAD) and compute_ok:
        found += [_compile(facts), _channels_last(facts)]
        if facts.device == "cpu":
            found.append(_threads(facts))
    return [c for c in found if c is not None]
