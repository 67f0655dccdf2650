"""Which Lightning actions are not worth timing: the hook they run does nothing.

Most actions of a training step run an inherited ``pass`` (Lightning dispatches every hook to
every callback and calls the module's inherited hooks). Listening to them costs more than they
take. The phase clock and the profiler's action ranges leave the same ones out, so a trace and
the clock agree on ``hooks``.
"""

from __future__ import annotations

import dis
from typing import Any

import lightning as L

from trainperf.core.actions import CALLBACK, DATAMODULE, MODULE

# Instruction names that carry no work (3.11 fills code with these; 3.12+ adds RETURN_CONST).
_NO_WORK_OPS = frozenset({"RESUME", "NOP", "CACHE", "EXTENDED_ARG"})


def does_nothing(fn: Any) -> bool:
    """Whether ``fn`` (a hook as found on a class) only returns a constant or one of its
    arguments: Lightning's inherited hooks (``pass``) and ``on_before_batch_transfer``
    (``return batch``). Anything else (not a plain function, wrapped, unreadable) is work."""
    code = getattr(fn, "__code__", None)
    if code is None or hasattr(fn, "__wrapped__"):
        return False
    try:
        ops = [i.opname for i in dis.get_instructions(code) if i.opname not in _NO_WORK_OPS]
    except Exception:
        return False
    return ops in (["LOAD_CONST", "RETURN_VALUE"], ["LOAD_FAST", "RETURN_VALUE"], ["RETURN_CONST"])


def untimed_hook(trainer: L.Trainer, kind: str, target: str, hook: str) -> bool:
    """Whether the action of ``hook`` on ``target`` (``trainperf.core.actions.Action`` fields) runs
    nothing worth timing on ``trainer``: every callback of that state key (or the module /
    datamodule of that class name) runs a function that does nothing (:func:`does_nothing`), or
    only our own batch-size bookkeeping (``RecorderCallback._untimed_hook``)."""
    owners: list[Any] = []
    if kind == CALLBACK:
        owners = [c for c in trainer.callbacks if c.state_key == target]  # type: ignore[attr-defined]
    elif kind in (MODULE, DATAMODULE):
        owner = _module(trainer, kind)
        # Lightning names these actions by the instance's class name.
        if owner is not None and type(owner).__name__ == target:
            owners = [owner]
    if kind == CALLBACK and all(getattr(o, "_untimed_hook", lambda _: False)(hook) for o in owners):
        return bool(owners)  # our own bookkeeping (RecorderCallback._untimed_hook)
    functions = [getattr(o, hook, None) for o in owners]
    # A bound method is judged by its function; an instance attribute (a user's own
    # function set on the object) by itself.
    return bool(functions) and all(does_nothing(getattr(f, "__func__", f)) for f in functions)


def _module(trainer: L.Trainer, kind: str) -> Any:
    return trainer.lightning_module if kind == MODULE else getattr(trainer, "datamodule", None)


def lightning_own_hook(trainer: L.Trainer, kind: str, hook: str) -> bool:
    """Whether the trainer's module (``kind`` MODULE) or datamodule runs Lightning's own
    ``hook``: neither its class nor the instance replaces the base class's."""
    owner = _module(trainer, kind)
    if owner is None or hook in vars(owner):  # set on the instance: the user's
        return False
    base = L.LightningModule if kind == MODULE else L.LightningDataModule
    return getattr(type(owner), hook, None) is getattr(base, hook, None)
