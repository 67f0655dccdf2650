"""Where each host-device sync point of a trace is: operator, hook, user line.

Where each host-device sync point of a trace is: its outermost operator, the framework hook
around it and, in a trace recorded with ``with_stack=True``, the user's Python line behind it.

The hook is the innermost action span of a registered framework grammar
(:func:`trainperf.core.actions.span_action`) that holds the call and is a hook (a callback, the
model's or data module's hook, a strategy call); a call of such a framework's run outside every
hook is the framework's own loop (its grammar's ``loop_place``); a plain torch trace names
torch's labels (``Optimizer.step#AdamW.step``).

``torch.profiler.profile(with_stack=True)`` writes ``python_function`` events (one per Python or
built-in call, named ``path(line): function`` or ``<built-in method item of Tensor object at
0x...>``) on the same thread as the operators they call, so the call tree that
:func:`~trainperf.analysis.trace.ingest.load_traces` builds from the times
(:attr:`EventTable.parent`) puts
``aten::item`` under ``<built-in method item ...>`` under the user's function. The profiler names
a Python frame by the **first line of its function** (``co_firstlineno``, the ``def`` line), not by
the line of the call inside it: a trace names the function; the live
:mod:`trainperf.probe.sync_debug` names the exact line.

:func:`sync_sites` walks up from each sync call to the innermost frame of the user's code (a frame
that is not a built-in, not the standard library and not a framework package such as torch or
a registered framework's) and counts the calls per site and per step. Traces without Python
events give no sites.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np

from trainperf.analysis.trace.table import EventTable, Kind
from trainperf.core.actions import (
    HOOK_KINDS,
    grammar_of,
    label_prefixes,
    library_packages,
    span_action,
)

__all__ = [
    "FRAMEWORK_PACKAGES",
    "SyncCall",
    "SyncSite",
    "is_user_frame",
    "parse_frame",
    "sync_calls",
    "sync_sites",
]

#: Top-level packages whose frames are never "the user's code" (their callers are).
FRAMEWORK_PACKAGES = frozenset(
    {
        "torch",
        "torchvision",
        "torchmetrics",
        "numpy",
        "wandb",
        "_pytest",
        "pytest",
        "pluggy",
        "tqdm",
        "rich",
    }
)
_STDLIB = frozenset(sys.stdlib_module_names)
_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$")
_BUILTIN = re.compile(
    r"^<built-in (?:method (?P<meth>\w+) of (?P<cls>\w+) object|function (?P<fn>\w+))"
)
#: Deepest Python stack walked above a sync call (a framework's loops run ~60 frames deep).
_MAX_DEPTH = 400


@dataclass(frozen=True)
class SyncSite:
    """The sync points of one place: one framework hook, one outermost operator and, in a trace
    recorded with ``with_stack=True``, one function of the user's code.

    Args:
        hook: the innermost framework action around the calls, without its trace prefix
            (``[Callback]PlainProgressBar.on_train_batch_end``), the grammar's ``loop_place``
            for calls of the framework's loop outside every hook, else the innermost torch
            label
            (``Optimizer.step#AdamW.step``); ``None`` where nothing names one.
        op: the outermost operator above the blocking call (``aten::item``), or the call's own
            name where no operator holds it.
        file: the user's source file as the profiler wrote it (relative to its ``sys.path``
            entry); ``None`` without Python stacks.
        line: the first line of the function (the trace does not record the calling line).
        function: the function's name.
        calls: sync points here in the analysed steps.
        per_step: ``calls`` per step.
        ms_per_step: host time blocked in them per step (ms).
        waited_per_step: of ``per_step``, those that waited for device work (a kernel or copy
            ended while they blocked); the others found the device idle.
        via: what the user's code called that synced (``Tensor.item``, ``torch/_tensor.py:
            __format__`` ...), the most frequent when several; ``""`` without stacks.
        ops: the blocking calls' names (``cudaStreamSynchronize`` ...).
    """

    hook: str | None
    op: str
    file: str | None
    line: int | None
    function: str | None
    calls: int
    per_step: float
    ms_per_step: float
    waited_per_step: float
    via: str
    ops: tuple[str, ...]

    @property
    def frame(self) -> str | None:
        """``file:line function``, ``None`` without stacks."""
        if self.file is None:
            return None
        return f"{self.file}:{self.line} {self.function}"

    @property
    def where(self) -> str:
        """``hook > op`` and the user's frame where known."""
        place = " > ".join(p for p in (self.hook, self.op) if p)
        return f"{place} ({self.frame})" if self.frame else place

    def as_evidence(self) -> dict[str, object]:
        """JSON-ready form for a finding's evidence."""
        return {
            "hook": self.hook,
            "op": self.op,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "per_step": round(self.per_step, 2),
            "ms_per_step": round(self.ms_per_step, 3),
            "waited_per_step": round(self.waited_per_step, 2),
            "via": self.via,
            "ops": list(self.ops),
        }


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """``(file, line, function)`` of a ``python_function`` event name; ``None`` for built-ins
    and anything else."""
    g = _FRAME.match(name)
    if g is None:
        return None
    return g.group("file"), int(g.group("line")), g.group("func")


