"""What a Lightning profiler action is: the phase its time belongs to and who spent it.

Lightning names every unit of work it runs through its profiler interface
(``trainer.profiler.start(name)`` / ``stop(name)``, and the same names appear as spans in traces
recorded by ``PyTorchProfiler``, prefixed ``[pl][profile]``). Both the live phase clock and the
trace analyzer classify those names here, so the two can never disagree on what a name means.

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

Nested actions: the innermost one that is not transparent owns the time (Lightning runs
``training_step`` and ``backward`` inside ``optimizer_step``'s closure: they are forward and
backward, not optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from trainperf.core.clock import PHASES

# The clock's phases (``trainperf.core.clock.PHASES``) are the only phase names, in traces too. A
# trace
# cannot tell three of them apart from the work around them (nothing in it marks ``perf_phase``
# blocks or a DDP wait); this mapping is the only place that says where their time goes.

#: Clock phase -> the trace phase whose time includes it: postprocess and metric run inside the
#: step function (forward); a wait for another rank is time no label in the trace claims.
POOLED_IN_TRACE: dict[str, str] = {
    "postprocess": "forward",
    "metric": "forward",
    "sync_wait": "unattributed",
}
#: The phases of a trace's step breakdown: the clock's, in its order, less those pooled above.
TRACE_PHASES: tuple[str, ...] = tuple(p for p in PHASES if p not in POOLED_IN_TRACE)


def trace_phase(phase: str) -> str:
    """The phase of :data:`TRACE_PHASES` that holds clock phase ``phase``'s time in a trace;
    a name the clock does not know is ``unattributed`` (never dropped)."""
    phase = POOLED_IN_TRACE.get(phase, phase)
    return phase if phase in TRACE_PHASES else "unattributed"


CALLBACK = "callback"
MODULE = "module"
DATAMODULE = "datamodule"
STRATEGY = "strategy"
LOOP = "loop"
OTHER = "other"

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


@dataclass(frozen=True, slots=True)
class Action:
    """The meaning of one action name (as Lightning formats it).

    Args:
        phase: the phase (``trainperf.core.clock.PHASES``) its own time belongs to; ``""`` for a
            transparent action whose time stays with the enclosing one.
        kind: ``"callback"``, ``"module"``, ``"datamodule"``, ``"strategy"``, ``"loop"`` (data
            fetch) or ``"other"``.
        owner: who spent it, for the per-callback and per-hook split: the callback's class name
            for callbacks (:func:`callback_class_name`), ``Class.hook`` for LightningModule and
            DataModule hooks, ``""`` otherwise.
        target: the text between the prefix and the hook: a callback's full ``state_key``
            (two instances of one class differ here when their state keys do), the module's or
            strategy's class name; ``""`` for unprefixed names.
    """

    phase: str
    kind: str
    owner: str
    hook: str
    target: str = ""


def callback_class_name(state_key: str) -> str:
    """The class name inside a callback's ``state_key``: ``ModelCheckpoint{'monitor': ...}`` ->
    ``ModelCheckpoint``; a qualified name keeps its last part (``f.<locals>.Slow`` -> ``Slow``)."""
    brace = state_key.find("{")
    base = state_key if brace < 0 else state_key[:brace]
    return base.rsplit(".", 1)[-1]


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
