"""Apply a ``trainperf try`` trial's runtime knobs to a Lightning run.

Apply a ``trainperf try`` trial's runtime knobs (:mod:`trainperf.core.knobs`) to a run we did not
configure, at ``setup``, through public APIs:

- ``torch``: ``torch.set_num_threads``, ``torch.set_float32_matmul_precision``,
  ``torch.backends.cudnn.benchmark`` (Lightning reads its ``benchmark`` flag in the Trainer's
  constructor, before any hook: setting it here sticks).
- ``model``: ``LightningModule.to(memory_format=torch.channels_last)``; ``torch.compile`` of the
  module's ``forward`` (what Lightning does with a module passed as ``torch.compile(model)``).
- ``optimizer.fused``: the module's ``configure_optimizers`` wrapped (an instance attribute,
  which Lightning's hook call finds first) so that each ``torch.optim.Adam`` / ``AdamW`` / ``SGD``
  it returns steps fused: set on the optimizer object itself, before its first step (its state
  is empty), as its constructor does with ``fused=True``, so learning-rate schedulers built on
  it keep their reference. Lightning calls the hook in ``Strategy.setup``, after this ``setup``
  and after moving the module to its device; an optimizer that cannot be fused (another class,
  ``differentiable``, parameters on a device or of a dtype the fused kernels do not take) ends
  the trial there.
- ``trainer.precision``: the strategy's ``precision_plugin`` (a public property) replaced by
  Lightning's own ``Precision`` / ``MixedPrecision``. ``setup`` runs before ``Strategy.setup``
  connects the plugin to the model and optimizers, so the Trainer can still take it; only where
  the run uses one of those two plugins (single-device and DDP strategies): a strategy with a
  plugin of its own (FSDP, DeepSpeed, ...) cannot, and Lightning does not run ``16-mixed`` on CPU.
- ``loader`` knobs: the training DataLoader re-created with the new arguments when the strategy
  processes it (``Strategy.process_dataloader``), the way Lightning re-creates loaders to inject
  distributed samplers (private functions, so accepted only in the Lightning range of
  :data:`~trainperf.lightning.interpose.TESTED_VERSIONS`; pinned by
  ``tests/integration/test_try_knobs.py``). The sampler and a custom batch sampler are kept.

Each knob's fate goes to the trial's ``perf/knobs.jsonl`` (``applied`` with what changed, or
``not applicable`` with why). A knob the run cannot take ends the trial
(:class:`KnobNotApplicable`) rather than measuring the unchanged run twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader

from trainperf.core.knobs import Knob
from trainperf.lightning.interpose import check_versions
from trainperf.recording.knob_effects import (
    KnobLog,
    KnobNotApplicable,
    KnobRefused,
    apply_torch_knob,
    fuse_optimizer,
)

__all__ = ["KnobNotApplicable", "apply_knobs", "recreate_loader"]


def _model_knob(module: L.LightningModule, knob: Knob) -> str:
    if knob.name == "model.channels_last":
        fmt = torch.channels_last if knob.value else torch.contiguous_format
        four_d = sum(1 for p in module.parameters() if p.dim() == 4)
        module.to(memory_format=fmt)
        note = f"module converted to {'channels_last' if knob.value else 'contiguous'}"
        return note + (f" ({four_d} 4-D parameters)" if four_d else " (it has no 4-D parameter)")
    # model.compile
    if knob.value is False:
        return "not compiled"
    backend = "inductor" if knob.value is True else str(knob.value)
    known = torch.compiler.list_backends(exclude_tags=())
    if backend not in known:
        have = ", ".join(known)
        raise KnobRefused(f"torch.compile has no backend {backend!r} here (it has {have})")
    # an instance attribute: nn.Module keeps plain callables in __dict__, and self(...) calls it
    module.forward = torch.compile(module.forward, backend=backend)  # type: ignore[method-assign]
    return f"{type(module).__name__}.forward compiled (backend {backend})"


def _optimizers_in(returned: object) -> list[torch.optim.Optimizer]:
    """The optimizers in what ``configure_optimizers`` may return (an optimizer, a list or tuple
    of them, dicts with an ``optimizer`` key, or lists of those next to schedulers)."""
    if isinstance(returned, torch.optim.Optimizer):
        return [returned]
    if isinstance(returned, dict):
        return _optimizers_in(returned.get("optimizer"))
    if isinstance(returned, list | tuple):
        return [o for item in returned for o in _optimizers_in(item)]
    return []


def _optimizer_knob(module: L.LightningModule, knob: Knob, log: KnobLog) -> None:
    """Wrap ``module.configure_optimizers`` so that its optimizers step fused (``knob.value``
    true); the fate is logged when Lightning calls it."""
    if knob.value is not True:
        log.write(knob, "applied", "optimizers left as configure_optimizers builds them")
        return
    original = module.configure_optimizers

    def configure_optimizers() -> object:
        returned = original()
        found = _optimizers_in(returned)
        if not found:
            raise log.refuse([knob], "configure_optimizers returned no optimizer")
        try:
            notes = [fuse_optimizer(o) for o in found]
        except KnobRefused as exc:
            raise log.refuse([knob], str(exc)) from exc
        log.write(knob, "applied", "; ".join(notes))
        return returned

    # an instance attribute: Lightning's hook call reads the attribute of the module
    module.configure_optimizers = configure_optimizers  # type: ignore[method-assign,assignment]


def _precision_knob(trainer: L.Trainer, knob: Knob) -> str:
    from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
    from lightning.pytorch.plugins.precision import MixedPrecision, Precision

    strategy = trainer.strategy
    current = strategy.precision_plugin
    if type(current) not in (Precision, MixedPrecision):
        raise KnobRefused(
            f"the run's precision plugin is {type(current).__name__} (its strategy "
            f"{type(strategy).__name__} brings its own), which cannot be swapped after the "
            f"Trainer is built; set Trainer(precision={str(knob.value)!r}) by hand and compare"
        )
    accelerator = trainer.accelerator
    if isinstance(accelerator, CUDAAccelerator):
        device = "cuda"
    elif isinstance(accelerator, CPUAccelerator):
        device = "cpu"
    else:
        raise KnobRefused(
            f"precision is swapped only on CPU and CUDA, not on {type(accelerator).__name__}"
        )
    value = str(knob.value)
    if value == "16-mixed" and device == "cpu":
        raise KnobRefused(
            "Lightning does not run 16-mixed on CPU (AMP with float16 is not supported there; "
            "bf16-mixed is the CPU's mixed precision)"
        )
    before = str(current.precision)
    plugin: Precision = Precision() if value == "32-true" else MixedPrecision(value, device)  # type: ignore[arg-type]
    strategy.precision_plugin = plugin
    return f"precision {before} -> {value}"


def recreate_loader(loader: DataLoader[Any], knobs: Sequence[Knob]) -> tuple[DataLoader[Any], str]:
    """``loader`` re-created with the loader ``knobs``' arguments (same dataset, sampler, batch
    sampler and other arguments), and a note of what changed;
    :class:`~trainperf.recording.knob_effects.KnobRefused` with why when it cannot be."""
    from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.utilities.data import _get_dataloader_init_args_and_kwargs

    batch_sampler = loader.batch_sampler
    custom_batches = batch_sampler is not None and type(batch_sampler) is not BatchSampler
    name = type(loader).__name__
    try:
        args, kwargs = _get_dataloader_init_args_and_kwargs(loader, loader.sampler)
    except (TypeError, ValueError, MisconfigurationException) as exc:
        raise KnobRefused(f"Lightning cannot re-create the training {name}: {exc}") from exc
    if custom_batches:
        kwargs["batch_sampler"] = batch_sampler  # the user's own object, not a copy
    arg_names: tuple[str, ...] = tuple(getattr(loader, "__pl_saved_arg_names", ()))
    notes = []
    for knob in knobs:
        field = knob.name.split(".", 1)[1]
        if field == "batch_size" and (batch_sampler is None or custom_batches):
            who = (
                type(batch_sampler).__name__ if custom_batches else "the dataset (batch_size=None)"
            )
            raise KnobRefused(f"the training {name}'s batches are made by {who}, not by batch_size")
        notes.append(f"{field} {getattr(loader, field, None)} -> {knob.value}")
        if field in arg_names:
            i = arg_names.index(field)
            args = (*args[:i], knob.value, *args[i + 1 :])
        else:
            kwargs[field] = knob.value
    try:
        new = _reinstantiate_wrapped_cls(loader, *args, **kwargs)
    except (TypeError, ValueError, MisconfigurationException) as exc:
        raise KnobRefused(f"the training {name} does not take {', '.join(notes)}: {exc}") from exc
    return new, f"training {name}: " + ", ".join(notes)


def _recreate_training_loaders(trainer: L.Trainer, knobs: Sequence[Knob], log: KnobLog) -> None:
    """Re-create each training DataLoader the strategy processes with the loader knobs."""
    from lightning.pytorch.trainer.states import RunningStage

    strategy = trainer.strategy
    original = strategy.process_dataloader

    def process_dataloader(dataloader: object) -> object:
        out = original(dataloader)
        if trainer.state.stage != RunningStage.TRAINING or not isinstance(out, DataLoader):
            return out
        try:
            new, note = recreate_loader(out, knobs)
        except KnobRefused as exc:
            raise log.refuse(knobs, str(exc)) from exc
        for knob in knobs:
            log.write(knob, "applied", note)
        return new

    strategy.process_dataloader = process_dataloader  # type: ignore[method-assign]


def apply_knobs(trainer: L.Trainer, knobs: Sequence[Knob], perf_dir: Path) -> None:
    """Apply ``knobs`` to ``trainer`` and its LightningModule (call from ``setup``, before the
    recorder wraps ``process_dataloader``, so it instruments the re-created loader); record each
    in ``perf_dir``'s ``perf/knobs.jsonl``. :class:`KnobNotApplicable` for one the run cannot
    take."""
    log = KnobLog(perf_dir, trainer.is_global_zero)
    loader = [k for k in knobs if k.spec.target == "loader"]
    for knob in knobs:
        try:
            if knob.spec.target == "torch":
                note = apply_torch_knob(knob)
            elif knob.spec.target == "model":
                note = _model_knob(trainer.lightning_module, knob)
            elif knob.spec.target == "trainer":
                note = _precision_knob(trainer, knob)
            elif knob.spec.target == "optimizer":
                _optimizer_knob(trainer.lightning_module, knob, log)
                continue  # logged when Lightning builds the optimizers
            else:
                continue
        except KnobRefused as exc:
            raise log.refuse([knob], str(exc)) from exc
        log.write(knob, "applied", note)
    if loader:
        # Lightning's DataLoader re-creation is private: only in the tested version range.
        reason = check_versions({"lightning": L.__version__})
        if reason is not None:
            raise log.refuse(
                loader,
                f"re-creating the DataLoader uses Lightning internals checked on a range this "
                f"Lightning ({L.__version__}) is outside of: {reason.split(';')[0]}",
            )
        _recreate_training_loaders(trainer, loader, log)