def is_user_frame(name: str) -> bool:
    """Whether a ``python_function`` event name is a frame of the user's code: a
    ``file(line): function`` frame outside the standard library, site-packages and
    :data:`FRAMEWORK_PACKAGES`."""
    parsed = parse_frame(name)
    if parsed is None:
        return False
    path = parsed[0].replace("\\", "/")
    if "site-packages/" in path or "dist-packages/" in path or path.startswith("<"):
        return False
    if path.startswith("/") and ("/lib/python3" in path or "/lib64/python3" in path):
        return False
    head = path.split("/", 1)[0]
    top = head[:-3] if head.endswith(".py") else head
    return top not in FRAMEWORK_PACKAGES and top not in _STDLIB and top not in library_packages()


def _via(name: str) -> str:
    g = _BUILTIN.match(name)
    if g is not None:
        if g.group("meth"):
            return f"{g.group('cls')}.{g.group('meth')}"
        return str(g.group("fn"))
    parsed = parse_frame(name)
    if parsed is not None:
        return f"{parsed[0]}: {parsed[2]}"
    return name


#: torch's labels that are no operator (the outermost operator is looked for below them; a
#: registered framework's labels are none either).
_LABEL_PREFIXES = ("ProfilerStep#", "Optimizer.", "enumerate(DataLoader)#", "##")
#: torch's own labels that name a place where no framework hook does.
_TORCH_LABELS = ("Optimizer.step#", "Optimizer.zero_grad#", "enumerate(DataLoader)#")


@dataclass(frozen=True)
class SyncCall:
    """One sync point and where it is: the blocking call's name (``call``), its outermost
    operator (``op``), its framework hook (``hook``, see :class:`SyncSite`), the user's frame
    (its event name) and the Python frame just below it (``via``) where the trace has stacks,
    the ns blocked and whether it waited for device work."""

    call: str
    op: str
    hook: str | None
    frame: str | None
    via: str | None
    dur: int
    waited: bool = True


def _hook_name(name: str) -> str | None:
    """The hook a label names: a framework action that is a hook (callback, module, datamodule
    or strategy call; not a transparent loop action), or a torch label; else ``None``."""
    action = span_action(name)
    if action is not None:
        grammar = grammar_of((name,))
        prefix = grammar.action_prefix if grammar is not None else ""
        return name.removeprefix(prefix) if action.kind in HOOK_KINDS else None
    return name if name.startswith(_TORCH_LABELS) else None


