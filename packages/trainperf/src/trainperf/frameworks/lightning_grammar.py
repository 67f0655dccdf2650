"""Lightning's names for its work, as data: the grammar of its profiler actions and trace spans.

Lightning names every unit of work it runs through its profiler interface
(``trainer.profiler.start(name)`` / ``stop(name)``), and the same names appear as spans in traces
recorded by ``PyTorchProfiler``, prefixed ``[pl][profile]``. The live phase clock
(:mod:`trainperf.lightning.attribution`) and the trace analyzer (:mod:`trainperf.analysis.trace`,
through :data:`GRAMMAR`, registered in :mod:`trainperf.core.actions`) both classify those names
with :func:`classify_action`. This module imports no Lightning: ``trainperf analyze`` reads a
Lightning trace without it.

Names seen in Lightning 2.6 (see ``tests/integration/test_interpose_seams.py``):

- ``[Callback]{state_key}.{hook}`` -> ``callbacks`` (owner: the callback's class name);
  checkpoint hooks (``on_save_checkpoint``, ``state_dict``...) -> ``checkpoint``.
- ``[LightningModule]{Class}.{hook}`` and ``[LightningDataModule]{Class}.{hook}`` ->
  ``module_hooks`` (owner ``Class.hook``), except the hooks of ``_MODULE_HOOK_PHASES``.
- ``[Strategy]{Class}.{hook}``: the hooks of ``_STRATEGY_HOOK_PHASES`` (``training_step`` ->
  ``forward``, ...).
- ``[_TrainingEpochLoop].train_dataloader_next``, ``[_EvaluationLoop].val_next`` /
  ``test_next`` -> ``data_wait``.
- ``optimizer_step`` (manual optimization) -> ``optimizer``; ``save_checkpoint`` ->
  ``checkpoint``.
- ``run_training_epoch``, ``run_training_batch``, the strategy's other hooks and names we do not
  know are transparent: their time stays with the enclosing action.

Nested actions: Lightning runs ``training_step`` and ``backward`` inside ``optimizer_step``'s
closure: they are forward and backward, not optimizer.
"""

from __future__ import annotations

from functools import lru_cache

from trainperf.core.actions import (
    CALLBACK,
    DATAMODULE,
    LOOP,
    MODULE,
    OTHER,
    STRATEGY,
    Action,
    SpanGrammar,
    callback_class_name,
)

__all__ = ["GRAMMAR", "LOOP_PLACE", "classify_action"]

_CHECKPOINT_HOOKS = ("on_save_checkpoint", "on_load_checkpoint", "state_dict", "load_state_dict")
# LightningModule / LightningDataModule hooks whose work is not the module's "own hook" work but
# one of the step's phases; any other hook is "module_hooks".
_MODULE_HOOK_PHASES = {
    "on_before_batch_transfer": "transfer",
    "transfer_batch_to_device": "transfer",
    "on_after_batch_transfer": "transfer",
    "optimizer_step": "optimizer",
    "optimizer_zero_grad": "optimizer",
    "configure_gradient_clipping": "optimizer",
    "lr_scheduler_step": "optimizer",
    **dict.fromkeys(_CHECKPOINT_HOOKS, "checkpoint"),
}
# The strategy's hooks that run the user's work; its others are Lightning's own bookkeeping.
_STRATEGY_HOOK_PHASES = {
    **dict.fromkeys(("training_step", "validation_step", "test_step", "predict_step"), "forward"),
    "batch_to_device": "transfer",
    "backward": "backward",
    "optimizer_step": "optimizer",
}
_PREFIXES = (
    ("[Callback]", CALLBACK),
    ("[LightningModule]", MODULE),
    ("[LightningDataModule]", DATAMODULE),
    ("[Strategy]", STRATEGY),
)
_TRACE_PREFIX = "[pl][profile]"

#: The place of a sync point that Lightning's loop makes outside every hook (its logger
#: connector converting ``prog_bar`` metrics with ``.item()`` after the batch-end hooks).
LOOP_PLACE = "Lightning loop (outside hooks)"


@lru_cache(maxsize=4096)
def classify_action(name: str) -> Action:
    """Classify one action name, plain or as a ``PyTorchProfiler`` trace records it (see the
    module docstring). Pure; cached, because the same few hundred names recur at every step."""
    name = name.removeprefix(_TRACE_PREFIX)
    for prefix, kind in _PREFIXES:
        if not name.startswith(prefix):
            continue
        # ``{owner}.{hook}``: a callback's owner may hold a dict repr with dots in it
        # (``ModelCheckpoint{'dirpath': '/a/b.c'}``); the hook never has one.
        owner, dot, hook = name[len(prefix) :].rpartition(".")
        if not dot:
            owner, hook = hook, ""
        if kind == CALLBACK:
            phase = "checkpoint" if hook in _CHECKPOINT_HOOKS else "callbacks"
            return Action(phase, kind, callback_class_name(owner), hook, owner)
        if kind == STRATEGY:
            return Action(_STRATEGY_HOOK_PHASES.get(hook, ""), kind, "", hook, owner)
        phase = _MODULE_HOOK_PHASES.get(hook, "module_hooks")
        return Action(phase, kind, f"{owner}.{hook}", hook, owner)
    if name.startswith("[") and name.endswith("_next"):
        return Action("data_wait", LOOP, "", name.rpartition(".")[2])
    phase = {"optimizer_step": "optimizer", "save_checkpoint": "checkpoint"}.get(name, "")
    return Action(phase, OTHER, "", name)


_HOOK_SYNC = (
    "{hook} reads a device tensor every step: accumulate on the device and read it once per N "
    "steps, self.log(..., on_step=False)"
)

#: Lightning's grammar, as the neutral layers read it.
GRAMMAR = SpanGrammar(
    framework="lightning",
    classify=classify_action,
    action_prefix=_TRACE_PREFIX,
    label_prefix="[pl]",
    module_prefix="[pl][module]",
    loop_place=LOOP_PLACE,
    sync_advice={
        CALLBACK: (
            "{hook} reads a device tensor every step (a progress bar or logger reading the "
            "trainer's metrics, which Lightning converts with .item()): read them only for a "
            "line it prints or every N steps, raise the progress bar's refresh_rate, or log "
            "with self.log(..., on_step=False)"
        ),
        LOOP: (
            "Lightning's loop converts every prog_bar=True metric with .item() after each batch "
            "(Lightning issues 21232, 20995): log per-step tensors with prog_bar=False or "
            "self.log(..., on_step=False)"
        ),
        MODULE: _HOOK_SYNC,
        STRATEGY: _HOOK_SYNC,
    },
    packages=("lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities"),
)