def _places(table: EventTable, idx: np.ndarray) -> tuple[list[str], list[str | None]]:
    """The outermost operator and the innermost hook of each event ``idx`` (walking up its
    parents, see :class:`SyncSite`)."""
    names = table.names
    labels = (*_LABEL_PREFIXES, *label_prefixes())
    is_label = table.name_ids(lambda s: s.startswith(labels))
    grammar = grammar_of(names)
    loop_place = grammar.loop_place if grammar is not None else ""
    hook_of = [_hook_name(n) for n in names]
    ops: list[str] = []
    hooks: list[str | None] = []
    end = table.start + table.dur
    for i in idx.tolist():
        op = names[table.name[i]]
        hook: str | None = None
        a = int(table.parent[i])
        for _ in range(_MAX_DEPTH):
            if a < 0:
                break
            code = int(table.name[a])
            # a span that overlaps without nesting (a callback span around the profiler's
            # next ProfilerStep) is open at the call's start but does not hold it
            if hook is None and hook_of[code] is not None and end[a] >= end[i]:
                hook = hook_of[code]
            if hook is None and table.kind[a] == Kind.CPU_OP and not is_label[code]:
                op = names[code]  # outermost so far, below the hook
            a = int(table.parent[a])
        if hook is None and loop_place and table.kind[i] != Kind.SYNC:
            hook = loop_place
        ops.append(op)
        hooks.append(hook)
    return ops, hooks


def sync_calls(
    table: EventTable, sync_idx: np.ndarray, waited: np.ndarray | None = None
) -> list[SyncCall]:
    """Each sync point ``sync_idx`` (event indexes of blocking calls, usually those inside the
    steps) with its place: outermost operator, framework hook and, in a trace with Python
    stacks, the user's function behind it (the innermost frame of the user's code above it;
    ``None`` where there is none). ``waited``: per call, whether it waited for device work
    (default: all did)."""
    if sync_idx.size == 0:
        return []
    found = np.full(sync_idx.size, -1, np.int64)  # the user frame
    below = np.full(sync_idx.size, -1, np.int64)  # the Python frame just below it
    if (table.kind == Kind.PYTHON).any():
        user = table.name_ids(is_user_frame)
        is_py = table.kind == Kind.PYTHON
        last_py = np.full(sync_idx.size, -1, np.int64)
        anc = table.parent[sync_idx].astype(np.int64)
        for _ in range(_MAX_DEPTH):
            open_ = (anc >= 0) & (found < 0)
            if not open_.any():
                break
            a = anc[open_]
            hit = is_py[a] & user[table.name[a]]
            rows = np.flatnonzero(open_)
            found[rows[hit]] = a[hit]
            below[rows[hit]] = last_py[rows[hit]]
            py = is_py[a] & ~hit
            last_py[rows[py]] = a[py]
            anc[rows] = np.where(hit, a, table.parent[a])
    ops, hooks = _places(table, sync_idx)
    names = table.names
    done = np.ones(sync_idx.size, bool) if waited is None else waited
    return [
        SyncCall(
            call=names[table.name[sync_idx[k]]],
            op=ops[k],
            hook=hooks[k],
            frame=names[table.name[found[k]]] if found[k] >= 0 else None,
            via=_via(names[table.name[below[k]]]) if below[k] >= 0 else None,
            dur=int(table.dur[sync_idx[k]]),
            waited=bool(done[k]),
        )
        for k in range(sync_idx.size)
    ]


def sync_sites(calls: list[SyncCall], n_steps: int) -> list[SyncSite]:
    """The :class:`SyncSite` of each place among ``calls`` over ``n_steps`` steps, the most
    host time blocked first."""
    per = max(n_steps, 1)
    sites: dict[tuple[str | None, str, str | None], list[SyncCall]] = {}
    for call in calls:
        sites.setdefault((call.hook, call.op, call.frame), []).append(call)
    out = []
    for (hook, op, frame), members in sites.items():
        parsed = parse_frame(frame) if frame is not None else None
        vias = [c.via for c in members if c.via is not None]
        via = max(sorted(set(vias)), key=vias.count) if vias else ""
        out.append(
            SyncSite(
                hook=hook,
                op=op,
                file=parsed[0] if parsed else None,
                line=parsed[1] if parsed else None,
                function=parsed[2] if parsed else None,
                calls=len(members),
                per_step=len(members) / per,
                ms_per_step=float(sum(c.dur for c in members)) / per / 1e6,
                waited_per_step=sum(c.waited for c in members) / per,
                via=via,
                ops=tuple(sorted({c.call for c in members})),
            )
        )
    return sorted(out, key=lambda s: (-s.ms_per_step, -s.calls, s.hook or "", s.op, s.frame or ""))
